"""Benchmark commands: each prints the numbers the README quotes."""
