"""Experiment configs, one file per experiment, loaded with ``--config configs/NAME.py``."""
