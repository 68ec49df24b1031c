"""Translation batches: tokenized sentence pairs -> padded int32 arrays, bucketed by length.

A batch holds ``src`` (source ids), ``tgt_in`` (BOS + target ids) and ``tgt_out``
(target ids + EOS), each ``[sentences, width]`` and padded with 0. The batch size counts
sentences. ``tgt_in`` and ``tgt_out`` have one token more than the target, so
``max_target_length`` bounds ``len(target) + 1``.

Training: pairs longer than ``max_source_length`` or ``max_target_length`` are dropped.
Each pair falls into a length bucket by ``max(len(source), len(target) + 1)``; bucket
boundaries grow by about 20% (8, 16, 24, 32, 40, 48, 64, 80, 96, 120, ...), so padding
costs little, and there are few distinct shapes to compile. Buckets with fewer pairs than
a batch are merged into a neighbour. A bucket's arrays are as wide as its longest source
and longest target, rounded up to a multiple of ``pad_to_multiple`` (8 suits accelerators;
1 wastes least on a CPU), so each bucket is one shape.

Determinism: the global batch at step s depends on (seed, s) alone. Epoch e is planned
from a generator seeded by (seed, e): each bucket's pairs are shuffled and cut into whole
batches (the rest of a bucket waits for a later epoch's shuffle), and the batches of all
buckets are shuffled together. Every epoch has the same number of batches, so step s is
batch s mod N of epoch s div N; each process takes rows [p*b/P, (p+1)*b/P) of it. Resuming
at start_step replays exactly what an uninterrupted run would see (the checkpoint's step is
the pipeline's whole state). Training batches are made one grain thread ahead of the
trainer (``pipelines.steps``), and so are evaluation batches.

Evaluation: one pass over every pair of a split (too long ones truncated, never dropped),
sorted by length so that batches are dense; ``index`` gives each row's position in the
split and ``mask`` is 0 on the rows that pad the last batch.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence

import numpy as np

from pipelines.steps import step_batches
from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from trainer.errors import DataError
from trainer.partitioning import process_rows

WIDTH_MULTIPLE = 8
BUCKET_GROWTH = 1.2


def _round_up(value, multiple: int = WIDTH_MULTIPLE):
  return -(-np.asarray(value) // multiple) * multiple


def bucket_boundaries(max_length: int) -> list[int]:
  """Upper lengths of the buckets: multiples of 8 growing by about 20%, up to ``max_length`` or just above."""
  boundaries = [WIDTH_MULTIPLE]
  while boundaries[-1] < max_length:
    boundaries.append(max(boundaries[-1] + WIDTH_MULTIPLE, int(_round_up(boundaries[-1] * BUCKET_GROWTH))))
  return boundaries


@dataclasses.dataclass(frozen=True)
class TokenizedPairs:
  """Token ids of sentence pairs, stored flat: pair i's source is ``source_ids[source_offsets[i]:source_offsets[i+1]]``."""

  source_ids: np.ndarray
  source_offsets: np.ndarray
  target_ids: np.ndarray
  target_offsets: np.ndarray

  @classmethod
  def from_id_lists(
    cls, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
  ) -> TokenizedPairs:
    if len(sources) != len(targets):
      raise ValueError(f'{len(sources)} sources but {len(targets)} targets')

    def flatten(lists):
      offsets = np.zeros(len(lists) + 1, np.int64)
      np.cumsum([len(ids) for ids in lists], out=offsets[1:])
      flat = np.fromiter((token for ids in lists for token in ids), np.int32, count=int(offsets[-1]))
      return flat, offsets

    return cls(*flatten(sources), *flatten(targets))

  def __len__(self) -> int:
    return len(self.source_offsets) - 1

  @property
  def source_lengths(self) -> np.ndarray:
    return np.diff(self.source_offsets)

  @property
  def target_lengths(self) -> np.ndarray:
    return np.diff(self.target_offsets)

  def fitting(self, max_source_length: int, max_target_length: int) -> np.ndarray:
    """Indices of the pairs whose source, and target with its EOS, fit the maximum lengths."""
    return np.flatnonzero(
      (self.source_lengths <= max_source_length) & (self.target_lengths + 1 <= max_target_length)
    )


def tokenize_pairs(
  pairs: Sequence[tuple[str, str]],
  source_tokenizer: Tokenizer,
  target_tokenizer: Tokenizer,
  *,
  max_source_length: int | None = None,
  max_target_length: int | None = None,
) -> TokenizedPairs:
  """Encodes every pair; with the maximum lengths, truncates the source to ``max_source_length``
  tokens and the target to ``max_target_length - 1`` (so ``tgt_in`` and ``tgt_out`` fit)."""
  source_end = max_source_length
  target_end = None if max_target_length is None else max_target_length - 1
  sources = [source_tokenizer.encode(source)[:source_end] for source, _ in pairs]
  targets = [target_tokenizer.encode(target)[:target_end] for _, target in pairs]
  return TokenizedPairs.from_id_lists(sources, targets)


def _padded(
  flat: np.ndarray, offsets: np.ndarray, rows: np.ndarray, width: int, *, bos: bool = False, eos: bool = False
) -> np.ndarray:
  """``[len(rows), width]`` int32: each row's ids, optionally after BOS or before EOS, then 0s."""
  starts = offsets[rows]
  lengths = offsets[rows + 1] - starts
  lead = int(bos)
  column = np.arange(width)[None, :] - lead
  inside = (column >= 0) & (column < lengths[:, None])
  source = np.where(inside, starts[:, None] + column, 0)
  batch = np.where(inside, flat[source] if flat.size else 0, PAD_ID).astype(np.int32)
  if bos:
    batch[:, 0] = BOS_ID
  if eos:
    batch[np.arange(len(rows)), lengths + lead] = EOS_ID
  return batch


def _batch(
  pairs: TokenizedPairs, rows: np.ndarray, source_width: int, target_width: int
) -> dict[str, np.ndarray]:
  return {
    'src': _padded(pairs.source_ids, pairs.source_offsets, rows, source_width),
    'tgt_in': _padded(pairs.target_ids, pairs.target_offsets, rows, target_width, bos=True),
    'tgt_out': _padded(pairs.target_ids, pairs.target_offsets, rows, target_width, eos=True),
  }


@dataclasses.dataclass(frozen=True)
class Bucket:
  members: np.ndarray  # indices of the training pairs in this bucket
  source_width: int
  target_width: int


class TrainingBatches:
  """The bucketed, shuffled batch plan of one training set and batch size (see the module docstring)."""

  def __init__(
    self,
    pairs: TokenizedPairs,
    *,
    batch_size: int,
    max_source_length: int,
    max_target_length: int,
    pad_to_multiple: int = WIDTH_MULTIPLE,
  ):
    self.pairs = pairs
    self.batch_size = batch_size
    source_lengths, target_lengths = pairs.source_lengths, pairs.target_lengths + 1
    kept = pairs.fitting(max_source_length, max_target_length)
    if len(kept) < batch_size:
      raise DataError(
        f'only {len(kept)} of {len(pairs)} training pairs fit max_source_length '
        f'{max_source_length} and max_target_length {max_target_length}; need at least '
        f'batch_size {batch_size}'
      )
    self.num_examples = len(kept)
    boundaries = np.asarray(bucket_boundaries(max(max_source_length, max_target_length)))
    keys = np.maximum(source_lengths[kept], target_lengths[kept])
    bucket_of = np.searchsorted(boundaries, keys)
    groups = [kept[bucket_of == b] for b in range(len(boundaries))]
    self.buckets = [
      Bucket(
        members,
        min(int(_round_up(max(source_lengths[members].max(), 1), pad_to_multiple)), max_source_length),
        min(int(_round_up(target_lengths[members].max(), pad_to_multiple)), max_target_length),
      )
      for members in self._merge_small(groups)
    ]
    self.batches_per_bucket = [len(bucket.members) // batch_size for bucket in self.buckets]
    self.steps_per_epoch = sum(self.batches_per_bucket)

  def _merge_small(self, groups: list[np.ndarray]) -> list[np.ndarray]:
    """Joins each group with fewer pairs than a batch to the next longer one (the last to the previous)."""
    merged, pending = [], np.zeros(0, np.int64)
    for group in groups:
      pending = np.concatenate([pending, group])
      if len(pending) >= self.batch_size:
        merged.append(pending)
        pending = np.zeros(0, np.int64)
    if len(pending):
      merged[-1] = np.concatenate([merged[-1], pending])
    return merged

  @functools.lru_cache(maxsize=4)  # noqa: B019 (one plan per epoch; the pipeline lives as long as the run)
  def _epoch_plan(self, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """``(bucket index [N], example indices [N, batch_size])`` of every batch of one epoch, in order."""
    rng = np.random.default_rng([seed, epoch])
    bucket_ids, rows = [], []
    for index, (bucket, count) in enumerate(zip(self.buckets, self.batches_per_bucket)):
      shuffled = rng.permutation(bucket.members)[: count * self.batch_size]
      rows.append(shuffled.reshape(count, self.batch_size))
      bucket_ids.append(np.full(count, index))
    order = rng.permutation(self.steps_per_epoch)
    return np.concatenate(bucket_ids)[order], np.concatenate(rows)[order]

  def batch(self, seed: int, step: int, rows: slice = slice(None)) -> dict[str, np.ndarray]:
    """Rows ``rows`` of the global batch at ``step``."""
    epoch, index = divmod(step, self.steps_per_epoch)
    bucket_ids, examples = self._epoch_plan(seed, epoch)
    bucket = self.buckets[bucket_ids[index]]
    return _batch(self.pairs, examples[index][rows], bucket.source_width, bucket.target_width)

  def batches(
    self, *, seed: int, start_step: int = 0, process_index: int = 0, process_count: int = 1
  ) -> Iterator[dict[str, np.ndarray]]:
    """Endless: this process's rows of the global batches ``start_step, start_step + 1, ...``."""
    if seed < 0 or start_step < 0:
      raise ValueError(f'seed and start_step must be >= 0, got {seed} and {start_step}')
    rows = process_rows(self.batch_size, process_index, process_count)
    make_batch = functools.partial(self.batch, seed, rows=rows)
    # One thread ahead of the trainer: a batch is a few numpy copies, cheap next to a step.
    return step_batches(make_batch, start_step=start_step, num_threads=1, prefetch_batches=4)


def padded_width(length: int, boundaries: np.ndarray, max_length: int) -> int:
  """The width of an evaluation batch whose longest row has ``length`` tokens: its bucket's boundary,
  at most ``max_length``."""
  return min(int(boundaries[np.searchsorted(boundaries, max(length, 1))]), max_length)


def eval_batches(
  pairs: TokenizedPairs,
  *,
  batch_size: int,
  max_source_length: int,
  max_target_length: int,
  process_index: int = 0,
  process_count: int = 1,
) -> Iterator[dict[str, np.ndarray]]:
  """One pass over ``pairs`` (already truncated to the maximum lengths) sorted by length: this
  process's rows of each padded global batch, with ``mask`` (float32, 0 on padding rows) and
  ``index`` (int32, the pair's position)."""
  rows = process_rows(batch_size, process_index, process_count)
  source_lengths, target_lengths = pairs.source_lengths, pairs.target_lengths + 1
  if source_lengths.max(initial=0) > max_source_length or target_lengths.max(initial=0) > max_target_length:
    raise ValueError('evaluation pairs must be truncated to the maximum lengths first (tokenize_pairs)')
  order = np.argsort(np.maximum(source_lengths, target_lengths), kind='stable')
  boundaries = np.asarray(bucket_boundaries(max(max_source_length, max_target_length)))

  def width(lengths, max_length):
    return padded_width(int(lengths.max()), boundaries, max_length)

  def make_batch(index: int) -> dict[str, np.ndarray]:
    members = order[index * batch_size : (index + 1) * batch_size]
    count = len(members)
    padded_members = np.concatenate([members, np.full(batch_size - count, members[0])])
    batch = _batch(
      pairs,
      padded_members,
      width(source_lengths[members], max_source_length),
      width(target_lengths[members], max_target_length),
    )
    batch['mask'] = (np.arange(batch_size) < count).astype(np.float32)
    batch['index'] = padded_members.astype(np.int32)
    for name in ('src', 'tgt_in', 'tgt_out'):
      batch[name][count:] = PAD_ID
    return {name: value[rows] for name, value in batch.items()}

  return step_batches(make_batch, stop_step=-(-len(order) // batch_size), num_threads=1, prefetch_batches=4)
