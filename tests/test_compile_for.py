"""``benchmarks/compile_for.py``: a train step compiled for a TPU slice on this CPU, with libtpu.

libtpu lives outside the project's environment (``.ci/run`` installs it into ``.libtpu``; or set
``LIBTPU_DIR``); the compiling tests are skipped without it. The report's parts that need no
compiler (the collectives read from HLO text, the answer for a step that does not fit) are
tested without it.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from benchmarks import compile_for

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBTPU = os.environ.get('LIBTPU_DIR') or compile_for.REPOSITORY_LIBTPU
TINY_VIT = [
  '--config=configs/vit_digits.py',
  '--config.data.image_size=(8, 8)',
  '--config.model.width=64',
  '--config.model.depth=1',
  '--config.model.num_heads=2',
  '--config.model.mlp_dim=128',
  '--config.model.patch_size=4',
  '--config.batch_size=32',
  '--num_classes=10',
  '--channels=1',
]

HLO = """
  %all-gather-start.1 = (f32[16,64]{1,0}, f32[64,64]{1,0}) all-gather-start(f32[16,64]{1,0} %p), dimensions={0}
  %all-gather-done.1 = f32[64,64]{1,0} all-gather-done((f32[16,64]{1,0}, f32[64,64]{1,0}) %all-gather-start.1)
  %all-reduce.2 = (f32[10]{0}, bf16[4,4]{1,0}) all-reduce(f32[10]{0} %a, bf16[4,4]{1,0} %b), to_apply=%add
  %reduce-scatter.3 = f32[16,64]{1,0} reduce-scatter(f32[64,64]{1,0} %g), dimensions={0}, to_apply=%add
  %fusion.4 = f32[64,64]{1,0} fusion(f32[64,64]{1,0} %all-gather-done.1), kind=kLoop, calls=%fused
"""


def test_collectives_are_counted_with_their_result_bytes():
  found = compile_for.collectives(HLO)
  assert found['all-gather'] == {'count': 1, 'bytes': 64 * 64 * 4}  # the gathered result, counted at -start
  assert found['all-reduce'] == {'count': 1, 'bytes': 10 * 4 + 16 * 2}
  assert found['reduce-scatter'] == {'count': 1, 'bytes': 16 * 64 * 4}
  assert found['all-to-all'] == found['collective-permute'] == {'count': 0, 'bytes': 0}


def test_a_step_that_does_not_fit_is_one_line_with_what_to_try():
  message = (
    'jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required '
    'for HLO temporaries (32.60G) exceeds available HBM (15.75G).\nmore detail'
  )
  result = {
    'topology': 'v5e:4x4',
    'chips': 16,
    'mesh': {'data': 16, 'fsdp': 1, 'model': 1},
    'batch_size': 256,
    'grad_accum_steps': 1,
    'parameters': 1.8e9,
    'per_chip_bytes': {'parameters': 7 * 2**30, 'optimizer_state': 14 * 2**30, 'batch': 2**20},
    'hbm_bytes': 16 * 2**30,
    'fits': False,
    'error': compile_for._exhausted(message),
  }
  lines = compile_for.report(result)
  assert lines[-1].startswith('does not fit: RESOURCE_EXHAUSTED: Ran out of memory on HBM')
  assert '(32.60G) exceeds available HBM (15.75G).' in lines[-1] and 'more detail' not in lines[-1]
  assert '16.00 GiB' in lines[-1] and '--config.mesh.fsdp=N' in lines[-1] and 'model.remat' in lines[-1]


def _compile(*arguments) -> tuple[int, dict, str]:
  env = dict(os.environ, LIBTPU_DIR=LIBTPU)
  done = subprocess.run(
    [sys.executable, '-m', 'benchmarks.compile_for', *arguments],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
  )
  lines = done.stdout.strip().splitlines()
  assert lines, done.stderr[-4000:]
  return done.returncode, json.loads(lines[-1]), done.stdout


@pytest.mark.slow
@pytest.mark.skipif(
  not os.path.isdir(os.path.join(LIBTPU, 'libtpu')),
  reason=f'libtpu is not installed in {LIBTPU} (.ci/run installs it; or set LIBTPU_DIR)',
)
def test_a_tiny_vit_compiled_for_v5e_2x2_holds_a_quarter_of_its_parameters_per_chip_with_fsdp():
  status, replicated, _ = _compile('--topology=v5e:2x2', *TINY_VIT)
  assert status == 0 and replicated['fits'] and replicated['chips'] == 4
  status, sharded, printed = _compile('--topology=v5e:2x2', *TINY_VIT, '--config.mesh.fsdp=4')
  assert status == 0 and sharded['fits'] and sharded['mesh'] == {'data': 1, 'fsdp': 4, 'model': 1}
  for kind in ('parameters', 'optimizer_state'):
    assert (
      replicated['per_chip_bytes'][kind] / sharded['per_chip_bytes'][kind] > 3
    )  # 4, less what stays whole
  # (the arguments' total also holds the batch and the model's constants, which fsdp does not split)
  assert replicated['flops'] > 0 and sharded['collectives']['all-gather']['count'] > 0
  assert not any(count['count'] for op, count in replicated['collectives'].items() if op != 'all-reduce')
  assert 'v5e:2x2: 4 chips' in printed and 'of 16.00 GiB HBM' in printed


@pytest.mark.slow  # starts the command
def test_without_libtpu_the_command_says_where_to_put_it(tmp_path):
  status = subprocess.run(
    [
      sys.executable,
      '-m',
      'benchmarks.compile_for',
      '--topology=v5e:2x2',
      f'--libtpu_dir={tmp_path}',
      *TINY_VIT,
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
  )
  assert status.returncode == 2
  assert status.stderr.strip() == (
    f'error: --libtpu_dir {tmp_path} holds no libtpu package (pip install --target {tmp_path} "libtpu==0.0.42.*").'
  )
