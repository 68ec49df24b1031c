"""Freezing and layer-wise learning-rate decay chosen by parameter path (``config.optimizer``)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx

from benchmarks.step_cost import compiled_flops
from tests.vit_test_configs import tiny_vit_config
from trainer import validation
from trainer.errors import ConfigError
from trainer.optim import (
  default_optimizer_config,
  describe_weight_decay,
  frozen_paths,
  make_optimizer,
  parameter_groups,
  parameter_path,
)
from trainer.partitioning import global_batch, make_mesh
from trainer.state import ModelParts, TrainState, make_train_step, train_metrics
from trainer.task import load_task
from vit.model import make_vit


def _params():
  section = dict(patch_size=4, width=8, depth=3, num_heads=2, mlp_dim=16)
  model = make_vit(section, num_classes=3, image_shape=(8, 8, 1), rngs=nnx.Rngs(0))
  return nnx.split(model, nnx.Param, ...)[1]


def _config(**fields):
  config = default_optimizer_config()
  config.update(name='sgd', learning_rate=0.1, schedule='constant', momentum=0.0, grad_clip_norm=0.0)
  for name, value in fields.items():
    config[name] = value
  return config


def _one_step(config, params):
  optimizer = make_optimizer(config, total_steps=10)
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = optimizer.update(grads, optimizer.init(params), params)
  flat, _ = jax.tree_util.tree_flatten_with_path(updates)
  return {
    jax.tree_util.keystr(key, simple=True, separator='.').removesuffix('.value'): np.asarray(u)
    for key, u in flat
  }


def test_linear_probe_updates_the_head_alone():
  updates = _one_step(_config(frozen=r'^(?!head\.)'), _params())
  for path, update in updates.items():
    if path.startswith('head.'):
      np.testing.assert_allclose(update, -0.1)
    else:
      assert np.all(update == 0), path


def test_layer_decay_scales_each_layer_and_the_stem():
  config = _config(layer_decay=0.5, layer_decay_stem=r'^(patch_embedding|class_token|encoder\.positional)')
  updates = _one_step(config, _params())
  np.testing.assert_allclose(updates['head.kernel'], -0.1)
  np.testing.assert_allclose(updates['encoder.norm.scale'], -0.1)
  np.testing.assert_allclose(updates['encoder.blocks.2.mlp.fc1.kernel'], -0.1 * 0.5)
  np.testing.assert_allclose(updates['encoder.blocks.0.mlp.fc1.kernel'], -0.1 * 0.5**3)
  np.testing.assert_allclose(updates['patch_embedding.kernel'], -0.1 * 0.5**4)


def test_frozen_and_layer_decay_together():
  config = _config(frozen=r'^encoder\.blocks\.0\.', layer_decay=0.5)
  updates = _one_step(config, _params())
  assert np.all(updates['encoder.blocks.0.norm1.scale'] == 0)
  np.testing.assert_allclose(updates['encoder.blocks.1.norm1.scale'], -0.1 * 0.5**2)


def test_freezing_the_top_block_leaves_every_other_multiplier_as_it_was():
  """The depth counts every layer, frozen or not: freezing block 2 of 3 moves no other rate."""
  config = _config(layer_decay=0.5, layer_decay_stem=r'^(patch_embedding|class_token|encoder\.positional)')
  unfrozen = _one_step(config, _params())
  config.frozen = r'^encoder\.blocks\.2\.'
  top_frozen = _one_step(config, _params())
  for path, update in top_frozen.items():
    if path.startswith('encoder.blocks.2.'):
      assert np.all(update == 0), path
    else:
      np.testing.assert_allclose(update, unfrozen[path], err_msg=path)
  np.testing.assert_allclose(top_frozen['encoder.blocks.1.mlp.fc1.kernel'], -0.1 * 0.5**2)
  np.testing.assert_allclose(top_frozen['patch_embedding.kernel'], -0.1 * 0.5**4)


def test_bad_group_options_fail_with_the_field_named():
  with pytest.raises(ConfigError, match='optimizer.frozen'):
    parameter_groups(_config(frozen='('), _params())
  with pytest.raises(
    ConfigError, match=r'config\.optimizer\.layer_decay is 1\.5; it must be a number in \(0, 1\]'
  ):
    validation.check_trainer_fields(
      ml_collections.ConfigDict(
        dict(task='vit.task:ImageClassification', total_steps=1, optimizer=_config(layer_decay=1.5))
      )
    )
  with pytest.raises(ConfigError, match='optimizer.layer_regex'):
    make_optimizer(_config(layer_regex='[', layer_decay=0.5), 10)
  with pytest.raises(ConfigError, match='freezes every parameter'):
    parameter_groups(_config(frozen='.'), _params())


def test_plain_optimizer_is_unchanged_without_groups():
  updates = _one_step(_config(), _params())
  assert all(np.all(u == np.float32(-0.1)) for u in updates.values())  # every parameter, -lr * 1
  config = _config(name='adamw', learning_rate=0.01)
  params = _params()
  ours, reference = make_optimizer(config, total_steps=10), optax.adamw(0.01, weight_decay=0.0)
  our_state, reference_state = ours.init(params), reference.init(params)
  for seed in range(3):
    grads = jax.tree.map(lambda p, seed=seed: jax.random.normal(jax.random.key(seed), p.shape), params)
    our_updates, our_state = ours.update(grads, our_state, params)
    reference_updates, reference_state = reference.update(grads, reference_state, params)
    for a, b in zip(jax.tree.leaves(our_updates), jax.tree.leaves(reference_updates)):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


def _updates_with_backbone_gradients(scale):
  """One clipped linear-probe step: head gradients 0.01, backbone gradients ``scale``."""
  config = _config(frozen=r'^(?!head\.)', grad_clip_norm=1.0)
  params = _params()
  optimizer = make_optimizer(config, total_steps=10)
  grads = jax.tree_util.tree_map_with_path(
    lambda key, p: jnp.full_like(p, 0.01 if parameter_path(key).startswith('head.') else scale), params
  )
  updates, _ = optimizer.update(grads, optimizer.init(params), params)
  flat = jax.tree_util.tree_flatten_with_path(updates)[0]
  return {parameter_path(key): np.asarray(u) for key, u in flat}


def test_clipping_sees_only_the_trained_gradients():
  """A frozen backbone's gradient norm does not scale a probe's head update."""
  small, large = _updates_with_backbone_gradients(1e-3), _updates_with_backbone_gradients(1e3)
  for path in ('head.kernel', 'head.bias'):
    np.testing.assert_allclose(large[path], small[path], rtol=1e-6)
    np.testing.assert_allclose(large[path], -0.1 * 0.01, rtol=1e-6)  # head norm < 1: not clipped
  assert all(np.all(u == 0) for path, u in large.items() if not path.startswith('head.'))


def _decay_updates(params, **fields):
  """Whether SGD moves each parameter (all ones) for zero gradients: only weight decay can."""
  params = jax.tree.map(jnp.ones_like, params)
  optimizer = make_optimizer(_config(weight_decay=0.5, **fields), total_steps=10)
  updates, _ = optimizer.update(jax.tree.map(jnp.zeros_like, params), optimizer.init(params), params)
  flat = jax.tree_util.tree_flatten_with_path(updates)[0]
  return {parameter_path(key): bool(np.any(np.asarray(u) != 0)) for key, u in flat}


def test_weight_decay_applies_to_kernels_only_by_default():
  decayed = _decay_updates(_params())
  assert decayed['encoder.positional.tables.0.table'] is False
  assert decayed['class_token'] is False
  assert decayed['patch_embedding.bias'] is False and decayed['encoder.norm.scale'] is False
  assert decayed['patch_embedding.kernel'] and decayed['head.kernel']
  assert decayed['encoder.blocks.0.attention.qkv.kernel'] and decayed['encoder.blocks.2.mlp.fc2.kernel']
  embeddings = {
    'source_embedding': {'embedding': jnp.ones((5, 4))},
    'output_projection': {'kernel': jnp.ones((4, 5))},
  }
  assert _decay_updates(embeddings) == {'source_embedding.embedding': False, 'output_projection.kernel': True}


def test_weight_decay_regex_selects_what_it_names():
  decayed = _decay_updates(_params(), weight_decay_regex=r'^head\.|table$')
  assert {path for path, d in decayed.items() if d} == {
    'head.kernel',
    'head.bias',
    'encoder.positional.tables.0.table',
  }
  assert not any(_decay_updates(_params(), weight_decay_regex='').values())


def test_a_bad_weight_decay_regex_is_a_config_error():
  with pytest.raises(
    ConfigError, match=r"config.optimizer.weight_decay_regex '\(' is not a regular expression"
  ):
    make_optimizer(_config(weight_decay=0.1, weight_decay_regex='('), 10)


def test_the_weight_decay_line_counts_arrays_and_values():
  params = _params()
  line = describe_weight_decay(_config(weight_decay=0.5), params)
  leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  kernels = [leaf.size for key, leaf in leaves if parameter_path(key).endswith('kernel')]
  total = sum(leaf.size for _, leaf in leaves)
  assert line == (
    f'weight decay 0.5: {len(kernels)} of {len(leaves)} parameter arrays '
    f"({sum(kernels):,} of {total:,} values) match 'kernel$'"
  )
  assert describe_weight_decay(_config(weight_decay=0.0), params).startswith('weight decay: off')


@pytest.mark.slow  # compiles train steps
def test_a_probe_step_computes_no_frozen_gradients(tmp_path):
  """The same update with and without the frozen set, with much less work with it."""
  config = tiny_vit_config(**{'model.dropout': 0.0})
  config.optimizer.frozen = r'^(?!head\.)'
  task = load_task(config)
  task.prepare(tmp_path)
  parts = ModelParts(task.make_model(nnx.Rngs(params=0)))
  host_params = jax.tree.map(lambda p: np.asarray(p) + 0.01, parts.params)  # a head that is not zero
  mesh, optimizer = make_mesh(), make_optimizer(config.optimizer, total_steps=10)
  batch = global_batch(
    next(task.train_batches(batch_size=32, seed=0, start_step=1, process_index=0, process_count=1)), mesh
  )
  flops, params = {}, {}
  for name, frozen in (('all', frozenset()), ('probe', frozen_paths(config.optimizer, host_params))):
    state = TrainState(step=np.int32(1), params=host_params, opt_state=optimizer.init(host_params))
    step = make_train_step(task, parts, optimizer, mesh, seed=0, frozen=frozen)
    metrics = train_metrics(task).empty()
    flops[name] = compiled_flops(step.lower(state, metrics, batch).compile())
    params[name] = jax.tree.map(np.asarray, step(state, metrics, batch)[0].params)
  assert flops['probe'] < 0.6 * flops['all'], flops
  for a, b in zip(jax.tree.leaves(params['all']), jax.tree.leaves(params['probe'])):
    np.testing.assert_array_equal(a, b)
