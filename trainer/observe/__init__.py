"""Watching a run: the observing config fields, step cost and MFU, profiles, Weights & Biases, reporting for tables."""
