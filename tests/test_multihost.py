"""Two local processes with gloo CPU collectives: the multi-host path of the trainer."""

import os
import socket
import subprocess
import sys
import textwrap

import ml_collections
import numpy as np
import pytest

from tests.vit_test_configs import tiny_vit_config
from tests.xla_flags import with_host_devices
from trainer.io.metrics_io import read_metrics
from trainer.loop import train_and_evaluate

pytestmark = pytest.mark.slow  # starts two processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


# few-shot accuracy at the evaluation: each process reads its rows, the solve sees every row
_FEWSHOT = dict(shots=(2,), seeds=2, held_out_per_class=2, train_examples=200)


def _two_processes(body: str, *, timeout: float, devices_each: int = 1) -> list[str]:
  """What ``body`` prints in each of two processes joined by ``jax.distributed`` (gloo collectives,
  ``process_id`` set), each with ``devices_each`` CPU devices; both must exit with status 0."""
  script = textwrap.dedent(f"""
      import sys
      import jax
      jax.config.update('jax_cpu_collectives_implementation', 'gloo')
      process_id = int(sys.argv[1])
      jax.distributed.initialize(coordinator_address='127.0.0.1:{_free_port()}', num_processes=2, process_id=process_id)
  """) + textwrap.dedent(body)
  env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS=with_host_devices(devices_each))
  workers = [
    subprocess.Popen(
      [sys.executable, '-c', script, str(i)],
      cwd=ROOT,
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(2)
  ]
  try:
    outputs = [worker.communicate(timeout=timeout) for worker in workers]
  finally:
    for worker in workers:
      worker.kill()
  for worker, (_, stderr) in zip(workers, outputs):
    assert worker.returncode == 0, stderr[-3000:]
  return [out for out, _ in outputs]


def _losses(workdir):
  return {r['step']: r['loss'] for r in read_metrics(workdir) if r['split'] == 'train' and 'loss' in r}


@pytest.mark.parametrize(
  'fsdp, model',
  [(1, 1), (2, 2)],  # the second also covers fsdp alone across processes
  ids=['replicated', 'fsdp_across_and_model_within_processes'],
)
def test_two_processes_train_like_one(tmp_path, fsdp, model):
  # the model axis stays within a process: each gets that many devices
  body = f"""
      assert jax.process_count() == 2 and jax.device_count() == {2 * model}
      import ml_collections
      from tests.vit_test_configs import tiny_vit_config
      from trainer.loop import train_and_evaluate
      config = tiny_vit_config(total_steps=4, eval_every_steps=4)
      config.mesh.fsdp, config.mesh.model = {fsdp}, {model}
      config.fewshot = ml_collections.ConfigDict({_FEWSHOT!r})
      result = train_and_evaluate(config, {str(tmp_path / 'two')!r})
      print('fewshot', result.eval_metrics['fewshot_2shot'])
      print('accuracy', result.eval_metrics['accuracy'])
  """
  outputs = _two_processes(body, timeout=300, devices_each=model)
  accuracies = [float(out.split('accuracy')[-1]) for out in outputs]
  fewshot = [float(out.split('fewshot')[-1].split()[0]) for out in outputs]
  assert accuracies[0] == accuracies[1] and fewshot[0] == fewshot[1]

  config = tiny_vit_config(total_steps=4, eval_every_steps=4)
  config.fewshot = ml_collections.ConfigDict(_FEWSHOT)
  single = train_and_evaluate(config, tmp_path / 'one')
  two, one = _losses(tmp_path / 'two'), _losses(tmp_path / 'one')
  assert sorted(two) == [1, 2, 3, 4]
  np.testing.assert_allclose([two[s] for s in sorted(one)], [one[s] for s in sorted(one)], rtol=2e-5)
  assert abs(single.eval_metrics['accuracy'] - accuracies[0]) < 1e-6
  assert single.eval_metrics['fewshot_2shot'] == fewshot[0]


def test_a_stop_signal_on_one_process_stops_both_at_the_same_step(tmp_path):
  workdir = tmp_path / 'two'
  body = f"""
      import signal
      from tests.vit_test_configs import tiny_vit_config
      from trainer.loop import train_and_evaluate
      from vit.input_pipeline import ImageData
      original = ImageData.train_batches

      def batches(self, **kwargs):
        for index, batch in enumerate(original(self, **kwargs)):
          if process_id == 1 and index == 4:
            signal.raise_signal(signal.SIGTERM)
          yield batch

      ImageData.train_batches = batches
      config = tiny_vit_config(total_steps=8, eval_every_steps=100, checkpoint_every_steps=100)
      result = train_and_evaluate(config, {str(workdir)!r})
      print('stopped', result.interrupted, result.step)
  """
  results = [out.split('stopped')[-1].split() for out in _two_processes(body, timeout=240)]
  assert results[0] == results[1] and results[0][0] == 'True' and 0 < int(results[0][1]) < 8
  saved = sorted(p.name for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit())
  assert saved == [results[0][1]]


def test_a_locked_workdir_stops_every_process(tmp_path):
  from trainer.io.workdir_lock import WorkdirLock  # pylint: disable=g-import-not-at-top

  workdir = tmp_path / 'locked'
  workdir.mkdir()
  lock = WorkdirLock(workdir)
  lock.acquire()
  body = f"""
      from tests.vit_test_configs import tiny_vit_config
      from trainer.errors import WorkdirError
      from trainer.loop import train_and_evaluate
      try:
        train_and_evaluate(tiny_vit_config(), {str(workdir)!r})
      except WorkdirError as error:
        print('refused:', error)
  """
  try:
    outputs = _two_processes(body, timeout=120)
  finally:
    lock.release()
  assert all(f'refused: {workdir}' in out for out in outputs), outputs
  assert f'pid {os.getpid()}' in outputs[0]
  assert not (workdir / 'config.json').exists()
