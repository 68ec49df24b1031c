"""Gradient accumulation over micro-batches with one reduction across devices per step.

``accumulated_gradient`` runs the micro-batch loop inside ``jax.shard_map`` over the batch axes
(``data`` and ``fsdp``; ``model`` stays with XLA): each device adds up the gradients of its own rows'
loss sums, micro-batch after micro-batch, with no collective, and the sums are reduced across
devices once, after the loop: an all-reduce (``psum``) of each gradient, or under fsdp a
reduce-scatter (``psum_scatter``) into the parameter's shard. Left to XLA (GSPMD), the loop's body
holds the whole gradient's reduction, run once per micro-batch.

Inside the loop each device gathers its fsdp-sharded parameters for each micro-batch (the
all-gathers fsdp needs anyway) and holds its partial gradient sums whole: under fsdp the
accumulator is the size of the whole model on every device, where XLA's own loop kept it sharded.

Each device draws its own rows' dropout masks, from the micro-batch's key folded with the device's
index along the batch axes (on one device, the micro-batch's key itself, as before), so with dropout
the masks, and the update, depend on the number of devices; without dropout the update is the whole
batch's, as one device computes it (to float rounding).
"""

import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from trainer.partitioning import BATCH_AXES

_MANUAL = frozenset(BATCH_AXES)


def _manual_spec(spec: PartitionSpec) -> PartitionSpec:
  """A parameter's partition spec restricted to the batch axes (fsdp): what ``shard_map`` splits; the
  ``model`` axis is left to XLA."""

  def keep(entry):
    names = entry if isinstance(entry, tuple) else (entry,)
    kept = tuple(name for name in names if name in _MANUAL)
    return None if not kept else kept[0] if len(kept) == 1 else kept

  return PartitionSpec(*(keep(entry) for entry in spec))


def _sharded_dims(spec: PartitionSpec) -> list[tuple[int, object]]:
  return [(dim, entry) for dim, entry in enumerate(spec) if entry is not None]


def _gather(x, spec: PartitionSpec):
  """The whole array from this device's shard (``spec``: its manual axes)."""
  for dim, axes in _sharded_dims(spec):
    x = jax.lax.all_gather(x, axes, axis=dim, tiled=True)
  return x


def _reduce(g, spec: PartitionSpec, trained: bool):
  """The sum over every device of the batch axes, kept as this device's shard (``spec``); a frozen
  parameter's zeros are cut to the shard, with no collective."""
  if not trained:
    for dim, axes in _sharded_dims(spec):
      size = g.shape[dim] // jax.lax.axis_size(axes)
      g = jax.lax.dynamic_slice_in_dim(g, jax.lax.axis_index(axes) * size, size, axis=dim)
    return g
  scattered = set()
  for dim, axes in _sharded_dims(spec):
    g = jax.lax.psum_scatter(g, axes, scatter_dimension=dim, tiled=True)
    scattered.update(axes if isinstance(axes, tuple) else (axes,))
  rest = tuple(axis for axis in BATCH_AXES if axis not in scattered)
  return jax.lax.psum(g, rest) if rest else g


def _split_micro_batches(batch, num_micro_batches: int):
  """``[b, ...]`` -> ``[k, b/k, ...]`` taking every k-th row (on a device's rows: the rows of each
  global micro-batch that the device holds)."""

  def split(x):
    x = x.reshape(x.shape[0] // num_micro_batches, num_micro_batches, *x.shape[1:])
    return jnp.swapaxes(x, 0, 1)

  return jax.tree.map(split, batch)


def accumulated_gradient(
  summed_gradient,
  metrics_type,
  params,
  batch,
  step_key,
  *,
  num_micro_batches,
  mesh,
  specs,
  trained,
  constants=None,
):
  """``(gradient sum, weight sum, metrics)`` of ``batch`` in ``num_micro_batches`` micro-batches.

  ``summed_gradient(params, micro_batch, key, constants) -> (grads, weight, metrics)`` is one
  micro-batch's, on one device's rows (``constants``, ``Task.training_constants``, reach every device
  whole); ``specs`` (``trainer.partitioning.param_specs``) the parameters' partition specs, ``trained`` a tree of
  bools, ``False`` for a frozen parameter (whose gradient is zero: nothing to reduce). The gradient sum
  comes back sharded like the parameters, the weight and metrics replicated.
  """
  manual = jax.tree.map(_manual_spec, specs)

  def _whole_zeros(shard, spec):
    shape = list(shard.shape)
    for dim, axes in _sharded_dims(spec):
      shape[dim] *= mesh.shape[axes] if isinstance(axes, str) else math.prod(mesh.shape[a] for a in axes)
    return jnp.zeros(shape, shard.dtype)

  def on_device(params, batch, step_key, constants):
    devices = math.prod(mesh.shape[axis] for axis in BATCH_AXES)
    device_key = step_key if devices == 1 else jax.random.fold_in(step_key, jax.lax.axis_index(BATCH_AXES))

    def accumulate(carry, indexed_micro_batch):
      grads_sum, weight_sum, metrics = carry
      index, micro_batch = indexed_micro_batch
      whole = jax.tree.map(_gather, params, manual)
      grads, weight, micro_metrics = summed_gradient(
        whole, micro_batch, jax.random.fold_in(device_key, index), constants
      )
      grads_sum = jax.tree.map(jnp.add, grads_sum, grads)
      return (grads_sum, weight_sum + weight, metrics.merge(micro_metrics)), None

    start = (jax.tree.map(_whole_zeros, params, manual), jnp.zeros((), jnp.float32), metrics_type.empty())
    micro_batches = (jnp.arange(num_micro_batches), _split_micro_batches(batch, num_micro_batches))
    (grads, weight, metrics), _ = jax.lax.scan(accumulate, start, micro_batches)
    grads = jax.tree.map(_reduce, grads, manual, trained)
    per_device_metrics = jax.tree.map(lambda x: x[None], metrics)
    return grads, jax.lax.psum(weight, BATCH_AXES), per_device_metrics

  grads, weight, per_device_metrics = jax.shard_map(
    on_device,
    mesh=mesh,
    in_specs=(manual, PartitionSpec(BATCH_AXES), PartitionSpec(), PartitionSpec()),
    out_specs=(manual, PartitionSpec(), PartitionSpec(BATCH_AXES)),
    axis_names=_MANUAL,
    check_vma=False,
  )(params, batch, step_key, constants)
  return grads, weight, per_device_metrics.reduce()
