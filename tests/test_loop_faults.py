"""The training loop when things go wrong: a stop signal mid-evaluation, a locked workdir, an early NaN."""

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest
from flax import nnx

from tests.vit_test_configs import tiny_vit_config
from trainer.errors import TrainingDiverged, WorkdirError
from trainer.evaluation import restore_checkpoint
from trainer.io.metrics_io import read_metrics
from trainer.io.workdir_lock import LOCK_FILE
from trainer.loop import train_and_evaluate
from vit.input_pipeline import ImageData
from vit.task import ImageClassification

pytestmark = pytest.mark.slow  # every test runs the trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _params(workdir):
  _, _, params, step = restore_checkpoint(workdir, 'latest')
  return step, jax.tree.map(np.asarray, nnx.to_pure_dict(params))


def _train_losses(workdir):
  return {r['step']: r['loss'] for r in read_metrics(workdir) if r['split'] == 'train' and 'loss' in r}


@pytest.fixture(scope='module')
def reference_dir(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('reference')
  assert train_and_evaluate(tiny_vit_config(), workdir).step == 8
  return workdir


def _resume_and_compare(workdir, reference_dir):
  second = train_and_evaluate(tiny_vit_config(), workdir)
  assert second.step == 8 and not second.interrupted
  step, resumed = _params(workdir)
  _, expected = _params(reference_dir)
  assert step == 8
  jax.tree.map(np.testing.assert_array_equal, resumed, expected)
  assert _train_losses(workdir) == _train_losses(reference_dir)


def test_stop_during_evaluation_on_a_checkpoint_step_saves_once_and_resumes(
  reference_dir, tmp_path, monkeypatch, capsys
):
  original = ImageData.eval_batches
  calls = []

  def interrupting_eval_batches(self, split, **kwargs):
    calls.append(split)
    if len(calls) == 1:  # the evaluation at step 4, also a checkpoint step
      signal.raise_signal(signal.SIGTERM)
    yield from original(self, split, **kwargs)

  monkeypatch.setattr(ImageData, 'eval_batches', interrupting_eval_batches)
  first = train_and_evaluate(tiny_vit_config(), tmp_path)
  assert first.interrupted and first.step == 4
  assert 'SIGTERM received: saved a checkpoint at step 4' in capsys.readouterr().out
  _resume_and_compare(tmp_path, reference_dir)


def test_stop_on_a_checkpoint_step_saves_once_and_resumes(reference_dir, tmp_path, monkeypatch):
  original = ImageData.train_batches

  def interrupting_batches(self, **kwargs):
    for index, batch in enumerate(original(self, **kwargs)):
      if kwargs['start_step'] == 0 and index == 1:  # during step 2, a checkpoint step without evaluation
        signal.raise_signal(signal.SIGTERM)
      yield batch

  monkeypatch.setattr(ImageData, 'train_batches', interrupting_batches)
  first = train_and_evaluate(tiny_vit_config(), tmp_path)
  assert first.interrupted and first.step == 2
  _resume_and_compare(tmp_path, reference_dir)


def _hold_lock(workdir):
  script = textwrap.dedent(f"""
      import sys, time
      from trainer.io.workdir_lock import WorkdirLock
      lock = WorkdirLock({str(workdir)!r})
      lock.acquire()
      print('locked', flush=True)
      time.sleep(300)
  """)
  holder = subprocess.Popen([sys.executable, '-c', script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
  assert holder.stdout.readline().strip() == 'locked'
  return holder


def test_a_second_process_is_refused_and_a_dead_holder_is_taken_over(tmp_path, caplog):
  workdir = tmp_path / 'workdir'
  workdir.mkdir()
  holder = _hold_lock(workdir)
  try:
    started = time.perf_counter()
    with pytest.raises(WorkdirError, match=f'{workdir} is being trained by pid {holder.pid} on host'):
      train_and_evaluate(tiny_vit_config(total_steps=2, eval_every_steps=2), workdir)
    assert time.perf_counter() - started < 60
    assert not (workdir / 'config.json').exists() and not (workdir / 'checkpoints').exists()
  finally:
    holder.kill()
    holder.wait()
  assert str(holder.pid) in (workdir / LOCK_FILE).read_text()  # killed: its name stays, the OS lock does not
  with caplog.at_level(logging.WARNING):
    result = train_and_evaluate(tiny_vit_config(total_steps=2, eval_every_steps=2), workdir)
  assert result.step == 2 and not result.interrupted
  assert any(
    f'pid {holder.pid}' in r.getMessage() and 'no longer running' in r.getMessage() for r in caplog.records
  )
  assert (workdir / LOCK_FILE).read_text() == ''  # released on a clean exit


def test_nan_before_the_first_checkpoint_says_there_is_none(tmp_path):
  config = tiny_vit_config(checkpoint_every_steps=100, eval_every_steps=100, total_steps=20)
  config.optimizer.update(learning_rate=1e30, grad_clip_norm=0.0, warmup_steps=3, schedule='constant')
  with pytest.raises(TrainingDiverged, match='No checkpoint has been saved yet') as raised:
    train_and_evaluate(config, tmp_path)
  assert 'None' not in str(raised.value)


def test_an_update_that_overflows_with_a_finite_loss_is_never_saved(tmp_path):
  """Weight decay 1e38 at learning rate 1e3: step 2's update is infinite, its loss and gradient finite."""
  config = tiny_vit_config(checkpoint_every_steps=1, eval_every_steps=100, log_every_steps=100, total_steps=6)
  config.optimizer.update(
    name='sgd', learning_rate=1e3, weight_decay=1e38, momentum=0.0, grad_clip_norm=0.0, warmup_steps=1
  )
  config.optimizer.schedule = 'constant'  # warmup: learning rate 0 at the first step, 1e3 after
  with pytest.raises(TrainingDiverged, match='became non-finite by step 2; stopped') as raised:
    train_and_evaluate(config, tmp_path)
  assert 'The last good checkpoint (step 1) is kept' in str(raised.value)
  _, _, params, step = restore_checkpoint(tmp_path, 'latest')
  assert step == 1 and all(np.all(np.isfinite(p)) for p in jax.tree.leaves(params))


def test_a_gradient_whose_norm_overflows_stops_the_run_though_the_loss_is_finite(tmp_path, monkeypatch):
  """A head kernel of 1e25: finite logits and loss, a gradient norm beyond float32."""

  def huge_head(self, model):
    kernel = model.head.kernel.value
    model.head.kernel.value = 1e25 * jax.random.normal(jax.random.key(0), kernel.shape, kernel.dtype)

  monkeypatch.setattr(ImageClassification, 'load_initial', huge_head)
  config = tiny_vit_config(checkpoint_every_steps=1, eval_every_steps=100, log_every_steps=1, total_steps=3)
  with pytest.raises(
    TrainingDiverged, match='The gradient norm became inf by step 1; stopped. No checkpoint'
  ):
    train_and_evaluate(config, tmp_path)
  losses = [r['loss'] for r in read_metrics(tmp_path) if r['split'] == 'train']
  assert losses == []  # stopped before writing the step's metrics
