"""The dense layers' matmul (``attention/matmul.py``): on a CPU, a bfloat16 layer's three matmuls
(forward, input gradient, weight gradient) reach XLA's bfloat16 kernels, with the values and
gradients of ``jax.lax.dot_general`` up to bfloat16 rounding; float32 is ``jax.lax.dot_general``
itself."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax import lax

from attention import matmul
from attention.blocks import BlockOptions, Mlp
from attention.multi_head import MultiHeadAttention

# (lhs shape, rhs shape, dimension numbers): nnx.Linear's and nnx.LinearGeneral's contractions
CONTRACTIONS = {
  'linear': ((2, 5, 16), (16, 24), (((2,), (0,)), ((), ()))),
  'two_axes_in': ((2, 5, 4, 8), (4, 8, 24), (((2, 3), (0, 1)), ((), ()))),
  'axes_out': ((2, 5, 16), (16, 3, 4, 8), (((2,), (0,)), ((), ()))),
}


def _operands(lhs_shape, rhs_shape, dtype):
  lhs_key, rhs_key = jax.random.split(jax.random.key(0))
  return (
    jax.random.normal(lhs_key, lhs_shape).astype(dtype),
    (0.2 * jax.random.normal(rhs_key, rhs_shape)).astype(dtype),
  )


@pytest.mark.parametrize('name', sorted(CONTRACTIONS))
def test_bfloat16_values_and_gradients_are_those_of_lax_dot_general(name):
  lhs_shape, rhs_shape, numbers = CONTRACTIONS[name]
  lhs, rhs = _operands(lhs_shape, rhs_shape, jnp.bfloat16)
  ours = matmul.dot_general(lhs, rhs, numbers)
  reference = lax.dot_general(lhs, rhs, numbers)
  assert ours.dtype == reference.dtype == jnp.bfloat16 and ours.shape == reference.shape
  np.testing.assert_allclose(np.float32(ours), np.float32(reference), rtol=1e-2, atol=1e-2)

  def loss(dot, lhs, rhs):
    return jnp.sum(jnp.sin(dot(lhs, rhs, numbers).astype(jnp.float32)))

  ours_grads = jax.grad(lambda a, b: loss(matmul.dot_general, a, b), argnums=(0, 1))(lhs, rhs)
  reference_grads = jax.grad(lambda a, b: loss(lax.dot_general, a, b), argnums=(0, 1))(lhs, rhs)
  for got, want in zip(ours_grads, reference_grads):
    assert got.dtype == want.dtype == jnp.bfloat16 and got.shape == want.shape
    scale = float(jnp.max(jnp.abs(want.astype(jnp.float32))))
    np.testing.assert_allclose(np.float32(got), np.float32(want), rtol=2e-2, atol=2e-2 * scale)


def test_float32_and_other_contractions_are_lax_dot_general_itself():
  lhs, rhs = _operands((2, 5, 16), (16, 24), jnp.float32)
  numbers = CONTRACTIONS['linear'][2]
  jaxpr = str(jax.make_jaxpr(lambda a, b: matmul.dot_general(a, b, numbers))(lhs, rhs))
  assert 'custom_vjp' not in jaxpr and 'dot_general' in jaxpr
  np.testing.assert_array_equal(matmul.dot_general(lhs, rhs, numbers), lax.dot_general(lhs, rhs, numbers))
  batched = (((2,), (1,)), ((0,), (0,)))  # a batch axis: not a dense layer's contraction
  a, b = _operands((2, 5, 16), (2, 16, 3), jnp.bfloat16)
  assert 'custom_vjp' not in str(jax.make_jaxpr(lambda a, b: matmul.dot_general(a, b, batched))(a, b))


def _dot_operand_dtypes(compiled_text: str) -> list[tuple[str, str]]:
  """(lhs, rhs) element types of every dot in XLA's optimised HLO."""
  types = dict(re.findall(r'%(\S+) = (\w+)\[', compiled_text))
  types.update(re.findall(r'%(\S+): (\w+)\[', compiled_text))  # a fused computation's parameters
  return [
    (types[lhs], types[rhs]) for lhs, rhs in re.findall(r' dot\(%([^,\s]+), %([^)\s]+)\)', compiled_text)
  ]


@pytest.mark.parametrize('layer', ['mlp', 'attention'])
def test_on_a_cpu_every_matmul_of_a_bfloat16_layers_step_takes_bfloat16_operands(layer, monkeypatch):
  """The point of the module: XLA converts no operand of the forward or of either gradient's matmuls
  to float32, as it does for ``jax.lax.dot_general`` (the reference: a float32 matmul appears)."""
  x = jax.random.normal(jax.random.key(1), (4, 32, 64))
  if layer == 'mlp':
    module = Mlp(64, 256, BlockOptions(dtype=jnp.bfloat16), rngs=nnx.Rngs(0))
  else:  # the q/k/v and output projections; the scores' batched matmuls are no layer's
    module = MultiHeadAttention(4, 64, dtype=jnp.bfloat16, fused_kernel=False, rngs=nnx.Rngs(0))
  graph, params = nnx.split(module)

  def dots(monkeypatch=None):
    if monkeypatch:
      monkeypatch.setattr(matmul, '_takes_rows_matmul', lambda *args: False)  # lax.dot_general throughout

    def loss(params, x):
      output = nnx.merge(graph, params)(x)
      output = output[0] if isinstance(output, tuple) else output  # attention: (output, weights)
      return jnp.sum(output.astype(jnp.float32) ** 2)

    return _dot_operand_dtypes(jax.jit(jax.grad(loss)).lower(params, x).compile().as_text())

  ours = dots()
  # two layers, three matmuls each, less the gradient of the input, which is not asked for
  assert sum(pair == ('bf16', 'bf16') for pair in ours) >= 5, ours
  if layer == 'mlp':
    assert set(ours) == {('bf16', 'bf16')}, ours
  assert ('f32', 'f32') in dots(monkeypatch), (
    'XLA now multiplies bfloat16 layers natively: attention/matmul.py can go'
  )


def test_a_step_lowered_for_a_gpu_or_tpu_is_lax_dot_generals():
  """The rows and their written-out transpose are lowered for a CPU only (``lax.platform_dependent``),
  also when a CPU host compiles for a TPU slice."""
  numbers = CONTRACTIONS['linear'][2]
  lhs, rhs = _operands((2, 5, 16), (16, 24), jnp.bfloat16)
  step = jax.jit(
    jax.grad(lambda a, b: jnp.sum(matmul.dot_general(a, b, numbers).astype(jnp.float32)), (0, 1))
  )
  lowered = {
    platform: step.trace(lhs, rhs).lower(lowering_platforms=(platform,)).as_text()
    for platform in ('cpu', 'cuda', 'tpu')
  }
  assert 'optimization_barrier' in lowered['cpu']
  assert 'optimization_barrier' not in lowered['cuda'] and 'optimization_barrier' not in lowered['tpu']
