"""Fine-tuning from a checkpoint: init_from an exported .npz or a workdir, a new grid, few-shot evaluation."""

import json
import pathlib
import subprocess
import sys
from unittest import mock

import jax
import ml_collections
import numpy as np
import pytest
from flax import nnx

from tests.compilations import counted_compilations
from tests.config_overrides import override
from tests.vit_test_configs import tiny_vit_config
from trainer.errors import CheckpointError, ConfigError
from trainer.evaluation import restore_checkpoint
from trainer.loop import train_and_evaluate
from trainer.partitioning import Devices, make_mesh
from trainer.task import load_task
from vit import fewshot, pretrained
from vit.fewshot import __main__ as fewshot_command
from vit.weights.export_npz import export

REPO = pathlib.Path(__file__).resolve().parent.parent


def _finetune_config(path, **overrides):
  config = tiny_vit_config()
  config.init_from = pretrained.default_init_from_config()
  config.init_from.path = str(path)
  return override(config, overrides)


@pytest.fixture(scope='module')
def pretrained_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('pretrain')
  train_and_evaluate(tiny_vit_config(), workdir)
  npz = workdir / 'model.npz'
  assert 'wrote step 8' in export(str(workdir), str(npz))
  return workdir, npz


def _block_params(model):
  return {
    name: np.asarray(value)
    for name, value in nnx.to_flat_state(nnx.state(model.encoder.blocks, nnx.Param))
    if not isinstance(name, str)
  }


@pytest.mark.slow  # runs the trainer
def test_exported_npz_and_the_workdir_load_the_trained_parameters(pretrained_run):
  workdir, npz = pretrained_run
  _, parts, params, _ = restore_checkpoint(workdir)
  trained = parts.merge(params)
  for source in (npz, workdir):
    task = load_task(_finetune_config(source))
    task.check_training_data()
    model = task.make_model(nnx.Rngs(1))
    task.load_initial(model)
    for ours, theirs in zip(
      nnx.state(model, nnx.Param).flat_state(), nnx.state(trained, nnx.Param).flat_state()
    ):
      assert ours[0] == theirs[0]
      np.testing.assert_array_equal(
        np.asarray(ours[1].get_value()), np.asarray(theirs[1].get_value()), err_msg=str(ours[0])
      )


@pytest.mark.slow  # runs the trainer
def test_finetune_at_another_resolution_resamples_and_trains(pretrained_run, tmp_path, capsys):
  _, npz = pretrained_run
  config = _finetune_config(npz)
  config.data.image_size = (12, 12)  # a 3x3 grid from the 2x2 one
  config.init_from.resample = 'bicubic'
  result = train_and_evaluate(config, tmp_path / 'finetune')
  assert result.step == 8
  assert 'resampled 2x2 -> 3x3 (bicubic)' in capsys.readouterr().out


@pytest.mark.slow  # runs the trainer
def test_bad_sources_fail_before_the_workdir_is_made(pretrained_run, tmp_path):
  _, npz = pretrained_run
  not_npz = tmp_path / 'weights.npz'
  not_npz.write_text('text')
  with pytest.raises(CheckpointError, match='is not an .npz file'):
    train_and_evaluate(_finetune_config(not_npz), tmp_path / 'a')
  assert not (tmp_path / 'a').exists()
  with pytest.raises(
    CheckpointError, match=r"'embedding/kernel' has shape \(4, 4, 1, 16\); the model needs \(4, 4, 1, 32\)"
  ):
    train_and_evaluate(_finetune_config(npz, **{'model.width': 32}), tmp_path / 'b')
  assert not (tmp_path / 'b').exists()
  with pytest.raises(ConfigError, match='10x10 is not divisible by the patch size 4x4'):
    config = _finetune_config(npz)
    config.data.image_size = (10, 10)
    load_task(config)
  with pytest.raises(ConfigError, match="init_from.resample is 'nearest'; allowed values: bilinear, bicubic"):
    load_task(_finetune_config(npz, **{'init_from.resample': 'nearest'}))


def test_fewshot_solver_separates_separable_features_and_not_noise():
  rng = np.random.default_rng(0)
  centres = rng.normal(size=(4, 16)) * 3.0

  def clustered(n):
    labels = rng.integers(0, 4, n)
    return centres[labels] + rng.normal(size=(n, 16)), labels

  results = fewshot.fewshot_results(clustered(400), clustered(200), (1, 5), seeds=3)
  assert results['fewshot_5shot'] > 0.9
  noise = (rng.normal(size=(400, 16)), rng.integers(0, 4, 400))
  chance = fewshot.fewshot_results(
    noise, (rng.normal(size=(400, 16)), rng.integers(0, 4, 400)), (5,), seeds=3
  )
  assert chance['fewshot_5shot'] < 0.45


@pytest.mark.slow  # runs the trainer
def test_fewshot_runs_as_the_periodic_extra_evaluation_and_from_a_workdir(pretrained_run):
  config = tiny_vit_config()
  config.fewshot = ml_collections.ConfigDict(
    dict(shots=(1, 5), seeds=2, held_out_per_class=5, train_examples=500)
  )
  task = load_task(config)
  metrics = task.extra_evaluation(task.make_model(nnx.Rngs(0)), 'test', None, None)
  assert 0.0 <= metrics['fewshot_5shot'] <= 1.0 and 'fewshot_1shot_std' in metrics
  workdir, _ = pretrained_run
  from_workdir = fewshot_command.evaluate_workdir_fewshot(
    str(workdir), 'latest', 'digits', None, (2,), seeds=2
  )
  assert 0.0 <= from_workdir['fewshot_2shot'] <= 1.0 and from_workdir['step'] == 8


@pytest.mark.slow  # starts the command
def test_the_fewshot_command_prints_the_workdirs_accuracies_and_refuses_bad_shots(pretrained_run):
  workdir, _ = pretrained_run
  command = [sys.executable, '-m', 'vit.fewshot', f'--workdir={workdir}', '--source=digits', '--seeds=2']
  result = subprocess.run([*command, '--shots=2'], cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr
  printed = json.loads(result.stdout.splitlines()[-1])
  expected = fewshot_command.evaluate_workdir_fewshot(str(workdir), 'latest', 'digits', None, (2,), seeds=2)
  assert printed == pytest.approx(expected)
  bad = subprocess.run([*command, '--shots=0'], cwd=REPO, capture_output=True, text=True, timeout=600)
  assert bad.returncode == 2 and bad.stderr.splitlines() == [
    "error: --shots must be whole numbers >= 1 separated by commas, got '0'."
  ], bad.stderr


def _fewshot_config():
  config = tiny_vit_config()
  config.fewshot = ml_collections.ConfigDict(
    dict(shots=(1, 5), seeds=2, held_out_per_class=5, train_examples=500)
  )
  return config


def test_a_second_fewshot_evaluation_compiles_nothing():
  task = load_task(_fewshot_config())
  first, second = task.make_model(nnx.Rngs(0)), task.make_model(nnx.Rngs(1))
  with counted_compilations() as compiled:
    jax.jit(lambda x: x * 3.0 + 1.0)(np.zeros(3))  # the listener hears compilations
    assert compiled
    task.extra_evaluation(first, 'test', None, None)  # compiles, unless an earlier test did
    after_first = len(compiled)
    results = task.extra_evaluation(second, 'test', None, None)  # new parameters, the same model
  assert len(compiled) == after_first
  assert 0.0 <= results['fewshot_5shot'] <= 1.0


def fewshot_accuracies():
  """On 8 devices: the few-shot accuracies of an untrained tiny ViT, its features computed on all 8."""
  gather, gathered = Devices.gather, []

  def gather_checked(self, tree):
    gathered.append(len(tree[0].sharding.device_set))  # the devices that computed the features
    return gather(self, tree)

  with mock.patch.object(Devices, 'gather', gather_checked):
    task = load_task(_fewshot_config())
    results = task.extra_evaluation(task.make_model(nnx.Rngs(0)), 'test', None, Devices(make_mesh()))
  assert gathered and set(gathered) == {8}, gathered
  return results


@pytest.mark.slow  # runs on 8 host devices
def test_fewshot_on_eight_devices_gives_the_one_device_accuracies(eight_devices):
  eight = eight_devices(fewshot_accuracies)
  assert jax.device_count() == 1
  task = load_task(_fewshot_config())
  one = task.extra_evaluation(task.make_model(nnx.Rngs(0)), 'test', None, None)
  assert eight == one
