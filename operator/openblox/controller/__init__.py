"""The operator: turns Sandboxes into pods, keeps profiles, reaps what has expired.

Only `handlers` knows about kopf; everything else is plain code over the API client.
"""
