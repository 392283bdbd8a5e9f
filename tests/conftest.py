"""Shared test set-up: unit tests need nothing; cluster tests get a real cluster."""
