"""Devices: the mesh, the shardings, and global batches built from each process's slice.

The batch is split over the ``data`` mesh axis; parameters and optimizer state are
replicated. Every process feeds only its own rows; ``jax.make_array_from_process_local_data``
assembles the global array, so one code path serves one CPU, one GPU and a pod.
"""

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainer.errors import ConfigError


def make_mesh() -> Mesh:
  return Mesh(np.asarray(jax.devices()), ('data',))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec('data'))


def check_batch_size(global_batch_size: int, mesh: Mesh, what: str = 'batch_size') -> None:
  devices = mesh.devices.size
  if global_batch_size % devices:
    raise ConfigError(f'{what} ({global_batch_size}) must be divisible by the number of devices ({devices}).')
  if global_batch_size % jax.process_count():
    raise ConfigError(
      f'{what} ({global_batch_size}) must be divisible by the number of processes ({jax.process_count()}).'
    )


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """This process's rows -> one global array per key, split over the ``data`` axis."""
  sharding = batch_sharding(mesh)
  return {
    name: jax.make_array_from_process_local_data(sharding, value) for name, value in local_batch.items()
  }


def process_rows(batch_size: int, process_index: int, process_count: int) -> slice:
  """The rows of a global batch of ``batch_size`` that process ``process_index`` feeds."""
  if process_count < 1 or not 0 <= process_index < process_count:
    raise ValueError(f'bad process_index {process_index} of process_count {process_count}')
  if batch_size < 1 or batch_size % process_count:
    raise ValueError(f'batch_size {batch_size} must be a positive multiple of process_count {process_count}')
  per_process = batch_size // process_count
  return slice(process_index * per_process, (process_index + 1) * per_process)
