"""Checkpoints: integrity records, fallback past damaged ones, separate items, a full disk."""

import errno
import json
import logging
import os
import pathlib
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.compilations import counted_compilations
from tests.vit_test_configs import tiny_vit_config
from trainer.errors import CheckpointError
from trainer.evaluation import restore_checkpoint
from trainer.io import checkpoints as checkpoints_lib
from trainer.io.checkpoints import Checkpoints, abstract_like, count_non_finite
from trainer.loop import train_and_evaluate
from trainer.partitioning import make_mesh, replicated
from trainer.state import TrainState

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _state(seed: int, size: int = 32) -> TrainState:
  rng = np.random.default_rng(seed)

  def array(*shape):
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32))

  return TrainState(
    step=jnp.asarray(seed, jnp.int32),
    params={'w': array(size, size), 'b': array(size)},
    opt_state={'mu': array(size, size), 'nu': array(size, size)},
  )


def _abstract(state):
  return abstract_like(state, replicated(make_mesh()))


def _save(directory, steps, **kwargs):
  checkpoints = Checkpoints(directory, **kwargs)
  for step in steps:
    checkpoints.save(step, _state(step))
  checkpoints.close()


def _warnings(caplog):
  return [
    record.getMessage()
    for record in caplog.records
    if record.name == 'trainer.io.checkpoints' and record.levelno == logging.WARNING
  ]


def _latest_step_refused(checkpoints, caplog, match: str) -> list[str]:
  """The warnings logged while ``checkpoints`` finds no step to resume from (an error matching ``match``)."""
  with caplog.at_level(logging.WARNING), pytest.raises(CheckpointError, match=match):
    checkpoints.latest_step()
  return _warnings(caplog)


def _data_file(step_dir: pathlib.Path, item: str = 'params') -> pathlib.Path:
  """The largest file of ``item``: array data (not a manifest or metadata)."""
  return max(
    (path for path in (step_dir / item).rglob('*') if path.is_file()), key=lambda p: p.stat().st_size
  )


def _truncate(step_dir):
  path = _data_file(step_dir)
  path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(step_dir):
  path = _data_file(step_dir)
  path.write_bytes(np.random.default_rng(0).bytes(path.stat().st_size))


def _flip(step_dir, item='params'):
  path = _data_file(step_dir, item)
  data = bytearray(path.read_bytes())
  middle = len(data) // 2
  data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
  path.write_bytes(bytes(data))


DAMAGE = {
  'truncated file': _truncate,
  'garbage file': _garbage,
  'flipped bytes': _flip,
  'missing file': lambda step_dir: _data_file(step_dir).unlink(),
  'missing metadata': lambda step_dir: (step_dir / '_CHECKPOINT_METADATA').unlink(),
  'missing integrity record': lambda step_dir: (step_dir / 'integrity.json').unlink(),
}


@pytest.mark.parametrize('damage', DAMAGE)
def test_damaged_latest_checkpoint_falls_back_to_the_previous_with_one_warning(tmp_path, caplog, damage):
  _save(tmp_path, [1, 2])
  DAMAGE[damage](tmp_path / 'checkpoints' / '2')
  checkpoints = Checkpoints(tmp_path, read_only=True)
  with caplog.at_level(logging.WARNING):
    assert checkpoints.latest_step() == 1
    assert checkpoints.resolve('latest') == 1
    restored = checkpoints.restore(1, _abstract(_state(0)))
  warnings = _warnings(caplog)
  assert len(warnings) == 1 and 'Checkpoint 2 in' in warnings[0] and 'using step 1' in warnings[0], warnings
  expected = _state(1)
  assert int(restored.step) == 1
  jax.tree.map(np.testing.assert_array_equal, restored.params, expected.params)
  jax.tree.map(np.testing.assert_array_equal, restored.opt_state, expected.opt_state)
  with pytest.raises(CheckpointError, match='Checkpoint 2 in .* is damaged'):
    checkpoints.resolve('2')
  with pytest.raises(CheckpointError, match='Checkpoint 2 in .* is damaged'):
    checkpoints.restore(2, _abstract(_state(0)))
  checkpoints.close()


def test_no_intact_checkpoint_is_an_error_naming_each(tmp_path, caplog):
  _save(tmp_path, [1, 2])
  for step in (1, 2):
    _flip(tmp_path / 'checkpoints' / str(step))
  checkpoints = Checkpoints(tmp_path, read_only=True)
  assert len(_latest_step_refused(checkpoints, caplog, 'No intact checkpoint.*step 2.*step 1')) == 2
  checkpoints.close()


def test_evaluation_needs_only_intact_parameters(tmp_path, caplog):
  _save(tmp_path, [1, 2])
  _flip(tmp_path / 'checkpoints' / '2', 'opt_state')
  for_evaluation = Checkpoints(tmp_path, read_only=True, needed_items=('params',))
  with caplog.at_level(logging.WARNING):
    assert for_evaluation.latest_step() == 2
    params = for_evaluation.restore_params(2, _abstract(_state(0).params))
  assert not _warnings(caplog)
  jax.tree.map(np.testing.assert_array_equal, params, _state(2).params)
  with pytest.raises(CheckpointError, match='opt_state/.* differs from its checksum'):
    for_evaluation.restore(2, _abstract(_state(0)))
  for_training = Checkpoints(tmp_path, read_only=True)
  assert for_training.latest_step() == 1
  for checkpoints in (for_evaluation, for_training):
    checkpoints.close()


def test_a_checkpoint_of_the_old_format_is_not_trusted(tmp_path, caplog):
  manager = ocp.CheckpointManager(tmp_path / 'checkpoints')
  manager.save(5, args=ocp.args.StandardSave(_state(5)))
  manager.close()
  checkpoints = Checkpoints(tmp_path, read_only=True)
  assert len(_latest_step_refused(checkpoints, caplog, 'step 5: it has no integrity.json')) == 1
  with pytest.raises(CheckpointError, match='Checkpoint 5 in .* is damaged or incomplete'):
    checkpoints.resolve(5)
  checkpoints.close()


def test_training_past_damaged_steps_moves_them_aside(tmp_path, caplog):
  _save(tmp_path, [1, 2, 3])
  for step in (2, 3):
    _flip(tmp_path / 'checkpoints' / str(step))
  checkpoints = Checkpoints(tmp_path)
  with caplog.at_level(logging.WARNING):
    assert checkpoints.latest_step() == 1
    for step in (2, 3):
      checkpoints.save(step, _state(step + 10))
  checkpoints.close()
  assert sorted(path.name for path in (tmp_path / 'damaged_checkpoints').iterdir()) == ['2', '3']
  assert sum('Moved damaged checkpoint' in message for message in _warnings(caplog)) == 2
  checkpoints = Checkpoints(tmp_path, read_only=True)
  assert checkpoints.all_steps() == [1, 2, 3] and checkpoints.latest_step() == 3
  jax.tree.map(
    np.testing.assert_array_equal,
    checkpoints.restore_params(3, _abstract(_state(0).params)),
    _state(13).params,
  )
  checkpoints.close()


def test_a_checkpoint_with_non_finite_parameters_is_not_restored(tmp_path):
  state = _state(3)
  state = state.replace(params={**state.params, 'b': state.params['b'].at[0].set(jnp.inf)})
  checkpoints = Checkpoints(tmp_path)
  checkpoints.save(3, state)
  checkpoints.wait()
  refused = r'Checkpoint 3 in .* has non-finite values in 1 of its 2 parameter arrays'
  with pytest.raises(CheckpointError, match=refused):
    checkpoints.restore(3, _abstract(state))
  with pytest.raises(CheckpointError, match=refused):
    checkpoints.restore_params(3, _abstract(state.params))
  checkpoints.close()


def test_host_arrays_are_checked_for_non_finite_values_without_compiling(monkeypatch):
  floats = {'w': np.ones((3, 7), np.float32), 'b': np.full(5, np.nan, np.float32), 'h': np.ones((2, 11))}
  floats['h'][1, 3] = -np.inf
  tree = {**jax.device_put(floats), 'count': jax.device_put(np.arange(4)), 'host': np.ones(2)}
  with counted_compilations() as compiles:
    assert count_non_finite(tree) == 2
  assert not compiles
  monkeypatch.setattr(checkpoints_lib, '_on_this_host', lambda x: False)  # as on an accelerator
  assert count_non_finite(tree) == 2


def test_items_are_saved_apart_and_the_parameters_restore_alone(tmp_path):
  _save(tmp_path, [3], asynchronous=False)
  step_dir = tmp_path / 'checkpoints' / '3'
  assert {'params', 'opt_state', 'meta', 'integrity.json'} <= {path.name for path in step_dir.iterdir()}
  checkpoints = Checkpoints(tmp_path, read_only=True)
  params = checkpoints.restore_params(3, _abstract(_state(0).params))
  jax.tree.map(np.testing.assert_array_equal, params, _state(3).params)
  checkpoints.close()


def _fixture_values(offset):
  return {
    'w': np.arange(6, dtype=np.float32).reshape(2, 3) + offset,
    'b': np.arange(3, dtype=np.float32) - offset,
  }


def test_a_checkpoint_written_by_the_first_layout_still_restores(tmp_path):
  """tests/fixtures/checkpoint_layout_1 was saved by the code before the checkpoint items were declared
  once; its ``meta`` item still carries the ``format`` field that is no longer written."""
  shutil.copytree(ROOT / 'tests' / 'fixtures' / 'checkpoint_layout_1', tmp_path, dirs_exist_ok=True)
  assert json.loads((tmp_path / 'checkpoints' / '7' / 'meta' / 'metadata').read_text())['format'] == 2
  like = TrainState(
    step=jnp.asarray(0, jnp.int32),
    params=_fixture_values(0.0),
    opt_state={'mu': _fixture_values(0.0)},
    ema_params=_fixture_values(0.0),
  )
  checkpoints = Checkpoints(tmp_path, read_only=True, best_metric='accuracy')
  assert checkpoints.resolve('latest') == checkpoints.resolve('best') == 7
  state = checkpoints.restore(7, _abstract(like))
  assert int(state.step) == 7
  for restored, offset in ((state.params, 0.5), (state.opt_state['mu'], 1.0), (state.ema_params, 0.25)):
    jax.tree.map(np.testing.assert_array_equal, restored, _fixture_values(offset))
  average = checkpoints.restore_params(7, _abstract(like.params), item=checkpoints_lib.EMA_ITEM)
  jax.tree.map(np.testing.assert_array_equal, average, _fixture_values(0.25))
  checkpoints.close()


def test_meta_holds_the_step_alone(tmp_path):
  _save(tmp_path, [4], asynchronous=False)
  assert json.loads((tmp_path / 'checkpoints' / '4' / 'meta' / 'metadata').read_text()) == {'step': 4}


def test_keep_latest_and_best(tmp_path):
  checkpoints = Checkpoints(tmp_path, keep=2, best_metric='accuracy')
  for step, accuracy in [(1, 0.5), (2, 0.9), (3, 0.6), (4, 0.7)]:
    checkpoints.save(step, _state(step), metrics={'accuracy': accuracy})
  checkpoints.close()
  checkpoints = Checkpoints(tmp_path, keep=2, best_metric='accuracy', read_only=True)
  assert checkpoints.all_steps() == [2, 3, 4]
  assert checkpoints.resolve('best') == 2 and checkpoints.resolve('latest') == 4
  checkpoints.close()


def test_best_by_a_metric_to_minimise_and_ties_go_to_the_later_step(tmp_path):
  checkpoints = Checkpoints(tmp_path / 'min', keep=2, best_metric='loss', best_mode='min')
  for step, loss in [(1, 0.5), (2, 0.1), (3, 0.6), (4, 0.7)]:
    checkpoints.save(step, _state(step), metrics={'loss': loss})
  checkpoints.close()
  checkpoints = Checkpoints(tmp_path / 'min', keep=2, best_metric='loss', best_mode='min', read_only=True)
  assert checkpoints.all_steps() == [2, 3, 4] and checkpoints.resolve('best') == 2
  checkpoints.close()
  checkpoints = Checkpoints(tmp_path / 'tie', keep=4, best_metric='accuracy')
  for step, accuracy in [(1, 0.5), (2, 0.9), (3, 0.9), (4, 0.6)]:
    checkpoints.save(step, _state(step), metrics={'accuracy': accuracy})
  checkpoints.close()
  checkpoints = Checkpoints(tmp_path / 'tie', keep=4, best_metric='accuracy', read_only=True)
  assert checkpoints.resolve('best') == 3
  checkpoints.close()


def _no_space(*args, **kwargs):
  del args, kwargs
  raise OSError(errno.ENOSPC, 'No space left on device')


def test_disk_full_in_the_background_is_one_line_naming_the_intact_steps(tmp_path, monkeypatch):
  checkpoints = Checkpoints(tmp_path)
  checkpoints.save(1, _state(1))
  checkpoints.wait()
  monkeypatch.setattr('trainer.io.integrity.write_record', _no_space)  # the last file of a save
  checkpoints.save(2, _state(2))
  message = (
    f'no space left while saving checkpoint 2 in {tmp_path}/checkpoints; checkpoints up to 1 are intact'
  )
  with pytest.raises(CheckpointError) as error:
    checkpoints.wait()
  assert str(error.value) == message
  monkeypatch.undo()
  checkpoints.close()
  assert Checkpoints(tmp_path, read_only=True).latest_step() == 1


def test_disk_full_when_a_save_starts_is_one_line(tmp_path, monkeypatch):
  checkpoints = Checkpoints(tmp_path)
  checkpoints.save(1, _state(1))
  checkpoints.wait()

  def failing_save(*args, **kwargs):
    try:
      _no_space()
    except OSError as error:
      raise ValueError('tensorstore: write failed') from error

  monkeypatch.setattr(ocp.CheckpointManager, 'save', failing_save)
  with pytest.raises(
    CheckpointError, match=r'^no space left while saving checkpoint 2 in .*; checkpoints up to 1 '
  ):
    checkpoints.save(2, _state(2))
  monkeypatch.undo()
  checkpoints.close()


@pytest.fixture
def small_disk(tmp_path):
  mount_point = tmp_path / 'small_disk'
  mount_point.mkdir()
  if subprocess.run(
    ['mount', '-t', 'tmpfs', '-o', 'size=1200k', 'tmpfs', str(mount_point)], capture_output=True, check=False
  ).returncode:
    pytest.skip('cannot mount a small tmpfs here')
  yield mount_point
  subprocess.run(['umount', '-l', str(mount_point)], check=False)


@pytest.mark.slow
def test_a_really_full_disk(small_disk):
  checkpoints = Checkpoints(small_disk, keep=100)
  with pytest.raises(CheckpointError) as error:
    for step in range(1, 20):
      checkpoints.save(step, _state(step, size=128))  # 64 kB of parameters, 128 kB of optimizer state
      checkpoints.wait()
  failed = step  # pylint: disable=undefined-loop-variable
  checkpoints.close()
  assert failed > 1
  assert str(error.value) == (
    f'no space left while saving checkpoint {failed} in {small_disk}/checkpoints; '
    f'checkpoints up to {failed - 1} are intact'
  )
  reader = Checkpoints(small_disk, read_only=True)
  assert reader.latest_step() == failed - 1
  jax.tree.map(
    np.testing.assert_array_equal,
    reader.restore_params(failed - 1, _abstract(_state(0, 128).params)),
    _state(failed - 1, 128).params,
  )
  reader.close()


@pytest.mark.slow
def test_train_py_on_a_full_disk_says_so_in_one_line(small_disk):
  args = [
    f'--workdir={small_disk}/run',
    '--config=configs/vit_digits.py',
    '--config.total_steps=20',
    '--config.checkpoint_every_steps=2',
    '--config.eval_every_steps=10',
    '--config.keep_checkpoints=10',
  ]
  done = subprocess.run(
    [sys.executable, 'train.py', *args],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS='cpu'),
    capture_output=True,
    text=True,
    check=False,
  )
  assert done.returncode == 2, done.stderr[-3000:]
  ours = [line for line in done.stderr.splitlines() if 'oneDNN' not in line and 'InitializeLog' not in line]
  assert len(ours) == 1, done.stderr[-3000:]
  assert re.fullmatch(
    rf'error: no space left while saving checkpoint \d+ in {small_disk}/run/checkpoints; '
    r'(checkpoints up to \d+ are intact|no earlier checkpoint is intact)',
    ours[0],
  ), ours


# Through training and evaluation --------------------------------------------------


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('trained')
  train_and_evaluate(tiny_vit_config(total_steps=4, eval_every_steps=2, checkpoint_every_steps=2), workdir)
  return workdir


@pytest.mark.slow  # runs the trainer
def test_evaluation_restores_the_parameters_alone_and_averages_them(trained, monkeypatch):
  restored_items = []
  original = ocp.CheckpointManager.restore

  def recording_restore(self, step, *args, **kwargs):
    restored_items.append(
      sorted(kwargs['args'].keys())
      if isinstance(kwargs.get('args'), ocp.args.Composite)
      else type(kwargs.get('args')).__name__
    )
    return original(self, step, *args, **kwargs)

  monkeypatch.setattr(ocp.CheckpointManager, 'restore', recording_restore)
  _, _, params, step = restore_checkpoint(trained, 'latest', average_last=2)
  assert step == 4 and restored_items == [['params'], ['params']]  # no optimizer state read
  _, _, at_2, _ = restore_checkpoint(trained, 2)
  _, _, at_4, _ = restore_checkpoint(trained, 4)
  assert not np.allclose(jax.tree.leaves(at_2)[0], jax.tree.leaves(at_4)[0])
  for mean, a, b in zip(jax.tree.leaves(params), jax.tree.leaves(at_2), jax.tree.leaves(at_4)):
    np.testing.assert_allclose(mean, (np.asarray(a) + np.asarray(b)) / 2, rtol=1e-6, atol=1e-7)


@pytest.mark.slow  # runs the trainer
def test_damaged_latest_is_skipped_by_evaluation_and_by_the_rerun(trained, tmp_path, caplog):
  workdir = tmp_path / 'run'
  shutil.copytree(trained, workdir)
  _flip(workdir / 'checkpoints' / '4')
  with caplog.at_level(logging.WARNING):
    _, _, _, step = restore_checkpoint(workdir, 'latest')
  assert step == 2 and len(_warnings(caplog)) == 1
  with pytest.raises(CheckpointError, match='Checkpoint 4 in .* is damaged'):
    restore_checkpoint(workdir, '4')
  result = train_and_evaluate(
    tiny_vit_config(total_steps=4, eval_every_steps=2, checkpoint_every_steps=2), workdir
  )
  assert result.step == 4 and not result.interrupted
  assert (workdir / 'damaged_checkpoints' / '4').is_dir()
  assert Checkpoints(workdir, read_only=True).latest_step() == 4
  assert json.loads((workdir / 'checkpoints' / '4' / 'meta' / 'metadata').read_text())['step'] == 4


@pytest.mark.slow
def test_evaluate_cli_names_a_damaged_checkpoint_in_one_line(trained, tmp_path):
  workdir = tmp_path / 'run'
  shutil.copytree(trained, workdir)
  _garbage(workdir / 'checkpoints' / '4')
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  done = subprocess.run(
    [sys.executable, 'evaluate.py', f'--workdir={workdir}', '--checkpoint=4'],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    check=False,
  )
  assert done.returncode == 2, done.stderr
  lines = done.stderr.strip().splitlines()
  assert lines[-1].startswith(f'error: Checkpoint 4 in {workdir}/checkpoints is damaged'), done.stderr
  assert 'Traceback' not in done.stderr
