"""A stack's blocks kept as a list or stacked on a leading depth axis, run unrolled or scanned, with remat.

``scan_layers=True`` keeps the ``depth`` blocks as one block whose every array has a leading
``layers`` axis (big_vision's ``scan=True``) and runs them with ``jax.lax.scan``: the step is
traced and compiled once per stack instead of once per layer, so compile time stops growing
with depth. ``remat`` (``REMAT_POLICIES``) wraps each block in ``jax.checkpoint`` with one of
JAX's policies (big_vision's ``remat_policy``): ``'none'`` keeps every activation for the
backward pass; ``'full'`` keeps only each block's input and recomputes the rest;
``'dots_saveable'`` keeps the matmul outputs; ``'dots_with_no_batch_dims_saveable'`` keeps
those of matmuls without batch dimensions (the projections and the MLP, not the attention
scores). Both compute the same numbers as the plain unrolled stack from the same parameters
(``stack_blocks`` / ``unstack_blocks`` convert a parameter tree between the two forms); only
dropout draws differ, since each layer then draws from its own key.

A stack's owner builds its blocks with ``keep_blocks``, completes each layer's inputs with
``layer_inputs`` and calls each block with ``layer_options``; ``run_layers`` runs one stack, or
several stacks side by side (a tuple: layer ``i`` of each, as one step of the scan).

A parameter may carry, under the metadata key ``GATHER_TO``, the sharding it is to be brought to before
its layer runs (the trainer marks the fsdp-sharded ones: ``trainer.partitioning.mark_layer_gathers``).
Each layer then gathers its own weights at its start, inside the scan's body and the remat boundary, so
a step gathers each layer's weights once forward and once more for the recomputation, and a kernel
(2 or more dimensions) is first cast to the blocks' compute dtype, which every kernel is used in, so a
bfloat16 model gathers half the bytes and computes the same numbers. The gradient flows back
unconstrained, so XLA reduce-scatters it into the parameter's shard. Without the key nothing changes.
"""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

REMAT_POLICIES = {
  'none': None,
  'full': jax.checkpoint_policies.nothing_saveable,
  'dots_saveable': jax.checkpoint_policies.dots_saveable,
  'dots_with_no_batch_dims_saveable': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
#: the logical name of the leading axis of scanned parameters
LAYERS_AXIS = 'layers'
#: a parameter's metadata key naming the ``NamedSharding`` its layer gathers it to (spec of its full shape)
GATHER_TO = 'gather_to'


def check_remat(remat: str) -> str:
  if remat not in REMAT_POLICIES:
    raise ValueError(f'model.remat: unknown value {remat!r}; allowed values: {", ".join(REMAT_POLICIES)}.')
  return remat


def stack_modules(modules: Sequence[nnx.Module]) -> nnx.Module:
  """One module of the same kind whose arrays are those of ``modules`` stacked on a new leading axis.

  The modules must have the same structure and static attributes. Logical axis names
  (``out_sharding`` metadata) gain ``'layers'`` in front.
  """
  graphdef = nnx.graphdef(modules[0])
  stacked = jax.tree.map(lambda *arrays: jnp.stack(arrays), *(nnx.state(module) for module in modules))
  for _, variable in nnx.to_flat_state(stacked):
    names = variable.get_metadata().get('out_sharding')
    if names:
      variable.set_metadata('out_sharding', (LAYERS_AXIS, *names))
  return nnx.merge(graphdef, stacked)


def keep_blocks(make_block: Callable, drop_path_rates: Sequence[float], scan_layers: bool):
  """The blocks ``make_block(rate)`` of a stack, one per rate: an ``nnx.List``, or one stacked block.

  Stacked, every layer is built with the largest rate, which then only says whether any layer
  drops; each layer's own rate is one of its inputs (``layer_inputs``).
  """
  if scan_layers:
    return stack_modules([make_block(max(drop_path_rates)) for _ in drop_path_rates])
  return nnx.List([make_block(rate) for rate in drop_path_rates])


def layer_inputs(
  per_layer: list[dict],
  drop_path_rates: Sequence[float],
  *,
  scan_layers: bool,
  remat: str,
  deterministic: bool,
  rngs: nnx.Rngs | None,
) -> list[dict]:
  """Completes each layer's inputs (one dict per layer, in place) for ``run_layers``.

  Scanned, every layer needs one structure: an array some layers lack becomes zeros, and each
  layer's drop-path rate is added. Traced per layer (scanned or rematerialised), a block cannot
  draw from the caller's ``rngs``: a training pass gives each layer its own dropout key.
  """
  if scan_layers:
    for name in per_layer[0]:
      present = [inputs[name] for inputs in per_layer if inputs[name] is not None]
      for inputs in per_layer:
        if present and inputs[name] is None:
          inputs[name] = jnp.zeros_like(present[0])
    for inputs, rate in zip(per_layer, drop_path_rates):
      inputs['drop_path_rate'] = jnp.float32(rate)
  if (scan_layers or remat != 'none') and not deterministic and rngs is not None:
    for inputs, key in zip(per_layer, jax.random.split(rngs.dropout(), len(per_layer))):
      inputs['dropout_key'] = key
  return per_layer


def layer_options(inputs: dict, *, deterministic: bool, rngs: nnx.Rngs | None) -> dict:
  """A block call's ``deterministic``, ``rngs`` (the layer's own key, if it has one) and ``drop_path_rate``."""
  key = inputs.get('dropout_key')
  return dict(
    deterministic=deterministic,
    rngs=rngs if key is None else nnx.Rngs(dropout=key),
    drop_path_rate=inputs.get('drop_path_rate'),
  )


def _gather_one(x: jax.Array, sharding, dtype) -> jax.Array:
  """``x`` cast to ``dtype`` and constrained to ``sharding``; the gradient comes back as it is, in
  ``x``'s dtype, left for XLA to reduce into ``x``'s shard."""

  @jax.custom_vjp
  def gather(x):
    return jax.lax.with_sharding_constraint(x.astype(dtype), sharding)

  def forward(x):
    return gather(x), None

  def backward(_, gradient):
    return (gradient.astype(x.dtype),)

  gather.defvjp(forward, backward)
  return gather(x)


def gather_weights(state, dtype=None):
  """A layer's ``state`` with each parameter that names a sharding under ``GATHER_TO`` brought to it,
  a floating kernel (2 or more dimensions) cast to ``dtype`` first (``None``: kept as it is)."""

  def gather(variable):
    if not isinstance(variable, nnx.Variable) or variable.get_metadata().get(GATHER_TO) is None:
      return variable
    sharding = variable.get_metadata()[GATHER_TO]
    value = variable.get_value()
    # a scanned stack's body sees one layer's slice: the spec's trailing dimensions are its own
    sharding = NamedSharding(
      sharding.mesh, PartitionSpec(*tuple(sharding.spec)[len(sharding.spec) - value.ndim :])
    )
    cast = (
      dtype
      if dtype is not None and value.ndim >= 2 and jnp.issubdtype(value.dtype, jnp.floating)
      else value.dtype
    )
    return variable.replace(_gather_one(value, sharding, cast))

  return jax.tree.map(gather, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def layer_of(blocks, layer: int) -> nnx.Module:
  """Block ``layer`` of an ``nnx.List`` or of a stacked block (a module over that layer's slices)."""
  if isinstance(blocks, nnx.List):
    return blocks[layer]
  graphdef, state = nnx.split(blocks)
  return nnx.merge(graphdef, _slice(state, layer))


def run_layers(
  blocks,
  x: jax.Array,
  per_layer: list,
  call: Callable,
  *,
  remat: str = 'none',
  dtype=None,
):
  """Runs ``x`` through the blocks: ``call(block, x, inputs) -> (x, outputs)`` for each layer.

  ``blocks`` is an ``nnx.List`` (unrolled) or a stacked block (scanned), or a tuple of such
  stacks of one depth (then ``block`` is the tuple of each stack's layer); ``per_layer`` holds
  each layer's inputs (pytrees of one structure, e.g. a position table or a dropout key).
  ``dtype``: the blocks' compute dtype, which kernels marked ``GATHER_TO`` are gathered in.
  Returns the final ``x`` and the list of each layer's ``outputs``.
  """
  policy = REMAT_POLICIES[check_remat(remat)]

  def pure(graphdef, prevent_cse: bool):
    def apply(state, x, inputs):
      return call(nnx.merge(graphdef, gather_weights(state, dtype)), x, inputs)

    return apply if remat == 'none' else jax.checkpoint(apply, policy=policy, prevent_cse=prevent_cse)

  unrolled = _unrolled_layers(blocks)
  if unrolled is not None:
    outputs = []
    for block, inputs in zip(unrolled, per_layer):
      if remat == 'none' and not _marked(block):
        x, layer_outputs = call(block, x, inputs)
      else:
        # Unrolled, the recomputation must be kept from XLA's common-subexpression elimination, which
        # would merge it with the forward pass and keep every activation after all.
        graphdef, state = nnx.split(block)
        x, layer_outputs = pure(graphdef, prevent_cse=True)(state, x, inputs)
      outputs.append(layer_outputs)
    return x, outputs
  graphdef, state = nnx.split(blocks)
  apply = pure(graphdef, prevent_cse=False)  # a scan's body is not merged across iterations
  stacked_inputs = jax.tree.map(lambda *values: jnp.stack(values), *per_layer)

  def body(x, layer):
    layer_state, inputs = layer
    return apply(layer_state, x, inputs)

  x, stacked_outputs = jax.lax.scan(body, x, (state, stacked_inputs))
  return x, [_slice(stacked_outputs, i) for i in range(len(per_layer))]


def _marked(block) -> bool:
  """Whether any parameter of ``block`` (or of a tuple of blocks) names a sharding to gather to."""
  leaves = jax.tree.leaves(nnx.state(block), is_leaf=lambda x: isinstance(x, nnx.Variable))
  return any(
    isinstance(leaf, nnx.Variable) and leaf.get_metadata().get(GATHER_TO) is not None for leaf in leaves
  )


def _unrolled_layers(blocks) -> list | None:
  """Each layer's block of unrolled ``blocks`` (a tuple of blocks for a tuple of stacks); None if stacked."""
  if isinstance(blocks, nnx.List):
    return list(blocks)
  if isinstance(blocks, tuple) and all(isinstance(stack, nnx.List) for stack in blocks):
    return list(zip(*blocks))
  return None


def _slice(tree, index: int):
  return jax.tree.map(lambda array: array[index], tree)


def _is_layer_list(node) -> bool:
  return isinstance(node, dict) and bool(node) and sorted(node) == list(range(len(node)))


def stack_blocks(tree, names: Sequence[str] = ('blocks',)):
  """A parameter tree (``nnx.to_pure_dict``) of unrolled stacks -> the scanned form.

  Every node named one of ``names`` (a model's stacks: ``'blocks'`` for the ViT and the
  translator) holding layers ``0 .. depth-1`` becomes one node whose arrays have a leading depth
  axis; everything else is kept.
  """
  if not isinstance(tree, dict):
    return tree
  result = {}
  for key, node in tree.items():
    if key in names and _is_layer_list(node):
      result[key] = jax.tree.map(lambda *arrays: jnp.stack(arrays), *(node[i] for i in range(len(node))))
    else:
      result[key] = stack_blocks(node, names)
  return result


def unstack_blocks(tree, names: Sequence[str] = ('blocks',)):
  """The inverse of ``stack_blocks``: each scanned node named one of ``names`` -> layers ``0 .. depth-1``."""
  if not isinstance(tree, dict):
    return tree
  result = {}
  for key, node in tree.items():
    if key in names and isinstance(node, dict) and not _is_layer_list(node):
      depth = jax.tree.leaves(node)[0].shape[0]
      result[key] = {i: _slice(node, i) for i in range(depth)}
    else:
      result[key] = unstack_blocks(node, names)
  return result
