"""trainer.partitioning.Devices: a task's rows spread over the trainer's devices and gathered back in order."""

import numpy as np
import pytest

from trainer.partitioning import Devices, make_mesh

pytestmark = pytest.mark.slow  # runs on 8 host devices


def shard_and_gather():
  """On 8 devices: 16 rows, 2 a device, sharded and gathered back."""
  devices = Devices(make_mesh())
  local = {'src': np.arange(32, dtype=np.int32).reshape(16, 2), 'index': np.arange(16, dtype=np.int32)}
  batch = devices.shard(local)
  assert len(batch['src'].sharding.device_set) == 8, batch['src'].sharding
  src, index = devices.gather((batch['src'] * 2, batch['index']))
  assert isinstance(src, np.ndarray) and (src == 2 * local['src']).all() and (index == local['index']).all()
  assert (devices.process_index, devices.process_count, devices.is_main_process) == (0, 1, True)


def test_rows_are_sharded_over_the_devices_and_gathered_in_order(eight_devices):
  eight_devices(shard_and_gather)
