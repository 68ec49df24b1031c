"""The command lines keep library start-up chatter off the terminal, and Ctrl-C while they load is one line."""

import pathlib
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow  # each test starts train.py

REPO = pathlib.Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, 'train.py', '--config=configs/vit_digits.py']


def test_an_error_found_after_the_libraries_load_is_the_only_line_on_stderr(tmp_path):
  """The split is checked against the data, after JAX and TensorFlow (and their C++ notices) loaded."""
  result = subprocess.run(
    [*COMMAND, '--config.eval_split=nosuch', f'--workdir={tmp_path / "run"}'],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: config.eval_split is 'nosuch'"), result.stderr
  assert not (tmp_path / 'run').exists()


def _loaded(pid: int, library: str) -> bool:
  try:
    return library in pathlib.Path(f'/proc/{pid}/maps').read_text()
  except OSError:
    return False


@pytest.mark.skipif(not pathlib.Path('/proc/self/maps').exists(), reason='needs /proc to see the imports')
def test_ctrl_c_while_the_libraries_load_is_one_line_and_writes_nothing(tmp_path):
  process = subprocess.Popen(
    [*COMMAND, f'--workdir={tmp_path / "run"}'],
    cwd=REPO,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    restore_signals=True,
  )
  deadline = time.monotonic() + 120
  while not _loaded(process.pid, 'jaxlib') and time.monotonic() < deadline:  # JAX is being imported
    time.sleep(0.01)
  process.send_signal(signal.SIGINT)
  _, stderr = process.communicate(timeout=300)
  assert process.returncode == 130, stderr
  assert stderr.splitlines() == ['interrupted while loading the libraries; nothing was written'], stderr
  assert not (tmp_path / 'run').exists()
