"""The ViT through the generic trainer: real steps, devices, resume, evaluation and bad input."""

import json
import os
import re

import jax
import numpy as np
import optax
import pytest
import tensorflow_datasets as tfds
from absl import flags
from flax import nnx
from ml_collections import config_flags

from tests.config_overrides import assert_fails_before_any_work
from tests.interruptions import stop_at_batch
from tests.micro_batch_updates import assert_micro_batches_give_the_whole_batch
from tests.vit_test_configs import tiny_vit_config
from trainer.evaluation import evaluate_workdir, restore_checkpoint
from trainer.io.metrics_io import read_metrics
from trainer.loop import train_and_evaluate
from trainer.partitioning import global_batch, make_mesh
from trainer.state import ModelParts, TrainState, make_train_step
from trainer.task import load_task

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train_losses(workdir):
  return {r['step']: r['loss'] for r in read_metrics(workdir) if r['split'] == 'train' and 'loss' in r}


def _params(workdir, which='latest', params='raw'):
  _, _, chosen, step = restore_checkpoint(workdir, which, params=params)
  return step, jax.tree.map(np.asarray, nnx.to_pure_dict(chosen))


@pytest.fixture(scope='module')
def finished_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('digits')
  result = train_and_evaluate(tiny_vit_config(), workdir)
  return workdir, result


@pytest.mark.slow  # runs the trainer
def test_digits_trains_and_writes_a_self_describing_workdir(finished_run):
  workdir, result = finished_run
  assert result.step == 8 and not result.interrupted
  assert set(result.eval_metrics) >= {'accuracy', 'loss'}
  losses = _train_losses(workdir)
  assert sorted(losses) == list(range(1, 9)) and all(np.isfinite(list(losses.values())))
  saved = json.loads((workdir / 'config.json').read_text())
  assert saved['model']['width'] == 16 and saved['task'] == 'vit.task:ImageClassification'
  evals = [r for r in read_metrics(workdir) if r['split'] == 'eval']
  assert [r['step'] for r in evals] == [4, 8]
  assert any((workdir / 'tensorboard' / 'train').iterdir())


@pytest.mark.slow  # runs the trainer
def test_evaluate_reproduces_the_logged_accuracy(finished_run):
  workdir, _ = finished_run
  logged = {r['step']: r for r in read_metrics(workdir) if r['split'] == 'eval'}
  for which, step in [('latest', 8), ('4', 4)]:
    result = evaluate_workdir(workdir, which)
    assert result['step'] == step and result['split'] == 'test'
    assert result['accuracy'] == pytest.approx(logged[step]['accuracy'], abs=1e-6)
    assert result['loss'] == pytest.approx(logged[step]['loss'], rel=1e-5)
    assert json.loads((workdir / f'eval_test_step{step}.json').read_text())['accuracy'] == result['accuracy']
  best = evaluate_workdir(workdir, 'best')
  assert best['accuracy'] == max(r['accuracy'] for r in logged.values())


# The moving average of the parameters and every augmentation drawn per step.
RECIPE = {
  'ema.decay': 0.9,
  'data.augment.mixup_alpha': 0.8,
  'data.augment.cutmix_alpha': 1.0,
  'data.augment.erase_prob': 0.25,
  'data.augment.repeats': 2,
}


@pytest.mark.slow  # runs the trainer
@pytest.mark.parametrize('recipe', [{}, RECIPE], ids=['plain', 'ema_cutmix_erasing_repeats'])
def test_interrupted_run_resumes_to_the_same_parameters(finished_run, tmp_path, monkeypatch, recipe):
  reference_dir, _ = finished_run
  if recipe:
    reference_dir = tmp_path / 'uninterrupted'
    train_and_evaluate(tiny_vit_config(**recipe), reference_dir)
    tmp_path = tmp_path / 'interrupted'
  stop_at_batch(monkeypatch, 4)
  first = train_and_evaluate(tiny_vit_config(**recipe), tmp_path)
  assert first.interrupted and 0 < first.step < 8
  second = train_and_evaluate(tiny_vit_config(**recipe), tmp_path)
  assert second.step == 8 and not second.interrupted
  for params in ('raw', 'ema') if recipe else ('raw',):
    reference_step, reference = _params(reference_dir, params=params)
    step, resumed = _params(tmp_path, params=params)
    assert step == reference_step == 8
    jax.tree.map(np.testing.assert_array_equal, resumed, reference)
  assert _train_losses(tmp_path) == _train_losses(reference_dir)


def train_tiny_vit(workdir):
  """On 8 devices: the tiny ViT trained into ``workdir``."""
  train_and_evaluate(tiny_vit_config(), workdir)


@pytest.mark.slow  # runs on 8 host devices
def test_eight_devices_give_the_same_losses_as_one(finished_run, tmp_path, eight_devices):
  reference_dir, _ = finished_run
  eight_devices(train_tiny_vit, workdir=str(tmp_path))
  eight, one = _train_losses(tmp_path), _train_losses(reference_dir)
  assert sorted(eight) == sorted(one)
  np.testing.assert_allclose([eight[s] for s in sorted(one)], [one[s] for s in sorted(one)], rtol=2e-5)


@pytest.mark.slow  # runs the trainer
def test_gradient_accumulation_trains(tmp_path):
  result = train_and_evaluate(
    tiny_vit_config(grad_accum_steps=4, total_steps=2, eval_every_steps=2), tmp_path
  )
  assert result.step == 2 and np.isfinite(result.eval_metrics['loss'])


@pytest.mark.slow  # trains each way
def test_micro_batches_give_the_whole_batch_update_and_metrics(tmp_path):
  task = load_task(tiny_vit_config(**{'model.dropout': 0.0}))
  task.prepare(tmp_path)
  batch = next(task.train_batches(batch_size=32, seed=0, start_step=0, process_index=0, process_count=1))
  assert_micro_batches_give_the_whole_batch(task, batch, 4, ('loss', 'accuracy'))


def test_micro_batches_are_traced_once_inside_the_scan(tmp_path, monkeypatch):
  """The scan starts from zero gradients and empty metrics: no micro-batch is traced outside it."""
  task = load_task(tiny_vit_config(**{'model.dropout': 0.0}))
  task.prepare(tmp_path)
  batch = next(task.train_batches(batch_size=32, seed=0, start_step=0, process_index=0, process_count=1))
  traced = []
  original = type(task).loss_and_outputs

  def counted(self, model, batch, **kwargs):
    traced.append(batch['image'].shape[0])
    return original(self, model, batch, **kwargs)

  monkeypatch.setattr(type(task), 'loss_and_outputs', counted)
  parts = ModelParts(task.make_model(nnx.Rngs(params=0)))
  optimizer, mesh = optax.sgd(1.0), make_mesh()
  state = TrainState(step=np.int32(0), params=parts.params, opt_state=optimizer.init(parts.params))
  step = make_train_step(task, parts, optimizer, mesh, seed=0, grad_accum_steps=4)
  step.lower(state, task.train_metrics.empty(), global_batch(batch, mesh))
  assert traced == [8]


@pytest.mark.slow  # runs the trainer
def test_few_steps_on_mock_cifar10(tmp_path):
  config = tiny_vit_config(total_steps=3, eval_every_steps=3)
  config.data.update(source='tfds', name='cifar10')
  config.data.augment.update(crop_padding=4, flip=True)
  config.eval_batch_size = 32
  with tfds.testing.mock_data(num_examples=64):
    result = train_and_evaluate(config, tmp_path)
  assert result.step == 3 and 0.0 <= result.eval_metrics['accuracy'] <= 1.0


@pytest.mark.slow  # runs the trainer
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
  config = tiny_vit_config(checkpoint_every_steps=1, eval_every_steps=100, total_steps=20)
  config.optimizer.update(learning_rate=1e30, grad_clip_norm=0.0, warmup_steps=3, schedule='constant')
  with pytest.raises(FloatingPointError, match='last good checkpoint') as error:
    train_and_evaluate(config, tmp_path)
  diverged_at = int(re.search(r'by step (\d+)', str(error.value)).group(1))
  kept = int(re.search(r'checkpoint \(step (\d+)\)', str(error.value)).group(1))
  step, params = _params(tmp_path)
  assert 0 < step < 20 and step == kept == diverged_at - 1, str(error.value)  # a checkpoint every step
  assert all(np.all(np.isfinite(p)) for p in jax.tree.leaves(params))


def _parse_config(args):
  argv = ['train.py', f'--config={ROOT}/configs/vit_digits.py', *args]
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file(
    'config', None, '', flag_values=flag_values, lock_config=True, sys_argv=argv
  )
  flag_values(argv)
  return flag_values.config


def test_config_overrides_are_checked_by_name_and_type():
  assert _parse_config(['--config.model.posemb=sincos2d']).model.posemb == 'sincos2d'
  with pytest.raises(AttributeError, match='posembb'):
    _parse_config(['--config.model.posembb=sincos2d'])
  with pytest.raises(flags.IllegalFlagValueError, match='depth'):
    _parse_config(['--config.model.depth=four'])


@pytest.mark.parametrize(
  'overrides,message',
  [
    ({'model.posemb': 'learned'}, 'allowed values: none, learn1d'),
    ({'model.pool': 'max'}, 'allowed values: cls, gap, map'),
    ({'model.variant': 'XL/16'}, 'Unknown ViT variant'),
    ({'model.patch_size': 3}, 'not divisible by the patch size'),
    ({'optimizer.name': 'lamb'}, 'allowed values: adamw, sgd'),
    ({'data.source': 'tfds', 'data.name': 'cifar10', 'data.data_dir': '{tmp}/no_tfds'}, 'tfds build'),
    ({'data.source': 'folder', 'data.path': '{tmp}/missing'}, 'missing'),
    ({'data.source': 'idx', 'data.path': '{tmp}'}, 'train-images-idx3-ubyte'),
  ],
)
def test_bad_input_fails_before_any_work(tmp_path, overrides, message):
  assert_fails_before_any_work(tiny_vit_config, overrides, message, tmp_path)


def test_empty_and_unreadable_image_folders_fail_clearly(tmp_path):
  (tmp_path / 'images' / 'train' / 'cat').mkdir(parents=True)
  with pytest.raises((ValueError, FileNotFoundError), match='cat'):
    train_and_evaluate(
      tiny_vit_config(**{'data.source': 'folder', 'data.path': str(tmp_path / 'images')}),
      tmp_path / 'workdir',
    )
  (tmp_path / 'images' / 'train' / 'cat' / 'broken.png').write_bytes(b'not a png')
  with pytest.raises((ValueError, OSError), match='broken.png'):
    train_and_evaluate(
      tiny_vit_config(**{'data.source': 'folder', 'data.path': str(tmp_path / 'images')}),
      tmp_path / 'workdir',
    )


@pytest.mark.slow  # runs the trainer
def test_workdir_of_another_model_is_refused_and_left_intact(finished_run):
  workdir, _ = finished_run
  before = sorted(p.name for p in (workdir / 'checkpoints').iterdir())
  config_before = (workdir / 'config.json').read_text()
  with pytest.raises(ValueError, match='model.width is 16 there and 32 now'):
    train_and_evaluate(tiny_vit_config(**{'model.width': 32}), workdir)
  assert sorted(p.name for p in (workdir / 'checkpoints').iterdir()) == before
  assert (workdir / 'config.json').read_text() == config_before
