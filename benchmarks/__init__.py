"""Benchmark commands, each printing its numbers (the last line a JSON object), and the result records:
``record`` runs a command into ``results/NAME.json``, ``reproduce`` reruns records, ``results_tables``
makes the tables of docs/results.md and the README from them."""
