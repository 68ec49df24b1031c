"""Ctrl-C while a command starts (building the model, compiling) is one line and status 130."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each test starts train.py or predict.py

REPO = pathlib.Path(__file__).resolve().parent.parent

# Runs a command line with SIGINT sent to itself at a chosen moment of its start-up, once the
# command's own work has begun (``ARM``): the first call of ``TARGET`` after it. Signal handlers
# run between two bytecodes, so the handler runs inside that call.
WRAPPER = """
import os, runpy, signal, sys, importlib
arm_module, arm_name, module_name, name, script = sys.argv[1:6]
armed = []
arm_at = importlib.import_module(arm_module)
module = importlib.import_module(module_name)
arm_original, original = getattr(arm_at, arm_name), getattr(module, name)

def arming(*args, **kwargs):
  armed.append(True)
  return arm_original(*args, **kwargs)

def interrupting(*args, **kwargs):
  if armed:
    setattr(module, name, original)
    os.kill(os.getpid(), signal.SIGINT)
  return original(*args, **kwargs)

setattr(arm_at, arm_name, arming)
setattr(module, name, interrupting)
sys.argv = [script, *sys.argv[6:]]
runpy.run_path(script, run_name='__main__')
"""

TRAIN = ('trainer.loop', 'train_and_evaluate')
INSIDE = {
  'model creation': ('vit.task', 'make_vit'),
  'compilation': ('jax._src.compiler', 'compile_or_get_cached'),  # each jit's XLA compilation
}


def run_interrupted(arm, target, command, tmp_path):
  environment = dict(os.environ, GLIBC_TUNABLES='glibc.malloc.hugetlb=0')  # no re-execution
  return subprocess.run(
    [sys.executable, '-c', WRAPPER, *arm, *target, *command],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
    env=environment,
  )


@pytest.mark.parametrize('moment', sorted(INSIDE))
def test_ctrl_c_while_training_starts_is_one_line(moment, tmp_path):
  workdir = tmp_path / 'run'
  command = ['train.py', '--config=configs/vit_digits.py', f'--workdir={workdir}']
  result = run_interrupted(TRAIN, INSIDE[moment], command, tmp_path)
  assert result.returncode == 130, result.stderr
  assert result.stderr.splitlines() == ['interrupted while starting; no checkpoint was written or changed']
  assert not (workdir / 'checkpoints').exists() or not any((workdir / 'checkpoints').iterdir())
  for path in workdir.glob('*.json') if workdir.exists() else ():
    json.loads(path.read_text())  # whatever was written is whole


@pytest.mark.parametrize('moment', sorted(INSIDE))
def test_ctrl_c_while_predict_loads_the_model_is_one_line(moment, tmp_path):
  target = ('vit.weights.predictor', 'make_vit') if moment == 'model creation' else INSIDE[moment]
  import numpy as np  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top

  from tests.test_vit_weights import timm_arrays, write_timm_folder  # pylint: disable=g-import-not-at-top

  folder = write_timm_folder(tmp_path / 'w', timm_arrays(np.random.default_rng(0)), 'vit_base_patch16_224')
  Image.new('RGB', (16, 16)).save(tmp_path / 'image.png')
  features = tmp_path / 'features.npy'
  command = ['predict.py', f'--weights={folder}', f'--features={features}', str(tmp_path / 'image.png')]
  result = run_interrupted(('vit.weights.predictor', 'load_predictor'), target, command, tmp_path)
  assert result.returncode == 130, result.stderr
  assert result.stderr.splitlines() == ['interrupted while loading the model; nothing was written']
  assert not features.exists()
