"""Scanned and rematerialised stacks (``model.scan_layers``, ``model.remat``) compute what the unrolled stack does.

A ViT and a translator are built unrolled and scanned from the same seed; the scanned one's
parameters are the unrolled one's stacked (``stack_blocks``), and the loss and every gradient
agree for each remat policy, with positional tables added before every layer and relative
biases in every layer (per-layer inputs of the scan). Cached decoding of a scanned translator
matches the unrolled one's; the ViT ``.npz`` files read and write the same arrays either way. A
training pass draws different dropout masks in every layer and keeps each layer's examples at that
layer's stochastic-depth rate.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention.layers import REMAT_POLICIES, stack_blocks, unstack_blocks
from seq2seq.architectures import make_translator
from tests.random_draws import assert_drop_path_follows, assert_masks_differ, dropout_masks, recorded_draws
from vit.model import make_vit
from vit.weights import checkpoint_npz

VIT = dict(patch_size=4, width=16, depth=3, num_heads=2, mlp_dim=32)
TRANSLATOR = dict(
  variant='custom', features=16, encoder_layers=2, decoder_layers=3, num_heads=2, mlp_features=32,
  max_length=8, dropout=0.1, posemb='relative',
)  # fmt: skip


def _plain_vit(seed=0, **options):
  return make_vit({**VIT, **options}, num_classes=5, image_shape=(8, 8, 1), rngs=nnx.Rngs(seed))


def _vit(**options):
  return _plain_vit(posemb='learn1d', posemb_injection='every_layer', **options)


def _translator(**options):
  return make_translator(
    {**TRANSLATOR, **options}, source_vocab_size=13, target_vocab_size=13, rngs=nnx.Rngs(0)
  )


def _params(model):
  return nnx.to_pure_dict(nnx.state(model, nnx.Param))


def _loss_and_grads(model, *inputs):
  def loss(model):
    logits, _ = model(*inputs)
    return jnp.sum(jnp.sin(logits))

  value, grads = nnx.jit(nnx.value_and_grad(loss))(model)  # compiled once: faster than op by op
  return value, nnx.to_pure_dict(grads)


def _assert_trees_close(actual, expected, atol):
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=1e-5)


def _images():
  return jax.random.normal(jax.random.key(1), (2, 8, 8, 1))


def _sentences():
  src = jnp.asarray([[3, 4, 5, 6, 0], [7, 8, 0, 0, 0]])
  tgt = jnp.asarray([[1, 9, 10, 0], [1, 11, 0, 0]])
  return src, tgt


@pytest.mark.slow  # trains each way
@pytest.mark.parametrize('remat', sorted(REMAT_POLICIES))
@pytest.mark.parametrize('scan_layers', [False, True])
def test_vit_scanned_and_rematerialised_gives_the_unrolled_numbers(scan_layers, remat):
  reference = _vit()
  model = _vit(scan_layers=scan_layers, remat=remat)
  converted = stack_blocks(_params(reference)) if scan_layers else _params(reference)
  _assert_trees_close(_params(model), converted, atol=0)  # same seed: the same parameters, stacked
  value, grads = _loss_and_grads(model, _images())
  expected_value, expected_grads = _loss_and_grads(reference, _images())
  np.testing.assert_allclose(value, expected_value, rtol=1e-5)
  _assert_trees_close(grads, stack_blocks(expected_grads) if scan_layers else expected_grads, atol=1e-5)


@pytest.mark.parametrize('scan_layers', [False, True])
def test_rematerialised_layers_keep_their_recomputation_from_xla(scan_layers):
  # Unrolled, jax.checkpoint must fence the recomputation (optimization barriers), else XLA merges
  # it with the forward pass and the activations are kept anyway; a scan's body needs no fence.
  model = _vit(scan_layers=scan_layers, remat='full')
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def loss(params):
    logits, _ = nnx.merge(graphdef, params, rest)(_images())
    return logits.sum()

  text = jax.jit(jax.grad(loss)).lower(params).as_text()
  assert ('optimization_barrier' in text) == (not scan_layers)


@pytest.mark.slow  # trains and decodes each way
@pytest.mark.parametrize('remat', ['none', 'dots_with_no_batch_dims_saveable'])
def test_translator_scanned_gives_the_unrolled_numbers_and_decodes_alike(remat):
  reference = _translator()
  model = _translator(scan_layers=True, remat=remat)
  _assert_trees_close(_params(model), stack_blocks(_params(reference)), atol=0)
  src, tgt = _sentences()
  value, grads = _loss_and_grads(model, src, tgt)
  expected_value, expected_grads = _loss_and_grads(reference, src, tgt)
  np.testing.assert_allclose(value, expected_value, rtol=1e-5)
  _assert_trees_close(grads, stack_blocks(expected_grads), atol=1e-5)
  # Cached decoding: the layers one by one, each a slice of the stack.
  steps = []
  for translator in (reference, model):
    cache = translator.init_decode_cache(translator.encode(src), 4)
    logits, _ = translator.decode_step(tgt[:, :1], cache, src != 0)
    steps.append(logits)
  np.testing.assert_allclose(steps[1], steps[0], atol=1e-5)
  # A scanned training pass: each layer draws its own dropout masks.
  draws = recorded_draws(lambda: model(src, tgt, deterministic=False, rngs=nnx.Rngs(dropout=0))[0])
  assert_masks_differ(dropout_masks(draws))


@pytest.mark.parametrize(
  'scan_layers, remat', [(True, 'none'), (True, 'full'), (False, 'dots_saveable'), (False, 'none')]
)
def test_a_vit_training_pass_draws_its_own_masks_per_layer_on_the_drop_path_ramp(scan_layers, remat):
  """Dropout masks differ between layers (a key shared by the layers would repeat them), and each
  layer keeps examples at its own rate of the ramp 0, 0.15, 0.3 (not the largest for every layer)."""
  model = _plain_vit(dropout=0.1, drop_path=0.3, scan_layers=scan_layers, remat=remat)
  batch = 1024
  images = jax.random.normal(jax.random.key(2), (batch, 8, 8, 1))
  forward = nnx.jit(lambda model: model(images, deterministic=False, rngs=nnx.Rngs(dropout=0))[0])
  draws = recorded_draws(lambda: forward(model))
  assert_masks_differ(dropout_masks(draws))
  assert_drop_path_follows(draws, rates=(0.0, 0.15, 0.3), per_layer=2)  # attention, MLP


def test_stack_and_unstack_convert_checkpoints_both_ways():
  unrolled = _params(_vit())
  scanned = stack_blocks(unrolled)
  assert sorted(unrolled['encoder']['blocks']) == [0, 1, 2]
  assert scanned['encoder']['blocks']['attention']['qkv']['kernel'].shape == (3, 16, 3, 2, 8)
  _assert_trees_close(unstack_blocks(scanned), unrolled, atol=0)
  scanned_model = _vit(scan_layers=True)
  nnx.update(scanned_model, nnx.State(scanned))
  _assert_trees_close(_params(scanned_model), scanned, atol=0)


def test_scanned_parameters_name_their_layers_axis_for_the_partitioning_rules():
  model = _vit(scan_layers=True)
  kernel = model.encoder.blocks.attention.qkv.kernel
  assert kernel.get_metadata()['out_sharding'] == ('layers', 'embed', 'qkv', 'heads', 'head_dim')


def test_vit_npz_reads_and_writes_the_same_arrays_scanned_or_not(tmp_path):
  unrolled = _plain_vit()
  scanned = _plain_vit(scan_layers=True)
  written, written_scanned = (
    checkpoint_npz.model_to_official(unrolled),
    checkpoint_npz.model_to_official(scanned),
  )
  assert sorted(written) == sorted(written_scanned)
  for key in written:
    np.testing.assert_array_equal(written_scanned[key], written[key])
  # big_vision's scanned layout (Transformer/encoderblock/... with a leading depth axis) into a scanned model.
  layers = [
    {key.partition('/')[2].partition('/')[2]: value for key, value in written.items() if key.startswith(f'Transformer/encoderblock_{i}/')}
    for i in range(3)
  ]  # fmt: skip
  big_vision = {f'params/{key}': value for key, value in written.items() if 'encoderblock_' not in key}
  big_vision['params/pos_embedding'] = big_vision.pop('params/Transformer/posembed_input/pos_embedding')[
    :, 1:
  ]
  big_vision['params/cls'] = written['cls'] + written['Transformer/posembed_input/pos_embedding'][:, :1]
  names = {
    'LayerNorm_2': 'LayerNorm_1',
    'MultiHeadDotProductAttention_1': 'MultiHeadDotProductAttention_0',
    'MlpBlock_3': 'MlpBlock_0',
  }
  for rest in layers[0]:
    module, _, tail = rest.partition('/')
    big_vision[f'params/Transformer/encoderblock/{names.get(module, module)}/{tail}'] = np.stack(
      [layer[rest] for layer in layers]
    )
  loaded = _plain_vit(seed=1, scan_layers=True)
  checkpoint_npz.canonical_to_model(loaded, checkpoint_npz.to_canonical(big_vision))
  np.testing.assert_allclose(loaded(_images())[0], unrolled(_images())[0], atol=1e-5)


def test_an_unknown_remat_is_a_one_line_error_naming_the_field():
  with pytest.raises(
    ValueError, match=r"^config\.model\.remat is 'some'; allowed values: none, full, dots_saveable, "
  ):
    _vit(remat='some')


@pytest.mark.slow  # runs the trainer
def test_a_scanned_rematerialised_vit_trains_and_its_checkpoint_evaluates(tmp_path):
  from tests.vit_test_configs import tiny_vit_config
  from trainer.evaluation import evaluate_workdir
  from trainer.loop import train_and_evaluate

  config = tiny_vit_config(
    **{'model.depth': 2, 'model.scan_layers': True, 'model.remat': 'full', 'model.drop_path': 0.1}
  )
  config.update(total_steps=4, eval_every_steps=4, checkpoint_every_steps=4)
  train_and_evaluate(config, tmp_path)
  result = evaluate_workdir(tmp_path)
  assert result['step'] == 4 and 0.0 <= result['accuracy'] <= 1.0


def test_layer_decay_with_a_scanned_encoder_is_refused_in_one_line():
  from tests.vit_test_configs import tiny_vit_config
  from trainer.errors import ConfigError
  from trainer.task import load_task

  config = tiny_vit_config(**{'model.scan_layers': True})
  config.optimizer.layer_decay = 0.75
  with pytest.raises(ConfigError, match=r'^config\.optimizer\.layer_decay needs one parameter per layer'):
    load_task(config)


def test_every_family_refuses_layer_decay_with_scanned_layers():
  from tests.translation_test_configs import tiny_translation_config
  from trainer.errors import ConfigError
  from trainer.task import load_task

  config = tiny_translation_config(**{'model.scan_layers': True})
  config.optimizer.layer_decay = 0.75
  with pytest.raises(ConfigError, match=r'^config\.optimizer\.layer_decay needs one parameter per layer'):
    load_task(config)
