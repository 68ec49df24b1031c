"""The blocks' dense layers: ``Linear`` and ``LinearGeneral``, Flax's with the same parameters, whose
matmul and bias (``dense``) a bfloat16 layer on a CPU gives to XLA's bfloat16 matmul kernels, and
which compute what Flax's compute everywhere else.

Why layers of our own (jaxlib 0.10.2; ``docs/performance.md``, "bfloat16 on a CPU"): XLA:CPU
multiplies bfloat16 matrices in YNNPACK's bfloat16 kernels only when the product is asked for in
float32, both operands are stored row by row, and the left one is contracted on its last axis;
and it sums a bfloat16 array that it first converts to float32 in a tree of small windows, not in
YNNPACK. A bfloat16 layer as JAX writes it meets none of that: it asks for a bfloat16 product, the
gradient of its weight contracts the rows of both operands, and the gradient of its bias is such a
sum. XLA then converts every matmul's operands to float32, which makes a bfloat16 step slower than
a float32 one. Here a bfloat16 layer is a matmul of 2-D rows plus its bias with a gradient of its
own (``jax.custom_vjp``): each of its matmuls asks for a float32 product of bfloat16 operands,
rounded to bfloat16 as JAX's own would be; the weight's gradient multiplies the input's transpose,
written out row by row (an ``optimization_barrier`` on its flattened copy keeps XLA from folding the
transpose back into the matmul); and the bias's gradient is a matmul too, a row of ones times the
output's gradient. Every product sums in float32 as before.

Only on one CPU device, and only when lowered for a CPU. With several devices (host devices under
fsdp) XLA's partitioner gathers more for these rows than for Flax's layers
(``tests/test_fsdp_layer_gather.py`` bounds what a step may gather). ``jax.lax.platform_dependent`` lowers Flax's computation for
every other platform, so a step compiled for a GPU or TPU (also one compiled on a CPU host for a
TPU slice, ``benchmarks/compile_for.py``) is the one it always was: their compilers multiply
bfloat16 natively, and the barrier would only cost them a copy. float32 layers compute exactly
what Flax's layers compute.
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

_ROWS_BY_COLUMNS = (((1,), (0,)), ((), ()))


def _product(a, b, dimension_numbers=_ROWS_BY_COLUMNS):
  """``a`` times ``b``, summed in float32 and rounded to bfloat16."""
  return lax.dot_general(a, b, dimension_numbers, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def _written_transpose(x):
  """``x.T`` stored row by row (XLA would otherwise make the transpose a change of layout)."""
  rows, columns = x.shape
  return lax.optimization_barrier(x.T.reshape(-1)).reshape(columns, rows)


@jax.custom_vjp
def _rows_affine(x, w, b):
  """``x @ w + b`` for 2-D bfloat16 ``x`` ``[rows, k]``, ``w`` ``[k, columns]`` and ``b`` ``[columns]``
  (``None``: no bias)."""
  product = _product(x, w)
  return product if b is None else product + b


def _rows_affine_forward(x, w, b):
  return _rows_affine(x, w, b), (x, w, b)


def _rows_affine_backward(saved, grad):
  x, w, b = saved
  grad = grad.astype(jnp.bfloat16)
  grad_b = None
  if b is not None:  # rows of ones @ grad: two, since XLA would store one row as a column
    grad_b = _product(lax.optimization_barrier(jnp.ones((2, grad.shape[0]), jnp.bfloat16)), grad)[0]
  grad_x = _product(grad, w, (((1,), (1,)), ((), ())))  # grad @ w.T, w read as stored
  return grad_x, _product(_written_transpose(x), grad), grad_b


_rows_affine.defvjp(_rows_affine_forward, _rows_affine_backward)


def _as_rows(inputs, kernel, bias, count: int):
  """``dense`` as a matmul of 2-D rows (above)."""
  kept, out = inputs.shape[: inputs.ndim - count], kernel.shape[count:]
  inner = math.prod(kernel.shape[:count])
  rows, weights = inputs.reshape(math.prod(kept), inner), kernel.reshape(inner, math.prod(out))
  flat_bias = None if bias is None else bias.reshape(-1)
  return _rows_affine(rows, weights, flat_bias).reshape(*kept, *out)


def dense(inputs, kernel, bias, count: int = 1):
  """``inputs`` contracted on their last ``count`` axes with ``kernel``'s first ``count``, plus ``bias``
  (``None``: none) of ``kernel``'s other axes: ``jax.lax.dot_general``, and a matmul of 2-D rows
  where it is lowered for one CPU device with bfloat16 operands."""
  numbers = ((tuple(range(inputs.ndim - count, inputs.ndim)), tuple(range(count))), ((), ()))

  def as_lax(inputs, kernel, bias):
    product = lax.dot_general(inputs, kernel, numbers)
    return product if bias is None else product + bias

  operands = (inputs, kernel) if bias is None else (inputs, kernel, bias)
  if any(operand.dtype != jnp.bfloat16 for operand in operands) or jax.device_count() > 1:
    return as_lax(inputs, kernel, bias)
  return lax.platform_dependent(
    inputs, kernel, bias, cpu=lambda *args: _as_rows(*args, count), default=as_lax
  )


class Linear(nnx.Linear):
  """``nnx.Linear`` (the same parameters and values) computed by ``dense``."""

  def __call__(self, inputs):
    kernel, bias = self.kernel[...], (None if self.bias is None else self.bias[...])
    inputs, kernel, bias = self.promote_dtype((inputs, kernel, bias), dtype=self.dtype)
    return dense(inputs, kernel, bias)


class LinearGeneral(nnx.LinearGeneral):
  """``nnx.LinearGeneral`` contracting the inputs' last axes (``axis``), without batch axes, computed
  by ``dense``."""

  def __call__(self, inputs):
    count = len(self.axis)
    trailing = tuple(range(inputs.ndim - count, inputs.ndim))
    if self.batch_axis or tuple(axis % inputs.ndim for axis in self.axis) != trailing:
      raise ValueError(
        f'LinearGeneral contracts the last axes only, without batch axes; got axis {self.axis}.'
      )
    kernel, bias = self.kernel[...], (None if self.bias is None else self.bias[...])
    inputs, kernel, bias = self.promote_dtype((inputs, kernel, bias), dtype=self.dtype)
    return dense(inputs, kernel, bias, count)
