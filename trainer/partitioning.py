"""Devices: the mesh, the shardings, and global batches built from each process's slice.

The mesh has three axes, ``data``, ``fsdp`` and ``model`` (``config.mesh``; the default
``data=-1, fsdp=1, model=1`` puts every device on ``data``). The batch is split over ``data``
and ``fsdp`` and its rows are replicated over ``model``. Parameters and optimizer state are
replicated over ``data``; two rules shard them over the other axes:

- ``model`` > 1 (tensor parallelism, Megatron-style), by parameter path
  (``model_parallel_dim``): the query, key and value projections and the MLP's ``fc1`` are
  column-parallel (the output features, i.e. the heads or the hidden units, kernels and
  biases), the attention output projection and ``fc2`` row-parallel (the input features;
  their biases stay whole). A dimension that ``model`` does not divide, and every other
  parameter (embeddings, norms, classifier heads, RNNs), stays whole on ``model``. For layers
  too wide for one device, over devices with fast links between them; the ``model`` axis stays
  within one process. Tested on 8 CPU host devices (``tests/test_tensor_parallel.py``); its
  speed on accelerators has not been measured.
- ``fsdp`` > 1 (fully sharded data parallelism, ZeRO-3), by shape: each array of at least
  ``FSDP_MIN_SIZE`` elements is cut along its largest dimension that ``fsdp`` divides, other
  than the ``model`` one; smaller ones (biases, norms) and those with no such dimension stay
  whole.

Adam's moments have the paths of their parameters and are sharded alike. Only the parameters
are annotated: XLA (GSPMD) propagates the shardings through the step and inserts the
all-gathers, reduce-scatters and all-reduces, so the numbers are those of one device whatever
the mesh. Every process feeds only its own rows; ``jax.make_array_from_process_local_data``
assembles the global array, so one code path serves one CPU, one GPU and a pod.
"""

import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainer.errors import ConfigError

AXES = ('data', 'fsdp', 'model')
BATCH_AXES = ('data', 'fsdp')
#: arrays smaller than this stay replicated under fsdp: gathering them costs more than they weigh
FSDP_MIN_SIZE = 1024
#: (parent module, layer) -> the tensor-parallel kind of its parameters
_TENSOR_PARALLEL = {
  **{('attention', name): 'column' for name in ('query', 'key', 'value')},
  ('attention', 'out'): 'row',
  ('mlp', 'fc1'): 'column',
  ('mlp', 'fc2'): 'row',
}


def make_mesh(data: int = -1, fsdp: int = 1, model: int = 1, devices=None) -> Mesh:
  """A ``data`` x ``fsdp`` x ``model`` mesh of ``devices`` (default: all; ``data=-1``: as many as are left)."""
  devices = jax.devices() if devices is None else list(devices)
  count = len(devices)
  for name, size in (('fsdp', fsdp), ('model', model)):
    if size < 1 or count % size:
      raise ConfigError(
        f'config.mesh.{name} is {size}; it must be >= 1 and divide the number of devices ({count}).'
      )
  sizes = f'fsdp={fsdp}' + (f', model={model}' if model > 1 else '')
  if data == -1:
    if count % (fsdp * model):
      raise ConfigError(f'config.mesh is {sizes}; their product must divide the number of devices ({count}).')
    data = count // (fsdp * model)
  if data < 1 or data * fsdp * model != count:
    raise ConfigError(
      f'config.mesh is data={data}, {sizes}; their product must be the number of devices ({count}).'
    )
  grid = np.asarray(devices).reshape(data, fsdp, model)
  if any(len({device.process_index for device in group}) > 1 for group in grid.reshape(-1, model)):
    raise ConfigError(
      f'config.mesh.model is {model}; the model axis must stay within one process '
      f'(this one has {sum(d.process_index == devices[0].process_index for d in devices)} devices), '
      'since each process feeds its own rows.'
    )
  return Mesh(grid, AXES)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def _names(path) -> tuple[str, ...]:
  """A tree path as names: ``.params['mlp']['fc1']['kernel'].value`` -> ``('params', 'mlp', 'fc1', 'kernel')``."""
  names = tuple(str(getattr(key, 'key', getattr(key, 'name', getattr(key, 'idx', key)))) for key in path)
  if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and names[-1] == 'value':
    names = names[:-1]  # the array inside an nnx.Variable
  return names


def model_parallel_dim(path, ndim: int) -> int | None:
  """The dimension of the array at ``path`` (a tree path) that the ``model`` axis cuts, or ``None``.

  Decided by the last names of the path, so parameters and the optimizer state that mirrors
  them (Adam's ``mu`` and ``nu``) agree: ``...attention.{query,key,value}.{kernel,bias}`` and
  ``...mlp.fc1.{kernel,bias}`` cut their last dimension (output features: the heads, the
  hidden units), ``...attention.out.kernel`` and ``...mlp.fc2.kernel`` the one before it
  (input features). A parent named ``*attention`` (``self_attention``, ``cross_attention``)
  counts as ``attention``.
  """
  names = _names(path)
  if len(names) < 3 or names[-1] not in ('kernel', 'bias'):
    return None
  parent = 'attention' if names[-3].endswith('attention') else names[-3]
  kind = _TENSOR_PARALLEL.get((parent, names[-2]))
  if kind == 'column':
    return ndim - 1
  if kind == 'row' and names[-1] == 'kernel':
    return ndim - 2
  return None


def array_sharding(mesh: Mesh, shape: tuple[int, ...], model_dim: int | None = None) -> NamedSharding:
  """The sharding of one parameter or optimizer array of ``shape`` (see the module docstring).

  ``model_dim`` (from ``model_parallel_dim``) is cut over ``model`` when ``model`` divides it;
  fsdp then takes the largest other dimension it divides.
  """
  spec = [None] * len(shape)
  model = mesh.shape.get('model', 1)
  if model > 1 and model_dim is not None and shape[model_dim] % model == 0:
    spec[model_dim] = 'model'
  fsdp = mesh.shape['fsdp']
  if fsdp > 1 and math.prod(shape) >= FSDP_MIN_SIZE:
    for axis in sorted(range(len(shape)), key=lambda axis: -shape[axis]):
      if spec[axis] is None and shape[axis] % fsdp == 0:
        spec[axis] = 'fsdp'
        break
  return NamedSharding(mesh, PartitionSpec(*spec)) if any(spec) else replicated(mesh)


def state_shardings(tree, mesh: Mesh):
  """``array_sharding`` for every array of ``tree`` (parameters, optimizer state, a whole train state)."""

  def sharding(path, x):
    shape = tuple(np.shape(x))
    return array_sharding(mesh, shape, model_parallel_dim(path, len(shape)))

  return jax.tree_util.tree_map_with_path(sharding, tree)


def check_batch_size(global_batch_size: int, mesh: Mesh, what: str = 'batch_size') -> None:
  shards = mesh.shape['data'] * mesh.shape['fsdp']
  if global_batch_size % shards:
    split = 'the number of devices' if shards == mesh.devices.size else 'data x fsdp'
    raise ConfigError(f'{what} ({global_batch_size}) must be divisible by {split} ({shards}).')
  if global_batch_size % jax.process_count():
    raise ConfigError(
      f'{what} ({global_batch_size}) must be divisible by the number of processes ({jax.process_count()}).'
    )


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """This process's rows -> one global array per key, split over ``data`` and ``fsdp``."""
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
