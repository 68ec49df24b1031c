"""Every random stream of a run, derived from one key: ``jax.random.key(seed)`` folded with the
stream's fixed number.

A stream's key is ``fold_in(key(seed), STREAM)``, so the streams of one seed are independent of
each other and of every other seed's: no run's dropout is another run's initialisation. Within a stream, the train step folds in the step
number (and the micro-batch index), so a resumed run draws what an uninterrupted one would.
The example order and augmentation are drawn on the host by numpy generators seeded with
``[stream tag, seed, ...]`` (``pipelines/steps.py``, the families' input pipelines): separate
streams per seed by the same construction.
"""

import jax

# Fixed numbers, one per stream; never reuse or renumber one (it would change what a seed means).
PARAMS = 1
DROPOUT = 2
STREAMS = {'params': PARAMS, 'dropout': DROPOUT}


def key(seed: int, stream: int) -> jax.Array:
  """The root key of ``stream`` (one of the numbers above) for ``seed``."""
  return jax.random.fold_in(jax.random.key(seed), stream)
