"""bfloat16 compute (``model.dtype='bfloat16'``): matmuls in bfloat16, the numerically delicate rest in float32.

The train step's jaxpr (forward and backward) is searched for the primitives of a softmax
(``reduce_max``, ``exp``), of LayerNorm's statistics (``rsqrt``) and of the loss (``log``):
every one must take float32 inputs, while most matmuls take bfloat16 ones. Both families, the
fused attention path (``jax.nn.dot_product_attention``, forced on the CPU, where it would not
run by default) and the explicit one (a cosine or additive score).
"""

import collections
import pathlib

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from attention import multi_head
from attention.multi_head import MultiHeadAttention
from tests.translation_test_configs import tiny_translation_config
from tests.vit_test_configs import tiny_vit_config
from trainer.state import ModelParts
from trainer.task import load_task

FLOAT32_ONLY = ('reduce_max', 'exp', 'log', 'rsqrt', 'logistic')


def _primitive_dtypes(jaxpr, counts):
  """(primitive name, input dtypes) -> count, over ``jaxpr`` and every jaxpr nested in it."""
  for equation in jaxpr.eqns:
    dtypes = tuple(str(var.aval.dtype) for var in equation.invars if hasattr(var.aval, 'dtype'))
    counts[equation.primitive.name, dtypes] += 1
    for value in equation.params.values():
      for inner in value if isinstance(value, (tuple, list)) else (value,):
        if isinstance(inner, jax.extend.core.ClosedJaxpr):
          _primitive_dtypes(inner.jaxpr, counts)
        elif isinstance(inner, jax.extend.core.Jaxpr):
          _primitive_dtypes(inner, counts)
  return counts


def _train_step_primitives(config, tmp_path, fused_kernel):
  task = load_task(config)
  task.prepare(pathlib.Path(tmp_path))
  model = task.make_model(nnx.Rngs(params=0))
  attention_layers = [m for _, m in nnx.iter_graph(model) if isinstance(m, MultiHeadAttention)]
  assert attention_layers
  for layer in attention_layers:
    # On a CPU the fused path (jax.nn.dot_product_attention) runs only when forced.
    layer.fused_kernel = fused_kernel
  parts = ModelParts(model)
  batch = next(task.train_batches(batch_size=8, seed=0, start_step=0, process_index=0, process_count=1))

  def loss(params):
    model = parts.merge(params)
    loss_sum, _, outputs = task.loss_and_outputs(model, batch, rngs=nnx.Rngs(dropout=0), deterministic=False)
    return loss_sum, outputs

  closed = jax.make_jaxpr(jax.value_and_grad(loss, has_aux=True))(parts.params)
  (loss_value, outputs), grads = jax.eval_shape(jax.value_and_grad(loss, has_aux=True), parts.params)
  return _primitive_dtypes(closed.jaxpr, collections.Counter()), loss_value, outputs, grads


CASES = {
  'vit_fused': lambda: tiny_vit_config(**{'model.dtype': 'bfloat16'}),
  'vit_cosine': lambda: tiny_vit_config(**{'model.dtype': 'bfloat16', 'model.score': 'cosine'}),
  'translator_fused': lambda: tiny_translation_config(**{'model.dtype': 'bfloat16'}),
  'translator_additive': lambda: tiny_translation_config(
    **{'model.dtype': 'bfloat16', 'model.score': 'additive'}
  ),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_softmax_norm_statistics_and_loss_are_float32_while_matmuls_are_bfloat16(case, tmp_path, monkeypatch):
  fused_calls, fused_attention = [], multi_head.fused_attention

  def recorded_fused_attention(*args, **kwargs):
    fused_calls.append(args[0].dtype)
    return fused_attention(*args, **kwargs)

  monkeypatch.setattr(multi_head, 'fused_attention', recorded_fused_attention)
  fused = case.endswith('_fused')
  counts, loss_value, outputs, grads = _train_step_primitives(CASES[case](), tmp_path, fused_kernel=fused)
  # The fused cases go through jax.nn.dot_product_attention (bfloat16 queries), the others never.
  assert (set(fused_calls) == {jnp.dtype(jnp.bfloat16)}) if fused else not fused_calls, fused_calls
  delicate = {key: count for key, count in counts.items() if key[0] in FLOAT32_ONLY}
  assert {'reduce_max', 'exp', 'log', 'rsqrt'} <= {name for name, _ in delicate}, delicate
  assert all(set(dtypes) == {'float32'} for _, dtypes in delicate), delicate
  matmuls = {dtypes: count for (name, dtypes), count in counts.items() if name == 'dot_general'}
  bfloat16_matmuls = matmuls.get(('bfloat16', 'bfloat16'), 0)
  assert bfloat16_matmuls > 2 * sum(count for dtypes, count in matmuls.items() if 'float32' in dtypes), (
    matmuls
  )
  assert loss_value.dtype == jnp.float32
  assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(grads))  # float32 parameters
  assert all(
    leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(outputs) if jnp.issubdtype(leaf.dtype, jnp.floating)
  )
