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
"""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

REMAT_POLICIES = {
  'none': None,
  'full': jax.checkpoint_policies.nothing_saveable,
  'dots_saveable': jax.checkpoint_policies.dots_saveable,
  'dots_with_no_batch_dims_saveable': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
#: the logical name of the leading axis of scanned parameters
LAYERS_AXIS = 'layers'


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
):
  """Runs ``x`` through the blocks: ``call(block, x, inputs) -> (x, outputs)`` for each layer.

  ``blocks`` is an ``nnx.List`` (unrolled) or a stacked block (scanned); ``per_layer`` holds
  each layer's inputs (pytrees of one structure, e.g. a position table or a dropout key).
  Returns the final ``x`` and the list of each layer's ``outputs``.
  """
  policy = REMAT_POLICIES[check_remat(remat)]

  def pure(graphdef):
    def apply(state, x, inputs):
      return call(nnx.merge(graphdef, state), x, inputs)

    return apply if remat == 'none' else jax.checkpoint(apply, policy=policy, prevent_cse=False)

  if isinstance(blocks, nnx.List):
    outputs = []
    for block, inputs in zip(blocks, per_layer):
      if remat == 'none':
        x, layer_outputs = call(block, x, inputs)
      else:
        graphdef, state = nnx.split(block)
        x, layer_outputs = pure(graphdef)(state, x, inputs)
      outputs.append(layer_outputs)
    return x, outputs
  graphdef, state = nnx.split(blocks)
  apply = pure(graphdef)
  stacked_inputs = jax.tree.map(lambda *values: jnp.stack(values), *per_layer)

  def body(x, layer):
    layer_state, inputs = layer
    return apply(layer_state, x, inputs)

  x, stacked_outputs = jax.lax.scan(body, x, (state, stacked_inputs))
  return x, [_slice(stacked_outputs, i) for i in range(len(per_layer))]


def _slice(tree, index: int):
  return jax.tree.map(lambda array: array[index], tree)


def _is_layer_list(node) -> bool:
  return isinstance(node, dict) and bool(node) and sorted(node) == list(range(len(node)))


def stack_blocks(tree):
  """A parameter tree (``nnx.to_pure_dict``) of unrolled stacks -> the scanned form.

  Every ``'blocks'`` node holding layers ``0 .. depth-1`` becomes one node whose arrays have a
  leading depth axis; everything else is kept.
  """
  if not isinstance(tree, dict):
    return tree
  result = {}
  for key, node in tree.items():
    if key == 'blocks' and _is_layer_list(node):
      result[key] = jax.tree.map(lambda *arrays: jnp.stack(arrays), *(node[i] for i in range(len(node))))
    else:
      result[key] = stack_blocks(node)
  return result


def unstack_blocks(tree):
  """The inverse of ``stack_blocks``: each scanned ``'blocks'`` node -> layers ``0 .. depth-1``."""
  if not isinstance(tree, dict):
    return tree
  result = {}
  for key, node in tree.items():
    if key == 'blocks' and isinstance(node, dict) and not _is_layer_list(node):
      depth = jax.tree.leaves(node)[0].shape[0]
      result[key] = {i: _slice(node, i) for i in range(depth)}
    else:
      result[key] = unstack_blocks(node)
  return result
