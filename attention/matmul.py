"""The matmul of the blocks' dense layers: ``dot_general``, which gives a bfloat16 layer on a CPU
to XLA's bfloat16 matmul kernels, and is ``jax.lax.dot_general`` everywhere else.

Why a matmul of our own (jaxlib 0.10.2; ``docs/performance.md``, "bfloat16 on a CPU"): XLA:CPU
multiplies bfloat16 matrices in YNNPACK's bfloat16 kernels only when the product is asked for in
float32, both operands are stored row by row, and the left one is contracted on its last axis.
A bfloat16 layer as JAX writes it meets none of that: it asks for a bfloat16 product, and the
gradient of its weight contracts the rows of both operands. XLA then converts every operand to
float32, which makes a bfloat16 step slower than a float32 one. Here, for bfloat16 operands
contracted on the left's last axes and the right's first axes (what ``nnx.Linear`` and
``nnx.LinearGeneral`` do), the layer is a matmul of 2-D rows with a gradient of its own
(``jax.custom_vjp``): each of its three matmuls asks for a float32 product of bfloat16 operands,
rounded to bfloat16 as JAX's own would be, and the weight's gradient multiplies the input's
transpose, written out row by row (an ``optimization_barrier`` on its flattened copy keeps XLA
from folding the transpose back into the matmul). Every product sums in float32 as before.

Only on a CPU: ``jax.lax.platform_dependent`` lowers this path for a CPU and ``jax.lax.dot_general``
for every other platform, so a step compiled for a GPU or TPU (also one compiled on a CPU host for a
TPU slice, ``benchmarks/compile_for.py``) is the one it always was: their compilers multiply
bfloat16 natively, and the barrier would only cost them a copy. Anything else (float32, batch
axes, other contractions, a requested output dtype or sharding) goes to ``jax.lax.dot_general``
unchanged, so float32 models compute exactly what they did.
"""

import math

import jax
import jax.numpy as jnp
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
def _rows_matmul(x, w):
  """``x @ w`` for 2-D bfloat16 ``x`` ``[rows, k]`` and ``w`` ``[k, columns]``."""
  return _product(x, w)


def _rows_matmul_forward(x, w):
  return _product(x, w), (x, w)


def _rows_matmul_backward(saved, grad):
  x, w = saved
  grad = grad.astype(jnp.bfloat16)
  grad_x = _product(grad, w, (((1,), (1,)), ((), ())))  # grad @ w.T, w read as stored
  grad_w = _product(_written_transpose(x), grad)
  return grad_x, grad_w


_rows_matmul.defvjp(_rows_matmul_forward, _rows_matmul_backward)


def _takes_rows_matmul(lhs, rhs, dimension_numbers, preferred_element_type, out_sharding) -> bool:
  (lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch) = dimension_numbers
  count = len(lhs_contracting)
  return (
    lhs.dtype == jnp.bfloat16
    and rhs.dtype == jnp.bfloat16
    and preferred_element_type in (None, jnp.bfloat16)
    and out_sharding is None
    and not lhs_batch
    and not rhs_batch
    and 0 < count <= min(lhs.ndim, rhs.ndim)
    and tuple(lhs_contracting) == tuple(range(lhs.ndim - count, lhs.ndim))
    and tuple(rhs_contracting) == tuple(range(count))
  )


def _as_rows_matmul(lhs, rhs, count: int):
  """``lhs`` contracted on its last ``count`` axes with ``rhs``'s first ``count``, as 2-D rows."""
  kept_lhs, kept_rhs = lhs.shape[: lhs.ndim - count], rhs.shape[count:]
  inner = math.prod(rhs.shape[:count])
  product = _rows_matmul(lhs.reshape(math.prod(kept_lhs), inner), rhs.reshape(inner, math.prod(kept_rhs)))
  return product.reshape(*kept_lhs, *kept_rhs)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None):
  """``jax.lax.dot_general``; a bfloat16 dense layer lowered for a CPU is a matmul of 2-D rows (above)."""

  def as_lax(lhs, rhs):
    return lax.dot_general(
      lhs,
      rhs,
      dimension_numbers,
      precision=precision,
      preferred_element_type=preferred_element_type,
      out_sharding=out_sharding,
    )

  if not _takes_rows_matmul(lhs, rhs, dimension_numbers, preferred_element_type, out_sharding):
    return as_lax(lhs, rhs)
  count = len(dimension_numbers[0][0])
  return lax.platform_dependent(lhs, rhs, cpu=lambda a, b: _as_rows_matmul(a, b, count), default=as_lax)
