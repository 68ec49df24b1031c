"""Devices: the mesh, the shardings, and global batches built from each process's slice.

The mesh has two axes, ``data`` and ``fsdp`` (``config.mesh``; the default ``data=-1,
fsdp=1`` puts every device on ``data``). The batch is split over both. Parameters and
optimizer state are replicated over ``data`` and, when ``fsdp`` > 1, sharded over ``fsdp``
(fully sharded data parallelism, ZeRO-3): each array of at least ``FSDP_MIN_SIZE`` elements is
cut along its largest dimension that ``fsdp`` divides; smaller ones (biases, norms) and those
with no such dimension stay whole. XLA inserts the all-gathers before use and the
reduce-scatters of the gradients. Every process feeds only its own rows;
``jax.make_array_from_process_local_data`` assembles the global array, so one code path serves
one CPU, one GPU and a pod.
"""

import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainer.errors import ConfigError

AXES = ('data', 'fsdp')
#: arrays smaller than this stay replicated under fsdp: gathering them costs more than they weigh
FSDP_MIN_SIZE = 1024


def make_mesh(data: int = -1, fsdp: int = 1) -> Mesh:
  """A ``data`` x ``fsdp`` mesh of all devices (``data=-1``: as many as are left)."""
  devices = jax.devices()
  count = len(devices)
  if fsdp < 1 or count % fsdp:
    raise ConfigError(
      f'config.mesh.fsdp is {fsdp}; it must be >= 1 and divide the number of devices ({count}).'
    )
  if data == -1:
    data = count // fsdp
  if data < 1 or data * fsdp != count:
    raise ConfigError(
      f'config.mesh is data={data}, fsdp={fsdp}; their product must be the number of devices ({count}).'
    )
  return Mesh(np.asarray(devices).reshape(data, fsdp), AXES)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec(AXES))


def array_sharding(mesh: Mesh, shape: tuple[int, ...]) -> NamedSharding:
  """The sharding of one parameter or optimizer array of ``shape`` (see the module docstring)."""
  fsdp = mesh.shape['fsdp']
  if fsdp == 1 or math.prod(shape) < FSDP_MIN_SIZE:
    return replicated(mesh)
  for axis in sorted(range(len(shape)), key=lambda axis: -shape[axis]):
    if shape[axis] % fsdp == 0:
      spec = [None] * len(shape)
      spec[axis] = 'fsdp'
      return NamedSharding(mesh, PartitionSpec(*spec))
  return replicated(mesh)


def state_shardings(tree, mesh: Mesh):
  """``array_sharding`` for every array of ``tree`` (parameters, optimizer state, a whole train state)."""
  return jax.tree.map(lambda x: array_sharding(mesh, tuple(np.shape(x))), tree)


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
