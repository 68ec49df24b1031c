"""The blocks' dense layers (``attention/matmul.py``): on a CPU, a bfloat16 layer's matmuls (forward,
input gradient, weight gradient) and its bias gradient reach XLA's bfloat16 matmul kernels, with the
values and gradients of Flax's layers up to bfloat16 rounding; in float32 they are Flax's layers."""

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

# (inputs, kernel, contracted axes): nnx.Linear's contraction, and nnx.LinearGeneral's with several
# axes in or out
CONTRACTIONS = {
  'linear': ((2, 5, 16), (16, 24), 1),
  'two_axes_in': ((2, 5, 4, 8), (4, 8, 24), 2),
  'axes_out': ((2, 5, 16), (16, 3, 4, 8), 1),
}


def _operands(inputs_shape, kernel_shape, count, dtype):
  keys = jax.random.split(jax.random.key(0), 3)
  return (
    jax.random.normal(keys[0], inputs_shape).astype(dtype),
    (0.2 * jax.random.normal(keys[1], kernel_shape)).astype(dtype),
    jax.random.normal(keys[2], kernel_shape[count:]).astype(dtype),
  )


def _flax_dense(inputs, kernel, bias, count):
  numbers = ((tuple(range(inputs.ndim - count, inputs.ndim)), tuple(range(count))), ((), ()))
  product = lax.dot_general(inputs, kernel, numbers)
  return product if bias is None else product + bias


@pytest.mark.parametrize('with_bias', [True, False])
@pytest.mark.parametrize('name', sorted(CONTRACTIONS))
def test_bfloat16_values_and_gradients_are_those_of_lax_dot_general(name, with_bias):
  inputs_shape, kernel_shape, count = CONTRACTIONS[name]
  inputs, kernel, bias = _operands(inputs_shape, kernel_shape, count, jnp.bfloat16)
  bias = bias if with_bias else None
  ours, reference = matmul.dense(inputs, kernel, bias, count), _flax_dense(inputs, kernel, bias, count)
  assert ours.dtype == reference.dtype == jnp.bfloat16 and ours.shape == reference.shape
  np.testing.assert_allclose(np.float32(ours), np.float32(reference), rtol=1e-2, atol=1e-2)

  def gradients(dense):
    def loss(*operands):
      return jnp.sum(jnp.sin(dense(*operands, count).astype(jnp.float32)))

    operands = (inputs, kernel, bias) if with_bias else (inputs, kernel)
    return jax.grad(lambda *args: loss(*args, *((None,) * (3 - len(args)))), range(len(operands)))(*operands)

  for got, want in zip(gradients(matmul.dense), gradients(_flax_dense), strict=True):
    assert got.dtype == want.dtype == jnp.bfloat16 and got.shape == want.shape
    scale = float(jnp.max(jnp.abs(want.astype(jnp.float32))))
    np.testing.assert_allclose(np.float32(got), np.float32(want), rtol=2e-2, atol=2e-2 * scale)


def test_in_float32_the_layers_are_flaxs_bit_for_bit():
  inputs = jax.random.normal(jax.random.key(1), (2, 5, 16))
  ours, flax_layer = matmul.Linear(16, 24, rngs=nnx.Rngs(0)), nnx.Linear(16, 24, rngs=nnx.Rngs(0))
  jaxpr = str(jax.make_jaxpr(ours)(inputs))
  assert 'custom_vjp' not in jaxpr and 'platform_index' not in jaxpr
  np.testing.assert_array_equal(ours(inputs), flax_layer(inputs))
  ours = matmul.LinearGeneral((4, 4), (3, 8), axis=(-2, -1), rngs=nnx.Rngs(0))
  flax_layer = nnx.LinearGeneral((4, 4), (3, 8), axis=(-2, -1), rngs=nnx.Rngs(0))
  grid = inputs.reshape(2, 5, 4, 4)
  np.testing.assert_array_equal(ours(grid), flax_layer(grid))
  with pytest.raises(ValueError, match='last axes only'):
    matmul.LinearGeneral(5, 3, axis=-2, rngs=nnx.Rngs(0))(inputs)


def _dot_operand_dtypes(compiled_text: str) -> list[tuple[str, str]]:
  """(lhs, rhs) element types of every dot in XLA's optimised HLO."""
  types = dict(re.findall(r'%(\S+) = (\w+)\[', compiled_text))
  types.update(re.findall(r'%(\S+): (\w+)\[', compiled_text))  # a fused computation's parameters
  return [
    (types[lhs], types[rhs]) for lhs, rhs in re.findall(r' dot\(%([^,\s]+), %([^)\s]+)\)', compiled_text)
  ]


@pytest.mark.parametrize('layer', ['mlp', 'attention'])
def test_on_a_cpu_every_matmul_of_a_bfloat16_layers_step_takes_bfloat16_operands(layer, monkeypatch):
  """The point of the module: XLA converts no operand of the forward's or the gradients' matmuls to
  float32, as it does for Flax's layers (the reference: a float32 matmul appears)."""
  x = jax.random.normal(jax.random.key(1), (4, 32, 64))
  if layer == 'mlp':
    module = Mlp(64, 256, BlockOptions(dtype=jnp.bfloat16), rngs=nnx.Rngs(0))
  else:  # the q/k/v and output projections; the scores' batched matmuls are no layer's
    module = MultiHeadAttention(4, 64, dtype=jnp.bfloat16, fused_kernel=False, rngs=nnx.Rngs(0))
  graph, params = nnx.split(module)

  def dots():
    def loss(params, x):
      output = nnx.merge(graph, params)(x)
      output = output[0] if isinstance(output, tuple) else output  # attention: (output, weights)
      return jnp.sum(output.astype(jnp.float32) ** 2)

    return _dot_operand_dtypes(jax.jit(jax.grad(loss)).lower(params, x).compile().as_text())

  ours = dots()
  # two layers: the product, the weight's and the bias's gradients, and the second's input gradient
  assert sum(pair == ('bf16', 'bf16') for pair in ours) >= 7, ours
  if layer == 'mlp':
    assert set(ours) == {('bf16', 'bf16')}, ours
  monkeypatch.setattr(matmul.lax, 'platform_dependent', lambda *args, default, **_: default(*args))
  assert ('f32', 'f32') in dots(), 'XLA now multiplies bfloat16 layers natively: attention/matmul.py can go'


def test_a_step_lowered_for_a_gpu_or_tpu_is_flaxs():
  """The rows and their written-out transpose are lowered for a CPU only (``lax.platform_dependent``),
  also when a CPU host compiles for a TPU slice."""
  inputs, kernel, bias = _operands((2, 5, 16), (16, 24), 1, jnp.bfloat16)
  step = jax.jit(jax.grad(lambda *args: jnp.sum(matmul.dense(*args).astype(jnp.float32)), (0, 1, 2)))
  lowered = {
    platform: step.trace(inputs, kernel, bias).lower(lowering_platforms=(platform,)).as_text()
    for platform in ('cpu', 'cuda', 'tpu')
  }
  assert 'optimization_barrier' in lowered['cpu']
  assert 'optimization_barrier' not in lowered['cuda'] and 'optimization_barrier' not in lowered['tpu']
