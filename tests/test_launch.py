"""The launch recipes in ``launch/`` start ``train.py --distributed`` as documented.

``srun`` and ``gcloud`` are replaced by scripts that print their arguments, so these check the
command each recipe builds (the multi-process path itself is ``tests/test_multihost.py``).
"""

import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.slow  # each test starts the recipe's bash script

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _fake(tmp_path, name: str) -> dict[str, str]:
  """A PATH where ``name`` prints each of its arguments on a line of its own."""
  folder = tmp_path / 'bin'
  folder.mkdir(exist_ok=True)
  fake = folder / name
  fake.write_text('#!/bin/sh\nfor argument in "$@"; do echo "$argument"; done\n')
  fake.chmod(0o755)
  return {'PATH': f'{folder}:/usr/bin:/bin', 'HOME': str(tmp_path)}


def _run(arguments, env):
  return subprocess.run(arguments, cwd=ROOT, env=env, capture_output=True, text=True)


def test_the_slurm_recipe_starts_one_distributed_training_process_per_task(tmp_path):
  env = dict(_fake(tmp_path, 'srun'), VENV='/opt/venv')
  done = _run(
    ['bash', 'launch/slurm_gpu.sbatch', 'configs/vit_digits.py', '/shared/run one', '--config.mesh.fsdp=2'],
    env,
  )
  assert done.returncode == 0, done.stderr
  assert done.stdout.splitlines() == [
    '--kill-on-bad-exit=1',
    '/opt/venv/bin/python',
    'train.py',
    '--distributed',
    '--config',
    'configs/vit_digits.py',
    '--workdir',
    '/shared/run one',
    '--config.mesh.fsdp=2',
  ]
  assert '#SBATCH --ntasks-per-node=8' in (ROOT / 'launch/slurm_gpu.sbatch').read_text()
  usage = _run(['bash', 'launch/slurm_gpu.sbatch', 'configs/vit_digits.py'], env)
  assert usage.returncode == 2 and usage.stderr.startswith('usage:')


def test_the_tpu_recipe_runs_the_same_command_on_every_worker(tmp_path):
  env = _fake(tmp_path, 'gcloud')
  arguments = [
    'my-tpu',
    'us-east5-a',
    'configs/vit_b16_imagenet.py',
    '/mnt/runs/b16',
    '--config.mesh.fsdp=16',
  ]
  done = _run(['bash', 'launch/tpu_pod.sh', *arguments], env)
  assert done.returncode == 0, done.stderr
  lines = done.stdout.splitlines()
  assert lines[:6] == ['compute', 'tpus', 'tpu-vm', 'ssh', 'my-tpu', '--zone=us-east5-a']
  assert '--worker=all' in lines
  command = ' '.join(next(line for line in lines if line.startswith('--command=')).split())
  assert command == (
    '--command=cd ~/attention && .venv/bin/python train.py --distributed '
    '--config configs/vit_b16_imagenet.py --workdir /mnt/runs/b16 --config.mesh.fsdp=16'
  )
