"""One process with 8 host devices, shared by the tests that need them.

XLA fixes the number of host devices when it starts, so a test process (one device) cannot run
them itself. The ``eight_devices`` fixture (``tests/conftest.py``) starts ``python -m
tests.eight_devices`` once per test process and sends it, one at a time, a function of a test
module (its 8-device half) with JSON arguments; the worker answers with the function's JSON result
or its traceback, which the asking test raises as its own failure. The functions run one after
another in the same process, so each restores whatever it patches.
"""

import importlib
import json
import os
import pathlib
import select
import subprocess
import sys
import traceback

from tests.xla_flags import with_host_devices

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEVICES = 8
# The longest one function may take on a loaded 2-core CPU before the worker is given up for hung.
TIMEOUT_S = 900


def _name(function) -> str:
  return f'{function.__module__}:{function.__qualname__}'


def _run(request: dict) -> dict:
  module, _, name = request['function'].partition(':')
  try:
    result = getattr(importlib.import_module(module), name)(**request['arguments'])
    return {'result': result}
  except BaseException:  # noqa: B036 -- an assertion, a config error or an exit: all go back to the test
    return {'error': traceback.format_exc()}


def main():
  replies = os.fdopen(os.dup(1), 'w')
  os.dup2(2, 1)  # what libraries print goes to the log, not into the replies
  import jax

  from trainer.command_line import log_filters

  log_filters.install()  # as in the test process (tests/conftest.py)
  jax.config.update('jax_disable_most_optimizations', True)

  assert jax.device_count() == DEVICES, jax.devices()
  for line in sys.stdin:
    replies.write(json.dumps(_run(json.loads(line))) + '\n')
    replies.flush()


class EightDevices:
  """Runs functions in the shared 8-device worker; started on the first call, again if it died."""

  def __init__(self, log_path: pathlib.Path):
    self._log_path = log_path
    self._process = None

  def _start(self):
    env = dict(os.environ, XLA_FLAGS=with_host_devices(DEVICES), JAX_PLATFORMS='cpu')
    with open(self._log_path, 'a') as log:
      self._process = subprocess.Popen(
        [sys.executable, '-m', 'tests.eight_devices'],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
      )

  def _log_tail(self) -> str:
    return self._log_path.read_text()[-4000:]

  def __call__(self, function, **arguments):
    """``function(**arguments)`` on 8 devices; its result, or an AssertionError with its traceback."""
    __tracebackhide__ = True  # a failure shows the test's line and the worker's traceback
    if self._process is None or self._process.poll() is not None:
      self._start()
    name = _name(function)
    self._process.stdin.write(json.dumps({'function': name, 'arguments': arguments}) + '\n')
    self._process.stdin.flush()
    ready, _, _ = select.select([self._process.stdout], [], [], TIMEOUT_S)
    reply = self._process.stdout.readline() if ready else ''
    if not reply:
      self.close()
      raise AssertionError(
        f'{name} on {DEVICES} devices: the worker died or hung; its log:\n{self._log_tail()}'
      )
    answer = json.loads(reply)
    if 'error' in answer:
      raise AssertionError(f'{name} on {DEVICES} devices failed:\n{answer["error"]}')
    return answer['result']

  def close(self):
    if self._process is None:
      return
    self._process.stdin.close()  # the worker's loop ends
    try:
      self._process.wait(timeout=30)
    except subprocess.TimeoutExpired:
      self._process.kill()
      self._process.wait()
    self._process = None


if __name__ == '__main__':
  main()
