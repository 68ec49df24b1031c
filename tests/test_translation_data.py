"""Translation batches: BOS/EOS layout, length filtering, bucketing, determinism, process slices, evaluation."""

import numpy as np
import pytest

from seq2seq.input_pipeline import TokenizedPairs, TrainingBatches, bucket_boundaries, eval_batches
from seq2seq.tokenizer import BOS_ID, EOS_ID


def random_pairs(count=500, seed=0, max_length=40):
  rng = np.random.default_rng(seed)
  sources = [list(rng.integers(4, 50, size=rng.integers(1, max_length))) for _ in range(count)]
  targets = [list(rng.integers(4, 50, size=max(1, len(s) + rng.integers(-3, 4)))) for s in sources]
  return TokenizedPairs.from_id_lists(sources, targets)


def unpad(row):
  return [int(token) for token in row if token != 0]


def test_bucket_boundaries_grow_by_about_a_fifth():
  assert bucket_boundaries(64) == [8, 16, 24, 32, 40, 48, 64]
  assert bucket_boundaries(256)[-1] >= 256 and len(bucket_boundaries(256)) <= 14


def test_batches_hold_bos_target_and_target_eos():
  pairs = random_pairs()
  plan = TrainingBatches(pairs, batch_size=16, max_source_length=32, max_target_length=32)
  batch = plan.batch(seed=0, step=3)
  for src, tgt_in, tgt_out in zip(batch['src'], batch['tgt_in'], batch['tgt_out']):
    assert tgt_in[0] == BOS_ID and unpad(tgt_in)[1:] == unpad(tgt_out)[:-1] and unpad(tgt_out)[-1] == EOS_ID
    assert len(unpad(src)) <= 32 and len(unpad(tgt_out)) <= 32
  assert all(value.dtype == np.int32 for value in batch.values())


def test_long_pairs_are_dropped_and_shapes_are_few_and_dense():
  pairs = random_pairs(2000)
  plan = TrainingBatches(pairs, batch_size=32, max_source_length=24, max_target_length=24)
  keep = (pairs.source_lengths <= 24) & (pairs.target_lengths + 1 <= 24)
  assert plan.num_examples == keep.sum()
  shapes, real, total = set(), 0, 0
  seen = set()
  for step in range(plan.steps_per_epoch):
    batch = plan.batch(seed=1, step=step)
    shapes.add((batch['src'].shape, batch['tgt_in'].shape))
    real += (batch['src'] != 0).sum() + (batch['tgt_in'] != 0).sum()
    total += batch['src'].size + batch['tgt_in'].size
    seen.update(map(tuple, batch['src'].tolist()))
    assert batch['src'].shape[1] <= 24 and batch['tgt_in'].shape[1] <= 24
  assert len(shapes) <= len(bucket_boundaries(24))
  assert real / total > 0.6
  # Only the leftovers of each bucket (fewer than a batch each) wait for a later epoch.
  assert plan.steps_per_epoch * 32 > plan.num_examples - 32 * len(plan.buckets)


def test_batches_depend_on_seed_and_step_alone():
  pairs = random_pairs()
  plan = TrainingBatches(pairs, batch_size=16, max_source_length=40, max_target_length=48)
  uninterrupted = plan.batches(seed=7)
  first = [next(uninterrupted) for _ in range(2 * plan.steps_per_epoch + 3)]
  again = TrainingBatches(pairs, batch_size=16, max_source_length=40, max_target_length=48)
  resumed = again.batches(seed=7, start_step=plan.steps_per_epoch + 1)
  for step in range(plan.steps_per_epoch + 1, len(first)):
    batch = next(resumed)
    for name in ('src', 'tgt_in', 'tgt_out'):
      np.testing.assert_array_equal(batch[name], first[step][name])
  other_seed = next(plan.batches(seed=8))
  assert (
    not np.array_equal(other_seed['src'][:, :4], first[0]['src'][:, :4])
    or other_seed['src'].shape != first[0]['src'].shape
  )


def test_process_slices_make_up_the_global_batch():
  pairs = random_pairs()
  plan = TrainingBatches(pairs, batch_size=16, max_source_length=40, max_target_length=48)
  whole = next(plan.batches(seed=3, start_step=5))
  parts = [next(plan.batches(seed=3, start_step=5, process_index=p, process_count=4)) for p in range(4)]
  for name in whole:
    np.testing.assert_array_equal(np.concatenate([part[name] for part in parts]), whole[name])


def test_too_few_pairs_for_a_batch_is_an_error():
  with pytest.raises(ValueError, match=r'only \d+ of 500 training pairs fit max_source_length 1'):
    TrainingBatches(random_pairs(), batch_size=16, max_source_length=1, max_target_length=2)


def test_eval_batches_cover_every_pair_once_with_a_mask():
  pairs = random_pairs(101, max_length=20)
  seen = {}
  for process in range(2):
    for batch in eval_batches(
      pairs, batch_size=32, max_source_length=24, max_target_length=24, process_index=process, process_count=2
    ):
      assert batch['src'].shape[0] == 16
      for row in np.flatnonzero(batch['mask']):
        index = int(batch['index'][row])
        assert index not in seen
        seen[index] = unpad(batch['src'][row])
      assert not batch['src'][batch['mask'] == 0].any()
  assert sorted(seen) == list(range(101))
  for index, source in seen.items():
    start, end = pairs.source_offsets[index], pairs.source_offsets[index + 1]
    assert source == pairs.source_ids[start:end].tolist()
