"""The positional-embedding sweep that ``benchmarks/gpu_records.sh`` records first, run on a CPU at a tiny size.

The script's own command (``--print``) runs on a few random CIFAR-sized images with tiny overrides,
in a copy of the checkout's layout as ``records.record`` makes one: every arm trains, is evaluated
and lands in the table, and the runs after the first read the decoded images from the cache.
"""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
from PIL import Image

from tests.xla_flags import as_users_run

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / 'benchmarks' / 'gpu_records.sh'
ARMS = ['none', 'learn1d', 'learn2d', 'sincos2d', 'relative']
TINY = (
  '--config.total_steps=2 --config.batch_size=4 --config.eval_batch_size=4 --config.eval_every_steps=2 '
  '--config.checkpoint_every_steps=2 --config.log_every_steps=1 --config.optimizer.warmup_steps=1 '
  '--config.data.num_threads=1 --config.data.prefetch_batches=1 --config.model.depth=1'
)


def _printed(*names):
  result = subprocess.run(
    ['bash', str(SCRIPT), '--print', *names], capture_output=True, text=True, check=False
  )
  assert result.returncode == 0, result.stderr
  return result.stdout.splitlines()


def _cifar_like_folder(root: pathlib.Path):
  """train/ and test/ with two classes of random 32x32 JPEGs, as the shared data's CIFAR-10 copy."""
  rng = np.random.default_rng(0)
  for split, count in (('train', 6), ('test', 4)):
    for index in range(count):
      folder = root / split / ('airplane', 'truck')[index % 2]
      folder.mkdir(parents=True, exist_ok=True)
      Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f'{index:04d}.jpg')


def test_the_script_prints_the_sweep_first_and_the_padded_vit_records():
  order = _printed()
  assert order[0] == (
    'python ablate.py --config configs/vit_cifar10_posemb.py --workdir runs/posemb_cifar10 '
    '--axis model.posemb=' + ','.join(ARMS)
  )
  pad2, pad64 = _printed('h200_vit_b16_bf16_pad2', 'vit_b16_bf16_pad64')
  assert pad2.endswith('--dtype bfloat16 --attention_pad_multiple 2')
  assert pad64.endswith('--dtype bfloat16 --attention_pad_multiple 64')
  (dump,) = _printed('xla_dump')
  assert '--xla_dump_to=runs/gpu_profile/xla' in dump and '--profile_dir runs/gpu_profile/trace' in dump


def test_the_sweep_without_cifar10_says_where_to_get_it(tmp_path):
  if (ROOT / 'data' / 'cifar10' / 'train').is_dir():
    pytest.skip('this checkout has data/cifar10')
  (tmp_path / 'nvidia-smi').write_text('#!/bin/sh\necho "NVIDIA H200"\n')  # a GPU, for the script
  (tmp_path / 'nvidia-smi').chmod(0o755)
  env = dict(
    os.environ, PATH=f'{tmp_path}:{os.environ["PATH"]}', CIFAR10_ARCHIVE=str(tmp_path / 'none.tar.gz')
  )
  result = subprocess.run(
    ['bash', str(SCRIPT), 'posemb_cifar10'], capture_output=True, text=True, check=False, env=env
  )
  assert result.returncode == 2 and result.stdout == ''  # nothing ran
  assert result.stderr.strip() == (
    'posemb_cifar10 needs CIFAR-10 in data/cifar10 (python -m pipelines.download cifar10), '
    'or CIFAR10_ARCHIVE=PATH/cifar10-jpg.tar.gz'
  )


@pytest.mark.slow  # trains the five arms
def test_the_recorded_sweep_command_runs_every_arm_at_a_tiny_size(tmp_path):
  checkout = tmp_path / 'checkout'  # the checkout's layout, with its own data/ and an empty runs/
  checkout.mkdir()
  for entry in ROOT.iterdir():
    if entry.name not in ('runs', 'data'):
      (checkout / entry.name).symlink_to(entry)
  _cifar_like_folder(checkout / 'data' / 'cifar10')
  (command,) = _printed('posemb_cifar10')
  result = subprocess.run(
    f'{command} {TINY}',
    shell=True,
    cwd=checkout,
    env=as_users_run(os.environ),
    capture_output=True,
    text=True,
    timeout=900,
    check=False,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  results = json.loads((checkout / 'runs' / 'posemb_cifar10' / 'results.json').read_text())
  assert results['axes'] == {'model.posemb': ARMS} and results['seeds'] == [0]
  assert [run['overrides']['model.posemb'] for run in results['runs']] == ARMS
  for run in results['runs']:
    assert run['metrics']['step'] == 2 and 0 <= run['metrics']['accuracy'] <= 1
  assert list((checkout / 'runs' / 'cifar10_cache').iterdir())  # the decoded images, cached for the next arms
  table = (checkout / 'runs' / 'posemb_cifar10' / 'results.md').read_text()
  assert all(f'| {arm} |' in table for arm in ARMS)
