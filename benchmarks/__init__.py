"""Benchmark commands: each prints numbers that docs/results.md records."""
