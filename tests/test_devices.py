"""trainer.devices: a task's rows spread over the trainer's devices and gathered back in order."""

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # starts a 4-device subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent

_SCRIPT = """
import numpy as np
from trainer.devices import Devices
from trainer.partitioning import make_mesh

devices = Devices(make_mesh())
local = {'src': np.arange(16, dtype=np.int32).reshape(8, 2), 'index': np.arange(8, dtype=np.int32)}
batch = devices.shard(local)
assert len(batch['src'].sharding.device_set) == 4, batch['src'].sharding
src, index = devices.gather((batch['src'] * 2, batch['index']))
assert isinstance(src, np.ndarray) and (src == 2 * local['src']).all() and (index == local['index']).all()
assert (devices.process_index, devices.process_count, devices.is_main_process) == (0, 1, True)
print('ok')
"""


def test_rows_are_sharded_over_the_devices_and_gathered_in_order():
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=4', JAX_PLATFORMS='cpu')
  result = subprocess.run(
    [sys.executable, '-c', _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
  )
  assert result.returncode == 0 and result.stdout.strip() == 'ok', result.stderr[-2000:]
