"""What to say when a data folder that ``python -m pipelines.download`` writes is missing or empty.

A folder named after one of the command's data sets (``data/multi30k``, ``data/mnist``, or the same
name anywhere else) gets the command that fetches it into that very folder; any other folder is
only named.
"""

import pathlib

#: the data sets ``python -m pipelines.download`` fetches (its ``DATA_SETS``; a test keeps them equal)
FETCHABLE = ('multi30k', 'scan', 'mnist', 'cifar10')


def fetch_hint(path) -> str:
  """``'; fetch it with `python -m pipelines.download NAME --out PATH`'`` for a folder named after a data
  set the command fetches, else ``''``."""
  name = pathlib.Path(path).name
  if name not in FETCHABLE:
    return ''
  return f'; fetch it with `python -m pipelines.download {name} --out {path}` (or set --config.data.path)'
