"""The video model's scanned and rematerialised stacks (``model.scan_layers``, ``model.remat``) compute
what its unrolled stacks do, in every layout.

Each layout is built unrolled and scanned from the same seed, its parameters randomised alike, with a
relative temporal bias in every temporal attention (a per-layer input of the scan) and a drop-path
ramp; the scanned parameters are the unrolled ones stacked (``stack_blocks`` over ``STACKS``), and
the loss, every gradient and the attention weights agree; a training pass draws different dropout
masks in every layer and keeps each layer's examples at that layer's stochastic-depth rate. Checkpoints convert both ways, an image
ViT inflates into a scanned video model (or a scanned ViT into an unrolled one), and the trainer
trains and evaluates a scanned, rematerialised video model.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention.layers import stack_blocks, unstack_blocks
from tests.random_draws import assert_drop_path_follows, assert_masks_differ, dropout_masks, recorded_draws
from tests.test_video_model import clips, image_vit, randomise, tiny_video
from trainer.errors import ConfigError
from video.inflate import init_from_image_vit
from video.model import STACKS


def _video(layout, **options):
  """A tiny model of ``layout`` with relative temporal biases and a drop-path ramp over 3 layers."""
  return tiny_video(attention=layout, temporal_posemb='relative', depth=3, drop_path=0.2, **options)


def _params(model):
  return nnx.to_pure_dict(nnx.state(model, nnx.Param))


def _load(model, tree):
  state = nnx.state(model, nnx.Param)
  nnx.replace_by_pure_dict(state, tree)
  nnx.update(model, state)


def _assert_trees_close(actual, expected, atol):
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=1e-5)


def _loss_and_grads(model, inputs):
  def loss(model):
    logits, _ = model(inputs)
    return jnp.sum(jnp.sin(logits))

  value, grads = nnx.jit(nnx.value_and_grad(loss))(model)  # compiled once: faster than op by op
  return value, nnx.to_pure_dict(grads)


# Each layout scanned once, the remat policies shared among them (the two stacks of 'divided' are scanned side by side).
REMAT_BY_LAYOUT = {
  'spacetime': 'none',
  'factorised_encoder': 'dots_with_no_batch_dims_saveable',
  'divided': 'full',
  'factorised_dot_product': 'dots_saveable',
}


# Each layout's stochastic-depth rates per layer (the ramp over 3 blocks to 0.2; the factorised
# encoder's temporal encoder ramps over its own 2 blocks) and its residual branches per layer.
DROP_PATH_RATES = {
  'spacetime': ((0.0, 0.1, 0.2), 2),
  'factorised_encoder': ((0.0, 0.1, 0.2, 0.0, 0.2), 2),
  'divided': ((0.0, 0.1, 0.2), 3),  # temporal attention, spatial attention, MLP
  'factorised_dot_product': ((0.0, 0.1, 0.2), 2),
}


@pytest.mark.parametrize(
  'layout, remat',
  [  # the fast tier checks one layout; the full suite every one
    pytest.param(layout, remat, marks=() if layout == 'divided' else pytest.mark.slow)
    for layout, remat in REMAT_BY_LAYOUT.items()
  ],
)
def test_scanned_layout_gives_the_unrolled_numbers_and_gradients(layout, remat):
  reference = _video(layout)
  model = _video(layout, scan_layers=True, remat=remat)
  _assert_trees_close(_params(model), stack_blocks(_params(reference), STACKS), atol=0)  # the same draws
  randomise(reference)  # the zero-initialised parameters too
  _load(model, stack_blocks(_params(reference), STACKS))
  inputs = clips()
  value, grads = _loss_and_grads(model, inputs)
  expected_value, expected_grads = _loss_and_grads(reference, inputs)
  np.testing.assert_allclose(value, expected_value, rtol=1e-5)
  _assert_trees_close(grads, stack_blocks(expected_grads, STACKS), atol=1e-5)
  weights = nnx.jit(lambda model: model(inputs, return_weights=True)[1]['attention_weights'])
  _assert_trees_close(weights(model), weights(reference), atol=1e-5)
  # A training pass: each layer draws its own dropout masks and keeps examples at its drop-path rate.
  dropping, batch = _video(layout, scan_layers=True, remat=remat, dropout=0.1), 512
  many = clips(batch)
  forward = nnx.jit(lambda model: model(many, deterministic=False, rngs=nnx.Rngs(dropout=0))[0])
  draws = recorded_draws(lambda: forward(dropping))
  assert_masks_differ(dropout_masks(draws))
  rates, per_layer = DROP_PATH_RATES[layout]
  assert_drop_path_follows(draws, rates, per_layer)


def test_unrolled_rematerialised_layout_gives_the_plain_numbers():
  reference = randomise(_video('divided'))
  model = randomise(_video('divided', remat='dots_with_no_batch_dims_saveable'))
  value, grads = _loss_and_grads(model, clips())
  expected_value, expected_grads = _loss_and_grads(reference, clips())
  np.testing.assert_allclose(value, expected_value, rtol=1e-5)
  _assert_trees_close(grads, expected_grads, atol=1e-5)


@pytest.mark.parametrize('layout', ['divided', pytest.param('factorised_encoder', marks=pytest.mark.slow)])
def test_checkpoints_convert_between_unrolled_and_scanned(layout):
  unrolled = randomise(_video(layout))
  scanned_tree = stack_blocks(_params(unrolled), STACKS)
  depths = {
    name: jax.tree.leaves(node)[0].shape[0] for name, node in scanned_tree['layout'].items() if name in STACKS
  }
  assert depths == (
    {'blocks': 3, 'temporal': 3} if layout == 'divided' else {'blocks': 3, 'temporal_blocks': 2}
  )
  assert sorted(scanned_tree['layout']['time_biases']) == list(range(3 if layout == 'divided' else 2))  # kept
  scanned = _video(layout, scan_layers=True)
  _load(scanned, scanned_tree)
  np.testing.assert_allclose(scanned(clips())[0], unrolled(clips())[0], rtol=1e-5, atol=1e-5)
  _assert_trees_close(unstack_blocks(_params(scanned), STACKS), _params(unrolled), atol=0)


@pytest.mark.parametrize(
  'image_scanned, video_scanned',
  [
    (False, True),
    pytest.param(True, False, marks=pytest.mark.slow),
    pytest.param(True, True, marks=pytest.mark.slow),
  ],
)
def test_inflation_from_an_image_vit_works_scanned_or_not(image_scanned, video_scanned):
  image = image_vit(scan_layers=image_scanned)
  video = tiny_video(
    attention='divided',
    clip_shape=(1, 8, 8, 2),
    temporal_posemb='none',
    scan_layers=video_scanned,
  )
  init_from_image_vit(video, image)
  images = clips(shape=(8, 8, 2))
  np.testing.assert_allclose(video(images[:, None])[0], image(images)[0], rtol=1e-5, atol=1e-5)


def test_an_unknown_remat_is_a_config_error_naming_the_field():
  with pytest.raises(ConfigError, match=r"^config\.model\.remat is 'some'; allowed values: none, full, "):
    tiny_video(remat='some')


def test_layer_decay_with_scanned_stacks_is_refused_in_one_line():
  from tests.test_video_training import tiny_video_config
  from trainer.task import load_task

  config = tiny_video_config(**{'model.scan_layers': True})
  config.optimizer.layer_decay = 0.75
  with pytest.raises(ConfigError, match=r'^config\.optimizer\.layer_decay needs one parameter per layer'):
    load_task(config)


@pytest.mark.slow  # trains through the trainer
def test_a_scanned_rematerialised_video_model_trains_and_its_checkpoint_evaluates(tmp_path):
  from tests.test_video_training import tiny_video_config
  from trainer.evaluation import evaluate_workdir
  from trainer.loop import train_and_evaluate

  config = tiny_video_config(
    **{'model.depth': 2, 'model.temporal_depth': 2, 'model.scan_layers': True, 'model.remat': 'full'}
  )
  train_and_evaluate(config, tmp_path)
  result = evaluate_workdir(tmp_path)
  assert result['step'] == 4 and 0.0 <= result['accuracy'] <= 1.0


def test_a_config_written_before_the_fields_builds_unrolled_stacks():
  import ml_collections

  from video.model import make_video_model, model_section

  saved = ml_collections.ConfigDict(
    {name: value for name, value in model_section({}).items() if name not in ('scan_layers', 'remat')}
  )
  model = nnx.eval_shape(
    lambda: make_video_model(saved, num_classes=5, clip_shape=(4, 8, 8, 1), rngs=nnx.Rngs(0))
  )
  assert isinstance(model.layout.blocks, nnx.List) and model.layout.remat == 'none'
