"""Warm pools, the pure part: which pool pods to make, which to delete, which to hand out."""
