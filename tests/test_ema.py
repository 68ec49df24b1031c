"""The moving average of the parameters: its warm-up, its update in the step, saved, restored, evaluated."""

import glob

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tests.vit_test_configs import tiny_vit_config
from trainer import validation
from trainer.ema import decay_at, update_ema
from trainer.errors import CheckpointError, ConfigError
from trainer.evaluation import evaluate_workdir, restore_checkpoint
from trainer.io.metrics_io import read_metrics
from trainer.loop import train_and_evaluate
from trainer.partitioning import global_batch, make_mesh
from trainer.predictor import load_predictor
from trainer.state import ModelParts, TrainState, make_train_step
from trainer.task import load_task


def _pure(params):
  return jax.tree.map(np.asarray, nnx.to_pure_dict(params))


def timm_model_ema_v3_decay(decay: float, step: int, use_warmup: bool) -> float:
  """timm's ``ModelEmaV3.get_decay(step)`` (``warmup_gamma=1``, ``warmup_power=2/3``, ``min_decay=0``),
  with ``step`` counted as timm's ``train.py`` counts it: the updates made, this one included."""
  step = max(0, step - 1)
  if step <= 0:
    return 0.0
  if not use_warmup:
    return decay
  return max(min(1 - (1 + step) ** (-2 / 3), decay), 0.0)


def test_default_decay_is_constant_from_the_first_update_as_model_ema_v2():
  t = np.array([0, 1, 8, 90, 10**6])
  np.testing.assert_allclose(decay_at(0.99996, t), np.full(5, 0.99996, np.float32))
  assert not tiny_vit_config().ema.warmup


def test_warm_up_follows_timm_model_ema_v3():
  t = np.array([0, 1, 2, 8, 90, 31_622, 10**6, 10**9])
  for decay in (0.99996, 0.999, 0.5):
    expected = [timm_model_ema_v3_decay(decay, int(u) + 1, use_warmup=True) for u in t]
    np.testing.assert_allclose(decay_at(decay, t, warmup=True), expected, rtol=1e-6, atol=1e-7)
  assert decay_at(0.9999, 31_622, warmup=True) == pytest.approx(0.999, abs=1e-6)


def test_update_is_a_weighted_sum_with_the_decay():
  ema = {'w': jnp.array([1.0, 2.0]), 'b': jnp.array(4.0)}
  params = {'w': jnp.array([3.0, -2.0]), 'b': jnp.array(0.0)}
  for warmup, d in [(False, 0.99), (True, 1 - 2 ** (-2 / 3))]:
    updated = update_ema(ema, params, 0.99, jnp.int32(1), warmup)
    np.testing.assert_allclose(updated['w'], [d * 1 + (1 - d) * 3, d * 2 - (1 - d) * 2], rtol=1e-6)
    np.testing.assert_allclose(updated['b'], d * 4, rtol=1e-6)


def test_the_compiled_step_moves_the_average_towards_the_new_parameters(tmp_path):
  task = load_task(tiny_vit_config(**{'model.dropout': 0.0}))
  task.prepare(tmp_path)
  batch = next(task.train_batches(batch_size=32, seed=0, start_step=0, process_index=0, process_count=1))
  parts = ModelParts(task.make_model(nnx.Rngs(params=0)))
  optimizer, mesh = optax.sgd(0.5), make_mesh()
  start = _pure(parts.params)
  ema = jax.tree.map(lambda p: p + 1.0, parts.params)  # an average apart from the parameters
  for warmup, d in [(False, 0.999), (True, 1 - 4 ** (-2 / 3))]:  # t = 3 updates before this one
    params = jax.tree.map(jnp.copy, parts.params)  # the step donates the state
    state = TrainState(
      step=jnp.int32(3),
      params=params,
      opt_state=optimizer.init(params),
      ema_params=jax.tree.map(jnp.copy, ema),
    )
    step = make_train_step(task, parts, optimizer, mesh, seed=0, ema_decay=0.999, ema_warmup=warmup)
    new_state, _ = step(state, task.train_metrics.empty(), global_batch(batch, mesh))
    new_params, new_ema = _pure(new_state.params), _pure(new_state.ema_params)
    moved = jax.tree.map(lambda s, p: not np.allclose(s, p), start, new_params)
    assert any(jax.tree.leaves(moved))
    jax.tree.map(
      lambda e, s, p, d=d: np.testing.assert_allclose(e, d * (s + 1.0) + (1 - d) * p, rtol=1e-5, atol=1e-6),
      new_ema,
      start,
      new_params,
    )
  plain = make_train_step(task, parts, optimizer, mesh, seed=0)
  assert plain.lower(state.replace(ema_params=None), task.train_metrics.empty(), global_batch(batch, mesh))


@pytest.mark.parametrize(
  'value, message',
  [
    (1.0, r'config.ema.decay is 1.0; it must be a number in \[0, 1\)'),
    (-0.5, r'config.ema.decay is -0.5'),
    (float('inf'), r'config.ema.decay is inf'),
  ],
)
def test_bad_decay_is_one_line(value, message):
  config = tiny_vit_config()
  config.ema.decay = value
  with pytest.raises(ConfigError, match=message) as error:
    validation.check_trainer_fields(config)
  assert '\n' not in str(error.value)


def test_unknown_ema_field_is_one_line():
  config = tiny_vit_config()
  config.ema.warm_up = True
  with pytest.raises(
    ConfigError, match=r'unknown config field ema.warm_up; the fields of ema are: decay, warmup'
  ):
    validation.check_trainer_fields(config)


def test_best_metric_may_be_the_averages():
  config = tiny_vit_config(best_metric='ema_accuracy', **{'ema.decay': 0.9})
  load_task(config)
  config.ema.decay = 0.0
  with pytest.raises(ConfigError, match='best_metric'):
    load_task(config)


@pytest.fixture(scope='module')
def ema_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('ema')
  result = train_and_evaluate(tiny_vit_config(**{'ema.decay': 0.9}), workdir)
  return workdir, result


@pytest.mark.slow  # runs the trainer
def test_the_average_is_evaluated_beside_the_parameters(ema_run):
  workdir, result = ema_run
  assert {'accuracy', 'loss', 'ema_accuracy', 'ema_loss'} <= set(result.eval_metrics)
  evals = {r['step']: r for r in read_metrics(workdir) if r['split'] == 'eval'}
  assert sorted(evals) == [4, 8] and all('ema_accuracy' in r and 'ema_loss' in r for r in evals.values())
  assert evals[8]['ema_loss'] != evals[8]['loss']
  tensorflow = pytest.importorskip('tensorflow')
  tags = {
    value.tag
    for path in glob.glob(str(workdir / 'tensorboard' / 'eval' / '**' / 'events.*'), recursive=True)
    for event in tensorflow.compat.v1.train.summary_iterator(path)
    for value in event.summary.value
  }
  assert {'ema_accuracy', 'ema_loss', 'accuracy'} <= tags


@pytest.mark.slow  # runs the trainer
def test_evaluate_predict_and_export_use_the_average(ema_run, tmp_path):
  workdir, _ = ema_run
  logged = {r['step']: r for r in read_metrics(workdir) if r['split'] == 'eval'}
  for which, step in [('latest', 8), ('4', 4)]:
    result = evaluate_workdir(workdir, which, params='ema')
    assert result['params'] == 'ema' and result['step'] == step
    assert result['accuracy'] == pytest.approx(logged[step]['ema_accuracy'], abs=1e-6)
    assert result['loss'] == pytest.approx(logged[step]['ema_loss'], rel=1e-5)
    assert (workdir / f'eval_test_step{step}_ema.json').exists()
  _, _, raw, _ = restore_checkpoint(workdir)
  _, _, average, _ = restore_checkpoint(workdir, params='ema')
  assert not np.array_equal(jax.tree.leaves(_pure(raw))[0], jax.tree.leaves(_pure(average))[0])
  predictor = load_predictor(workdir, params='ema')
  jax.tree.map(np.testing.assert_array_equal, _pure(nnx.state(predictor.model, nnx.Param)), _pure(average))

  from vit.weights.checkpoint_npz import read_npz  # pylint: disable=g-import-not-at-top
  from vit.weights.export_npz import export  # pylint: disable=g-import-not-at-top

  export(str(workdir), str(tmp_path / 'ema.npz'), params='ema')
  export(str(workdir), str(tmp_path / 'raw.npz'))
  ema_npz, raw_npz = read_npz(tmp_path / 'ema.npz'), read_npz(tmp_path / 'raw.npz')
  assert ema_npz.keys() == raw_npz.keys()
  assert any(not np.array_equal(ema_npz[key], raw_npz[key]) for key in ema_npz)


@pytest.mark.slow  # runs the trainer
def test_a_run_without_the_average_says_so_in_one_line(tmp_path):
  train_and_evaluate(tiny_vit_config(total_steps=2, eval_every_steps=2), tmp_path)
  with pytest.raises(CheckpointError, match='has no moving average of the parameters') as error:
    evaluate_workdir(tmp_path, params='ema')
  assert '\n' not in str(error.value)
