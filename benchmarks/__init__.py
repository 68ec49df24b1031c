"""Benchmark commands, each printing its numbers (the last line a JSON object) for ``records.record``
to keep as a result record."""
