"""The command lines' shared start: flags, quiet library logs, one-line errors, huge pages for XLA."""
