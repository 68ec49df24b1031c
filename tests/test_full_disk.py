"""A full disk at any write of a training run ends in one line saying what is intact.

Each write is made to fail with ``ENOSPC`` (``tests/full_disk_driver.py``): orbax's JSON item of a
checkpoint (while the arrays are still being written: orbax's threads logged tracebacks at exit),
``metrics.jsonl`` and the TensorBoard writer. The line names what
was being written and the latest intact checkpoint, which restores.
"""

import os
import pathlib
import subprocess
import sys

import pytest

from trainer.io.checkpoints import Checkpoints

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXPECTED = {
  'meta': r'no space left while saving checkpoint 2 in {workdir}/checkpoints; no earlier checkpoint is intact',
  'metrics': r'no space left while writing {workdir}/metrics.jsonl; checkpoints up to 2 are intact',
  'tensorboard': (
    r'no space left while writing the TensorBoard events in {workdir}/tensorboard/train; '
    r'checkpoints up to 2 are intact'
  ),
}


@pytest.mark.slow
@pytest.mark.parametrize('kind', EXPECTED)
def test_a_full_disk_at_any_write_is_one_line_naming_the_intact_checkpoints(kind, tmp_path):
  workdir = tmp_path / 'run'
  done = subprocess.run(
    [sys.executable, '-m', 'tests.full_disk_driver', kind, str(workdir)],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS='cpu'),
    capture_output=True,
    text=True,
    check=False,
    timeout=600,
  )
  ours = [line for line in done.stderr.splitlines() if 'oneDNN' not in line and 'InitializeLog' not in line]
  assert done.returncode == 2, done.stderr[-4000:]
  assert ours == ['error: ' + EXPECTED[kind].format(workdir=workdir)], done.stderr[-4000:]
  checkpoints = Checkpoints(workdir, read_only=True)
  assert checkpoints.latest_step() == (None if kind == 'meta' else 2)
  checkpoints.close()
