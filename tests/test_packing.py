"""Packed translation rows: the packer's rows and segment ids, the plan's determinism, and a packed row
computing exactly what its pairs compute alone (every attention, every positional encoding)."""

import numpy as np
import pytest
from flax import nnx

from attention import MultiHeadAttention
from seq2seq.architectures import make_translator
from seq2seq.input_pipeline import TokenizedPairs
from seq2seq.model import PACKING_KEYS, Packing
from seq2seq.packing import PackedTrainingBatches, first_fit, packed_batch, padding_fraction
from seq2seq.tokenizer import BOS_ID, EOS_ID
from trainer.losses import token_losses

VOCAB = 30


def tiny_corpus() -> TokenizedPairs:
  return TokenizedPairs.from_id_lists(
    [[5, 6, 7], [8, 9], [10], [11, 12, 13, 14]],
    [[20, 21], [22], [23, 24, 25], [26]],
  )


def test_first_fit_fills_the_open_rows_in_order():
  # sources 3, 2, 1, 4 and targets (+1) 3, 2, 4, 2 into rows of 6 + 6
  rows = first_fit(np.array([3, 2, 1, 4]), np.array([3, 2, 4, 2]), 6, 6)
  np.testing.assert_array_equal(rows, [0, 0, 1, 1])
  # one open row: a pair that does not fit closes it for good
  rows = first_fit(np.array([5, 2, 1]), np.array([1, 1, 1]), 6, 6, open_rows=1)
  np.testing.assert_array_equal(rows, [0, 1, 1])
  rows = first_fit(np.array([5, 2, 1]), np.array([1, 1, 1]), 6, 6, open_rows=2)
  np.testing.assert_array_equal(rows, [0, 1, 0])
  with pytest.raises(ValueError, match='fits no row'):
    first_fit(np.array([7]), np.array([1]), 6, 6)


def test_a_packed_batch_has_each_pairs_tokens_segments_and_positions():
  batch = packed_batch(tiny_corpus(), np.array([0, 1, 3, 2]), np.array([0, 0, 1, 2]), 4, 6, 6)
  assert set(batch) == {'src', 'tgt_in', 'tgt_out', *PACKING_KEYS}
  np.testing.assert_array_equal(
    batch['src'], [[5, 6, 7, 8, 9, 0], [11, 12, 13, 14, 0, 0], [10, 0, 0, 0, 0, 0], [0] * 6]
  )
  np.testing.assert_array_equal(
    batch['src_segments'], [[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0], [0] * 6]
  )
  np.testing.assert_array_equal(
    batch['src_positions'], [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 0], [0] * 6, [0] * 6]
  )
  B, E = BOS_ID, EOS_ID
  np.testing.assert_array_equal(
    batch['tgt_in'], [[B, 20, 21, B, 22, 0], [B, 26, 0, 0, 0, 0], [B, 23, 24, 25, 0, 0], [0] * 6]
  )
  np.testing.assert_array_equal(
    batch['tgt_out'], [[20, 21, E, 22, E, 0], [26, E, 0, 0, 0, 0], [23, 24, 25, E, 0, 0], [0] * 6]
  )
  np.testing.assert_array_equal(
    batch['tgt_segments'], [[1, 1, 1, 2, 2, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0], [0] * 6]
  )
  np.testing.assert_array_equal(
    batch['tgt_positions'], [[0, 1, 2, 0, 1, 0], [0, 1, 0, 0, 0, 0], [0, 1, 2, 3, 0, 0], [0] * 6]
  )
  assert padding_fraction(batch) == pytest.approx(1 - (10 + 11) / 48)


def random_corpus(count=200, seed=0) -> TokenizedPairs:
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, 12, size=(count, 2))
  return TokenizedPairs.from_id_lists(
    [rng.integers(4, VOCAB, n).tolist() for n in lengths[:, 0]],
    [rng.integers(4, VOCAB, n).tolist() for n in lengths[:, 1]],
  )


def pairs_of(batch) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
  """The (source, target) of every pair in packed rows, read back through the segment ids."""
  found = []
  for row in range(len(batch['src'])):
    for segment in range(1, batch['src_segments'][row].max(initial=0) + 1):
      source = batch['src'][row][batch['src_segments'][row] == segment]
      target = batch['tgt_out'][row][batch['tgt_segments'][row] == segment]
      assert target[-1] == EOS_ID
      found.append((tuple(source.tolist()), tuple(target[:-1].tolist())))
  return found


def test_the_plan_packs_each_pair_once_an_epoch_and_is_a_function_of_the_step():
  pairs = random_corpus()
  plan = PackedTrainingBatches(pairs, batch_size=4, max_source_length=16, max_target_length=16)
  everything = {
    (tuple(pairs.source_ids[pairs.source_offsets[i] : pairs.source_offsets[i + 1]].tolist()),
     tuple(pairs.target_ids[pairs.target_offsets[i] : pairs.target_offsets[i + 1]].tolist()))
    for i in range(len(pairs))
  }  # fmt: skip
  epoch_steps = plan._epoch_plan(0, 0)[2]
  seen = [pair for step in range(epoch_steps) for pair in pairs_of(plan.batch(0, step))]
  assert len(seen) == len(set(seen)) and set(seen) <= everything
  assert len(pairs) - len(seen) <= 3 * 16  # only the (at most 3) rows that make no whole batch wait
  one_row_batches = PackedTrainingBatches(pairs, batch_size=1, max_source_length=16, max_target_length=16)
  seen = [
    pair
    for step in range(one_row_batches._epoch_plan(0, 0)[2])
    for pair in pairs_of(one_row_batches.batch(0, step))
  ]
  assert sorted(seen) == sorted(everything) and len(seen) == len(pairs)
  first = plan.batch(0, 0)
  assert first['src'].shape == (4, 16) and first['tgt_in'].shape == (4, 16)
  # a fresh plan, a resume in the second epoch and two processes' rows give the same batches
  again = PackedTrainingBatches(pairs, batch_size=4, max_source_length=16, max_target_length=16)
  step = epoch_steps + 2
  resumed = next(again.batches(seed=0, start_step=step))
  halves = [next(plan.batches(seed=0, start_step=step, process_index=p, process_count=2)) for p in (0, 1)]
  for name in first:
    np.testing.assert_array_equal(resumed[name], plan.batch(0, step)[name])
    np.testing.assert_array_equal(np.concatenate([h[name] for h in halves]), resumed[name])
  assert pairs_of(plan.batch(1, 0)) != pairs_of(first)  # another seed, another order


def tiny_transformer(posemb, injection='stem', **options):
  section = dict(
    variant='custom', features=16, encoder_layers=2, decoder_layers=2, num_heads=2, mlp_features=32,
    max_length=24, dropout=0.0, posemb=posemb, posemb_injection=injection, **options,
  )  # fmt: skip
  return make_translator(section, source_vocab_size=VOCAB, target_vocab_size=VOCAB, rngs=nnx.Rngs(1))


def use_fused_kernel(model, fused: bool) -> None:
  for _, layer in nnx.iter_graph(model):
    if isinstance(layer, MultiHeadAttention):
      layer.fused_kernel = fused


@nnx.jit(static_argnames='return_weights')
def forward(model, src, tgt_in, packing, return_weights):
  return model(src, tgt_in, packing=packing, return_weights=return_weights)


SOURCES = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18], [19]]
TARGETS = [[20, 21, 22], [23, 24, 25, 26, 27], [28], [29, 4, 5, 6, 7, 8]]
# two rows: pairs 0, 1 and 3 in the first, pair 2 in the second
MEMBERS, ROWS = np.array([0, 1, 3, 2]), np.array([0, 0, 0, 1])


def one_pair_per_row() -> dict[str, np.ndarray]:
  """The pairs as unpacked training batches hold them: a row each, padded after."""
  batch = {name: np.zeros((len(SOURCES), 8), np.int32) for name in ('src', 'tgt_in', 'tgt_out')}
  for row, (source, target) in enumerate(zip(SOURCES, TARGETS)):
    batch['src'][row, : len(source)] = source
    batch['tgt_in'][row, : len(target) + 1] = [BOS_ID, *target]
    batch['tgt_out'][row, : len(target) + 1] = [*target, EOS_ID]
  return batch


def assert_rows_compute_their_pairs_alone(model, *, fused: bool) -> None:
  """Each pair's logits, losses and (explicit path) attention weights in packed rows are those it
  gets in a row of its own."""
  pairs = TokenizedPairs.from_id_lists(SOURCES, TARGETS)
  packed = packed_batch(pairs, MEMBERS, ROWS, 2, 16, 18)
  alone = one_pair_per_row()
  use_fused_kernel(model, fused)
  logits, weights = forward(model, packed['src'], packed['tgt_in'], Packing.from_batch(packed), not fused)
  alone_logits, alone_weights = forward(model, alone['src'], alone['tgt_in'], None, not fused)
  losses, _ = token_losses(logits, packed['tgt_out'], 0.1)
  alone_losses, _ = token_losses(alone_logits, alone['tgt_out'], 0.1)
  segments = np.arange(len(MEMBERS)) - np.searchsorted(ROWS, ROWS) + 1
  for pair, row, segment in zip(MEMBERS, ROWS, segments):
    src_segments, tgt_segments = packed['src_segments'][row], packed['tgt_segments'][row]
    targets, source_length, target_length = (
      tgt_segments == segment,
      len(SOURCES[pair]),
      len(TARGETS[pair]) + 1,
    )
    np.testing.assert_allclose(logits[row][targets], alone_logits[pair][:target_length], atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(losses[row][targets], alone_losses[pair][:target_length], atol=2e-5, rtol=1e-5)
    if fused:
      continue
    for name, queries, keys, lengths in [
      ('encoder_attention_weights', src_segments, src_segments, (source_length, source_length)),
      ('decoder_self_attention_weights', tgt_segments, tgt_segments, (target_length, target_length)),
      ('cross_attention_weights', tgt_segments, src_segments, (target_length, source_length)),
    ]:
      for packed_layer, alone_layer in zip(weights[name], alone_weights[name], strict=True):
        block = segment_block(np.asarray(packed_layer), row, queries, keys, segment)
        np.testing.assert_allclose(block, alone_layer[pair][:, : lengths[0], : lengths[1]], atol=1e-6)
        np.testing.assert_allclose(block.sum(-1), 1.0, atol=1e-5)  # no weight leaves the pair


def segment_block(weights, row, query_segments, key_segments, segment):
  """A packed row's attention weights among one segment's queries and keys."""
  queries, keys = np.flatnonzero(query_segments == segment), np.flatnonzero(key_segments == segment)
  return weights[row][:, queries][:, :, keys]


# The fast tier checks the sinusoids; the full suite every encoding the translator has.
@pytest.mark.parametrize(
  'posemb, injection',
  [
    ('sincos1d', 'stem'),
    pytest.param('learn1d', 'stem', marks=pytest.mark.slow),
    pytest.param('learn1d', 'every_layer', marks=pytest.mark.slow),
    pytest.param('relative', 'stem', marks=pytest.mark.slow),
    pytest.param('rope', 'stem', marks=pytest.mark.slow),
    pytest.param('none', 'stem', marks=pytest.mark.slow),
  ],
)
@pytest.mark.parametrize('fused', [False, True], ids=['explicit', 'fused'])
def test_a_packed_row_computes_what_its_pairs_compute_alone(posemb, injection, fused):
  assert_rows_compute_their_pairs_alone(tiny_transformer(posemb, injection), fused=fused)


@pytest.mark.slow
def test_scanned_stacks_take_the_packing_too():
  assert_rows_compute_their_pairs_alone(
    tiny_transformer('learn1d', 'every_layer', scan_layers=True), fused=False
  )


def test_the_loss_weight_counts_every_real_target_token_once():
  from seq2seq.task import Translation

  batch = packed_batch(TokenizedPairs.from_id_lists(SOURCES, TARGETS), MEMBERS, ROWS, 2, 16, 18)
  model = tiny_transformer('sincos1d')
  task = Translation.__new__(Translation)
  task.label_smoothing = 0.0
  loss_sum, weight, _ = nnx.jit(lambda m, b: task.loss_and_outputs(m, b, rngs=None, deterministic=True))(
    model, batch
  )
  assert int(weight) == (3 + 1) + (5 + 1) + (1 + 1) + (6 + 1)
  logits, _ = forward(model, batch['src'], batch['tgt_in'], Packing.from_batch(batch), False)
  _, nll = token_losses(logits, batch['tgt_out'])
  np.testing.assert_allclose(loss_sum, np.sum(np.where(batch['tgt_out'] != 0, nll, 0.0)), rtol=1e-6)


def test_packing_is_checked_before_any_data_is_read():
  import ml_collections

  from configs import rnn_scan, transformer_scan
  from seq2seq.task import Translation
  from trainer.errors import ConfigError
  from trainer.validation import resolve_config

  config = rnn_scan.get_config()
  config.data.packing = True
  with pytest.raises(ConfigError, match='data.packing is for the Transformer; the rnn translator'):
    Translation(config)
  config = transformer_scan.get_config()
  config.data = ml_collections.ConfigDict(dict(config.data.to_dict(), packing='yes'))
  with pytest.raises(ConfigError, match="^config.data.packing is 'yes'; it must be True or False.$"):
    resolve_config(config, Translation)
  config = transformer_scan.get_config()
  config.data.packing = True
  shapes = Translation.without_data(config, {'vocab_size': 16}).batch_shapes(4)
  assert set(shapes) == {'src', 'tgt_in', 'tgt_out', *PACKING_KEYS}
  assert shapes['src_segments'].shape == (4, config.data.max_source_length)


@pytest.mark.slow  # runs the trainer
def test_the_trainer_trains_on_packed_rows(tmp_path):
  from tests.translation_test_configs import tiny_translation_config
  from trainer.loop import train_and_evaluate
  from trainer.task import load_task

  overrides = {
    'data.packing': True,
    'data.max_source_length': 16,
    'data.max_target_length': 16,
    'batch_size': 8,
  }
  config = tiny_translation_config(**overrides)
  result = train_and_evaluate(config, tmp_path / 'run')
  assert result.step == 4 and 0.0 <= result.eval_metrics['bleu'] <= 100.0
  task = load_task(config)
  task.prepare(tmp_path / 'run')
  batch = next(task.train_batches(batch_size=8, seed=0, start_step=3, process_index=0, process_count=1))
  assert batch['src'].shape == (8, 16) and batch['tgt_segments'].max() > 1  # several pairs in a row
