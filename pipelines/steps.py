"""Batches as a pure function of the step, computed ahead of the trainer by grain.

Every family makes its global training batch at step ``s`` from ``(seed, s)`` alone, so a
resumed run needs only the step from the checkpoint to replay exactly what an uninterrupted
run would have seen, and the processes' row slices together are the one-process batch.
``step_batches`` hands such a function to grain: ``MapDataset.range`` over the steps, ``map``
by the batch maker, ``to_iter_dataset`` with ``ReadOptions`` so that ``num_threads`` threads
work ahead of the consumer. The batch makers do their work in vectorised numpy or in
decoders that release the GIL, so threads scale (``benchmarks/input_pipeline.py`` measures it);
grain's worker processes (``mp_prefetch``) would copy every batch between processes
(docs/data.md).
"""

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

# Tags the example-order random stream, apart from the families' augmentation streams (tag 1).
_SHUFFLE_STREAM = 0
# An endless run's last step: far beyond any training run, within grain's int64 indices.
_ENDLESS = 2**62


def step_batches(
  make_batch: Callable[[int], Any],
  *,
  start_step: int = 0,
  stop_step: int | None = None,
  num_threads: int = 2,
  prefetch_batches: int = 4,
) -> Iterator[Any]:
  """``make_batch(s)`` for ``s = start_step, start_step + 1, ...`` (up to ``stop_step``, else endless),
  with ``num_threads`` threads keeping up to ``prefetch_batches`` batches ready."""
  if start_step < 0:
    raise ValueError(f'start_step must be >= 0, got {start_step}')
  if num_threads < 1 or prefetch_batches < 1:
    raise ValueError(
      f'num_threads and prefetch_batches must be >= 1, got {num_threads} and {prefetch_batches}'
    )
  stop = _ENDLESS if stop_step is None else stop_step
  if stop <= start_step:
    return iter(())
  import grain  # pylint: disable=g-import-not-at-top  (not for prediction, which reads no batches)

  steps = grain.MapDataset.range(start_step, stop).map(make_batch)
  options = grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch_batches)
  return iter(steps.to_iter_dataset(options))


def example_ids(seed: int, step: int, batch_size: int, num_examples: int) -> np.ndarray:
  """The examples of the global batch at ``step``: one endless sequence of epoch permutations,
  epoch e shuffled by (seed, e), read ``batch_size`` at a time (a batch may span two epochs)."""
  epochs, offsets = np.divmod(step * batch_size + np.arange(batch_size), num_examples)
  ids = np.empty(batch_size, np.int64)
  for epoch in np.unique(epochs):
    in_epoch = epochs == epoch
    ids[in_epoch] = _epoch_permutation(seed, int(epoch), num_examples)[offsets[in_epoch]]
  return ids


def repeated_example_ids(
  seed: int, step: int, batch_size: int, num_examples: int, repeats: int
) -> np.ndarray:
  """``example_ids`` with repeated augmentation (Hoffer et al. 2020; DeiT's ``RASampler``): the global
  batch holds ``batch_size / repeats`` examples (the sequence ``example_ids`` reads at that batch
  size), each ``repeats`` times, the copies ``batch_size / repeats`` rows apart, so that the
  processes' contiguous row slices (and the devices') get different copies, as DeiT spreads them
  over its processes. ``repeats=1`` is ``example_ids``. A pure function of ``(seed, step)``."""
  if repeats < 1 or batch_size % repeats:
    raise ValueError(f'batch_size {batch_size} must be a multiple of repeats {repeats} (>= 1)')
  distinct = example_ids(seed, step, batch_size // repeats, num_examples)
  return np.tile(distinct, repeats)


@functools.lru_cache(maxsize=8)
def _epoch_permutation(seed: int, epoch: int, num_examples: int) -> np.ndarray:
  permutation = np.random.default_rng([_SHUFFLE_STREAM, seed, epoch]).permutation(num_examples)
  permutation.flags.writeable = False
  return permutation
