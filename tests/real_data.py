"""Where the tests find a public data set: ``data/<name>`` of the checkout (what
``python -m pipelines.download <name>`` writes), else a copy in ``../shared/data/<name>`` beside the
checkout; tests that need one skip when neither is there."""

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def data_set_dir(name: str) -> Path:
  """The folder of data set ``name``; the download's place when no copy exists (a test then skips)."""
  downloaded = CHECKOUT / 'data' / name
  beside = CHECKOUT.parent / 'shared' / 'data' / name
  return beside if beside.is_dir() and not downloaded.is_dir() else downloaded
