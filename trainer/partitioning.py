"""Devices: the mesh, the shardings, and global batches built from each process's slice.

The mesh has three axes, ``data``, ``fsdp`` and ``model`` (``config.mesh``; the default
``data=-1, fsdp=1, model=1`` puts every device on ``data``). The batch is split over ``data``
and ``fsdp`` and its rows are replicated over ``model``. Parameters and optimizer state are
replicated over ``data``; two rules shard them over the other axes, and neither knows any
module or parameter name:

- ``model`` > 1 (tensor parallelism, Megatron-style), by the logical axis names that a model
  gives its parameters as sharding metadata (``nnx.with_partitioning(init, ('embed', 'mlp'),
  ...)``, Flax's ``out_sharding``) and the rules that map logical names to mesh axes
  (``LOGICAL_RULES``: ``heads`` and ``mlp`` go to ``model``). The attention modules name the
  head axis of their ``[D, 3, H, Dh]`` query-key-value kernels and ``[H, Dh, D]`` output
  kernels, the MLP its hidden units, so attention is cut by heads (column-parallel into the
  heads, row-parallel out of them) and the MLP by hidden units. A new model family gets
  tensor parallelism by naming its parameters' axes, without a change here. A dimension that
  ``model`` does not divide, and every array without names (embeddings, norms, classifier
  heads, RNNs), stays whole on ``model``. For layers too wide for one device, over devices with
  fast links between them; the ``model`` axis stays within one process. Tested on 8 CPU host
  devices (``tests/test_tensor_parallel.py``); its speed on accelerators has not been measured.
- ``fsdp`` > 1 (fully sharded data parallelism, ZeRO-3), by shape: each array of at least
  ``FSDP_MIN_SIZE`` elements is cut along its largest dimension that ``fsdp`` divides, other
  than the ``model`` one; smaller ones (biases, norms) and those with no such dimension stay
  whole.

Under fsdp the train step marks each fsdp-sharded parameter with the sharding it has without
``fsdp`` (``mark_layer_gathers``; the ``model`` cut kept) under the metadata key that the layer stacks
read (``attention.layers.GATHER_TO``): each layer then all-gathers its own weights at its start, in its
compute dtype, inside the scan and the remat boundary, once forward and once for the recomputation,
as MaxText's fsdp does. Left to XLA's propagation, a G/14 step gathered its weights dozens of times.

Adam's moments are built by mapping over the parameters, so they carry the same names and
are sharded alike. Only the parameters are annotated: XLA (GSPMD) propagates the shardings
through the step and inserts the all-gathers, reduce-scatters and all-reduces, so the numbers
are those of one device whatever the mesh. Every process feeds only its own rows;
``jax.make_array_from_process_local_data`` assembles the global array, so one code path serves
one CPU, one GPU and a pod.

A task sees the trainer's devices outside the compiled steps as a ``Devices``: a task that runs more
than one forward pass per batch in evaluation (decoding) gets one from the trainer; it spreads this
process's rows over the devices and gathers per-row results from every process, so the task never
builds a mesh or talks to other hosts.
"""

import math

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainer.errors import ConfigError

AXES = ('data', 'fsdp', 'model')
BATCH_AXES = ('data', 'fsdp')
#: arrays smaller than this stay replicated under fsdp: gathering them costs more than they weigh
FSDP_MIN_SIZE = 1024
#: logical axis name (a parameter's ``out_sharding`` metadata) -> the mesh axis that cuts it
LOGICAL_RULES = (('heads', 'model'), ('mlp', 'model'))


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


def logical_axes(leaf) -> tuple | None:
  """The logical axis names of a parameter (an ``nnx.Variable``'s ``out_sharding``), or ``None``."""
  if not isinstance(leaf, nnx.Variable):
    return None
  names = leaf.get_metadata().get('out_sharding')
  return tuple(names) if names else None


def array_sharding(
  mesh: Mesh, shape: tuple[int, ...], names: tuple | None = None, rules=LOGICAL_RULES
) -> NamedSharding:
  """The sharding of one parameter or optimizer array of ``shape`` (see the module docstring).

  ``names`` (one logical name or ``None`` per dimension) are mapped by ``rules`` onto mesh
  axes, each dimension that its mesh axis divides (and each mesh axis once); fsdp then takes
  the largest other dimension it divides.
  """
  spec = [None] * len(shape)
  mesh_axis = dict(rules)
  if names is not None and len(names) == len(shape):
    for dim, name in enumerate(names):
      axis = mesh_axis.get(name)
      if axis and mesh.shape.get(axis, 1) > 1 and shape[dim] % mesh.shape[axis] == 0 and axis not in spec:
        spec[dim] = axis
  fsdp = mesh.shape['fsdp']
  if fsdp > 1 and math.prod(shape) >= FSDP_MIN_SIZE and 'fsdp' not in spec:
    for axis in sorted(range(len(shape)), key=lambda axis: -shape[axis]):
      if spec[axis] is None and shape[axis] % fsdp == 0:
        spec[axis] = 'fsdp'
        break
  return NamedSharding(mesh, PartitionSpec(*spec)) if any(spec) else replicated(mesh)


def state_shardings(tree, mesh: Mesh, rules=LOGICAL_RULES):
  """``array_sharding`` for every array of ``tree`` (parameters, optimizer state, a whole train state),
  a tree of the same structure (``nnx.Variable`` nodes kept, holding their sharding)."""

  def sharding(leaf):
    if isinstance(leaf, nnx.Variable) and not jax.tree.leaves(leaf.get_value()):
      return leaf  # no array: an optimizer's placeholder for a parameter it leaves alone (a frozen one)
    if isinstance(leaf, nnx.Variable):
      return leaf.replace(array_sharding(mesh, tuple(np.shape(leaf.get_value())), logical_axes(leaf), rules))
    return array_sharding(mesh, tuple(np.shape(leaf)), None, rules)

  return jax.tree.map(sharding, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


def mark_layer_gathers(params, specs, mesh: Mesh):
  """``params`` (a tree of ``nnx.Variable``) with each one that ``specs`` (a tree like it of partition
  specs) shards over ``fsdp`` marked with the sharding its layer gathers it to: its spec, padded to its
  dimensions, with ``fsdp`` taken out. Others are returned as they are."""
  from attention.layers import GATHER_TO  # pylint: disable=g-import-not-at-top

  def mark(variable, spec):
    spec = spec.get_value() if isinstance(spec, nnx.Variable) else spec
    if not isinstance(variable, nnx.Variable) or 'fsdp' not in tuple(spec):
      return variable
    entries = tuple(spec) + (None,) * (np.ndim(variable.get_value()) - len(spec))
    gathered = PartitionSpec(*(None if axes == 'fsdp' else axes for axes in entries))
    return variable.replace(variable.get_value(), **{GATHER_TO: NamedSharding(mesh, gathered)})

  is_leaf = lambda x: isinstance(x, nnx.Variable | PartitionSpec)  # noqa: E731
  return jax.tree.map(mark, params, specs, is_leaf=is_leaf)


def param_specs(params, mesh: Mesh, state_sharding):
  """Each parameter's partition spec (``state_sharding``: the state's tree of shardings, or one
  sharding for all)."""
  if isinstance(state_sharding, NamedSharding):
    return jax.tree.map(lambda _: state_sharding.spec, params)
  return jax.tree.map(lambda sharding: sharding.spec, state_sharding.params)


def check_batch_size(global_batch_size: int, mesh: Mesh, what: str = 'batch_size') -> None:
  shards = mesh.shape['data'] * mesh.shape['fsdp']
  if global_batch_size % shards:
    split = 'the number of devices' if shards == mesh.devices.size else 'data x fsdp'
    raise ConfigError(f'{what} ({global_batch_size}) must be divisible by {split} ({shards}).')
  if global_batch_size % jax.process_count():
    raise ConfigError(
      f'{what} ({global_batch_size}) must be divisible by the number of processes ({jax.process_count()}).'
    )


def check_micro_batches(global_batch_size: int, grad_accum_steps: int, mesh: Mesh) -> None:
  """Each device splits its own rows into ``grad_accum_steps`` micro-batches, so the count must
  divide them (otherwise a micro-batch would take rows from two devices)."""
  shards = mesh.shape['data'] * mesh.shape['fsdp']
  per_device = global_batch_size // shards
  if per_device % grad_accum_steps:
    raise ConfigError(
      f'config.grad_accum_steps ({grad_accum_steps}) must divide the rows each device gets: '
      f'batch_size ({global_batch_size}) / data x fsdp ({shards}) = {per_device}.'
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


class Devices:
  """The mesh the trainer built, with the few operations a task needs on it."""

  def __init__(self, mesh: Mesh | None = None):
    self.mesh = mesh if mesh is not None else make_mesh()

  @property
  def process_index(self) -> int:
    return jax.process_index()

  @property
  def process_count(self) -> int:
    return jax.process_count()

  @property
  def is_main_process(self) -> bool:
    """Whether this process writes the files every process would write alike."""
    return jax.process_index() == 0

  def shard(self, local_batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    """This process's rows -> global arrays split over the devices (``global_batch``)."""
    return global_batch(local_batch, self.mesh)

  def gather(self, tree):
    """Global arrays (any pytree of them) -> numpy arrays holding every process's rows, on every process."""
    return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))
