"""The attention explorer: a page in the browser over runs, sweeps and weights folders
(``python -m explore``; docs/explore.md)."""
