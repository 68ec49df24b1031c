"""Ablations: sweep config axes over seeds (``sweep``), tabulate them (``tables``), draw them (``plots``)."""
