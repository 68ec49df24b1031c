"""Packed training batches: several sentence pairs per row, one row shape for the whole run.

As the Flax WMT example's ``pack_dataset`` (and MaxText, which packs by default), a row of
``max_source_length`` source and ``max_target_length`` target slots holds as many pairs as fit,
one after another, and says which token belongs to which pair:

  ``src``, ``tgt_in``, ``tgt_out``   the pairs' tokens (``tgt_in``: BOS + target, ``tgt_out``:
                                    target + EOS, per pair), then padding (0)
  ``src_segments``, ``tgt_segments``  1, 2, ... for the row's first, second, ... pair; 0 on padding
  ``src_positions``, ``tgt_positions``  0, 1, ... from each pair's first token; 0 on padding

The model keeps every attention inside a pair by the segment ids and restarts its position
tables at each pair (``seq2seq.model.Packing``), so a pair is computed as if it were alone, and
every real target token is counted once by the loss (``tgt_out`` is padding elsewhere).

Plan: pairs that fit the lengths are kept (as ``seq2seq.input_pipeline`` keeps them). Epoch e
shuffles them by a generator seeded by (seed, e) and packs them in that order, first fit over
the ``OPEN_ROWS`` most recently opened rows (a pair goes into the first of them with room on
both sides, else opens a row, closing the oldest); the rows are shuffled and cut into whole
batches of ``batch_size`` rows, and the last rows that make no whole batch wait for a later
epoch's shuffle. An epoch's batch count depends on its shuffle, so step s is found by adding
up the epochs' counts (each epoch planned once, a few milliseconds for Multi30k); the batch at
step s is still a function of (seed, s) alone, and a resumed run replays what an uninterrupted
one would see. Each process takes rows [p*b/P, (p+1)*b/P) of the global batch, one grain
thread ahead of the trainer (``pipelines.steps``).
"""

from __future__ import annotations

import bisect
import functools
import threading
from collections.abc import Iterator

import numpy as np

from pipelines.steps import step_batches
from seq2seq.input_pipeline import TokenizedPairs
from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID
from trainer.errors import DataError
from trainer.partitioning import process_rows

OPEN_ROWS = 16


def first_fit(
  source_lengths: np.ndarray,
  target_lengths: np.ndarray,
  source_width: int,
  target_width: int,
  open_rows: int = OPEN_ROWS,
) -> np.ndarray:
  """The row of each item, packed in the given order: first fit over the ``open_rows`` most
  recently opened rows. Rows are numbered 0, 1, ... in the order they are opened."""
  if open_rows < 1:
    raise ValueError(f'open_rows must be >= 1, got {open_rows}')
  row_of = np.empty(len(source_lengths), np.int64)
  rows, source_room, target_room = [], [], []  # the open rows, oldest first
  opened = 0
  for item, (source, target) in enumerate(zip(source_lengths.tolist(), target_lengths.tolist())):
    if source > source_width or target > target_width:
      raise ValueError(
        f'item {item} ({source} + {target} tokens) fits no row of {source_width} + {target_width}'
      )
    for slot in range(len(rows)):
      if source_room[slot] >= source and target_room[slot] >= target:
        break
    else:
      if len(rows) == open_rows:
        del rows[0], source_room[0], target_room[0]
      rows.append(opened)
      opened += 1
      source_room.append(source_width)
      target_room.append(target_width)
      slot = len(rows) - 1
    row_of[item] = rows[slot]
    source_room[slot] -= source
    target_room[slot] -= target
  return row_of


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
  return np.concatenate([[0], np.cumsum(values)[:-1]]).astype(np.int64)


def _starts_in_row(rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
  """For items sorted by row: each item's first column, its row's earlier items' lengths added up."""
  before = _exclusive_cumsum(lengths)
  first_of_row = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
  group = np.cumsum(np.concatenate([[False], rows[1:] != rows[:-1]]))
  return before - before[first_of_row][group]


def packed_batch(
  pairs: TokenizedPairs,
  members: np.ndarray,
  rows: np.ndarray,
  num_rows: int,
  source_width: int,
  target_width: int,
) -> dict[str, np.ndarray]:
  """``num_rows`` packed rows: pair ``members[i]`` goes into row ``rows[i]`` (non-decreasing), after
  the members before it in that row."""
  source_lengths = pairs.source_lengths[members]
  target_lengths = pairs.target_lengths[members] + 1
  segments = np.arange(len(members)) - np.searchsorted(rows, rows) + 1
  for lengths, width in ((source_lengths, source_width), (target_lengths, target_width)):
    if len(members) and np.bincount(rows, lengths).max() > width:
      raise ValueError(f'the pairs given for a row need more than its {width} slots')

  def scatter(lengths, starts):
    """Per token: its member, its column and its position within the member."""
    member = np.repeat(np.arange(len(members)), lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(_exclusive_cumsum(lengths), lengths)
    return member, starts[member] + within, within

  batch = {}
  member, column, within = scatter(source_lengths, _starts_in_row(rows, source_lengths))
  shape = (num_rows, source_width)
  batch['src'] = np.full(shape, PAD_ID, np.int32)
  batch['src'][rows[member], column] = pairs.source_ids[pairs.source_offsets[members[member]] + within]
  batch['src_segments'] = np.zeros(shape, np.int32)
  batch['src_segments'][rows[member], column] = segments[member]
  batch['src_positions'] = np.zeros(shape, np.int32)
  batch['src_positions'][rows[member], column] = within

  member, column, within = scatter(target_lengths, _starts_in_row(rows, target_lengths))
  shape = (num_rows, target_width)
  is_last = within == target_lengths[member] - 1
  token = pairs.target_offsets[members[member]] + within
  target_ids = pairs.target_ids if pairs.target_ids.size else np.zeros(1, np.int32)
  batch['tgt_in'] = np.full(shape, PAD_ID, np.int32)
  batch['tgt_in'][rows[member], column] = np.where(within == 0, BOS_ID, target_ids[np.maximum(token - 1, 0)])
  batch['tgt_out'] = np.full(shape, PAD_ID, np.int32)
  batch['tgt_out'][rows[member], column] = np.where(
    is_last, EOS_ID, target_ids[np.minimum(token, len(target_ids) - 1)]
  )
  batch['tgt_segments'] = np.zeros(shape, np.int32)
  batch['tgt_segments'][rows[member], column] = segments[member]
  batch['tgt_positions'] = np.zeros(shape, np.int32)
  batch['tgt_positions'][rows[member], column] = within
  return batch


class PackedTrainingBatches:
  """The packed, shuffled batch plan of one training set and batch size (rows per batch); see the
  module docstring. The same interface as ``input_pipeline.TrainingBatches``."""

  def __init__(
    self,
    pairs: TokenizedPairs,
    *,
    batch_size: int,
    max_source_length: int,
    max_target_length: int,
    open_rows: int = OPEN_ROWS,
  ):
    self.pairs = pairs
    self.batch_size = batch_size
    self.source_width, self.target_width = max_source_length, max_target_length
    self.open_rows = open_rows
    self.source_lengths, self.target_lengths = pairs.source_lengths, pairs.target_lengths + 1
    self.kept = pairs.fitting(max_source_length, max_target_length)
    self.num_examples = len(self.kept)
    if self._epoch_plan(0, 0)[2] < 1:
      raise DataError(
        f'the {len(self.kept)} of {len(pairs)} training pairs that fit max_source_length '
        f'{max_source_length} and max_target_length {max_target_length} pack into fewer rows than '
        f'one batch of batch_size {batch_size}'
      )
    self._lock = threading.Lock()
    self._epoch_ends: dict[int, list[int]] = {}  # seed -> the first step after each planned epoch

  @functools.lru_cache(maxsize=4)  # noqa: B019 (one plan per epoch; the pipeline lives as long as the run)
  def _epoch_plan(self, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(pairs, their row in the epoch, batches)``: the pairs of the epoch's whole batches, sorted
    by row and, within a row, in the order they were packed."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(self.kept)
    row_of = first_fit(
      self.source_lengths[order],
      self.target_lengths[order],
      self.source_width,
      self.target_width,
      self.open_rows,
    )
    num_rows = int(row_of.max()) + 1 if len(order) else 0
    shuffled_row = rng.permutation(num_rows)[row_of]
    num_batches = num_rows // self.batch_size
    in_batches = shuffled_row < num_batches * self.batch_size
    order, shuffled_row = order[in_batches], shuffled_row[in_batches]
    by_row = np.argsort(shuffled_row, kind='stable')
    return order[by_row], shuffled_row[by_row], num_batches

  def _locate(self, seed: int, step: int) -> tuple[int, int]:
    """``(epoch, batch within it)`` of ``step``, planning the epochs up to it when first asked."""
    with self._lock:
      ends = self._epoch_ends.setdefault(seed, [])
      while not ends or ends[-1] <= step:
        ends.append((ends[-1] if ends else 0) + self._epoch_plan(seed, len(ends))[2])
      epoch = bisect.bisect_right(ends, step)
      return epoch, step - (ends[epoch - 1] if epoch else 0)

  def batch(self, seed: int, step: int, rows: slice = slice(None)) -> dict[str, np.ndarray]:
    """Rows ``rows`` of the global batch at ``step``."""
    epoch, index = self._locate(seed, step)
    members, row_of, _ = self._epoch_plan(seed, epoch)
    first, stop, _ = rows.indices(self.batch_size)
    start, end = (index * self.batch_size + bound for bound in (first, stop))
    lo, hi = np.searchsorted(row_of, [start, end])
    return packed_batch(
      self.pairs, members[lo:hi], row_of[lo:hi] - start, end - start, self.source_width, self.target_width
    )

  def batches(
    self, *, seed: int, start_step: int = 0, process_index: int = 0, process_count: int = 1
  ) -> Iterator[dict[str, np.ndarray]]:
    """Endless: this process's rows of the global batches ``start_step, start_step + 1, ...``."""
    if seed < 0 or start_step < 0:
      raise ValueError(f'seed and start_step must be >= 0, got {seed} and {start_step}')
    rows = process_rows(self.batch_size, process_index, process_count)
    make_batch = functools.partial(self.batch, seed, rows=rows)
    return step_batches(make_batch, start_step=start_step, num_threads=1, prefetch_batches=4)


def padding_fraction(batch: dict[str, np.ndarray]) -> float:
  """The share of a batch's source and target slots that hold padding."""
  slots = batch['src'].size + batch['tgt_out'].size
  return 1.0 - (np.count_nonzero(batch['src']) + np.count_nonzero(batch['tgt_out'])) / slots
