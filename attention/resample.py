"""Resampling learned positional tables to another patch grid (fine-tuning at another resolution).

Grids may be non-square; prefix tokens (a class token) are kept as they are. Methods:

- ``bilinear``, ``bicubic`` (the default is ``bilinear``): ``jax.image.resize``, which samples at
  pixel centres (half-pixel offsets) and, when shrinking, antialiases (widens its kernel by the
  shrink factor, so every old position contributes to the new ones).
- ``scipy_zoom``: ``scipy.ndimage.zoom(order=1)``, the resize of the original ViT code
  (google-research/vision_transformer) and of big_vision: linear interpolation with the corner
  positions kept at the corners, and no antialiasing when shrinking. Computed on the host, so not
  inside ``jax.jit``.
- ``torch_bicubic``: PyTorch's ``F.interpolate(mode='bicubic', align_corners=False)``, what
  transformers' ViT and DINOv2 ``interpolate_pos_encoding`` call: cubic convolution with
  ``a = -0.75`` over the 4 nearest positions, indices clamped at the border, no antialiasing.
- ``torch_bicubic_aa``: the same with ``antialias=True``, what timm's ``resample_abs_pos_embed``
  calls by default: Pillow's filter, cubic with ``a = -0.5``, widened by the shrink factor when
  shrinking, its weights renormalised where it runs past the border.

The two PyTorch methods are separable: one weight matrix per axis (``torch_bicubic_weights``),
written from PyTorch's ``UpSampleKernel.cpp`` (``HelperInterpCubic``).

Growing a grid, the two linear methods differ only in where they place the samples; shrinking it,
they also differ in antialiasing (``tests/test_positional.py`` shows both).
"""

import jax
import jax.numpy as jnp
import numpy as np

RESAMPLE_METHODS = ('bilinear', 'bicubic', 'scipy_zoom', 'torch_bicubic', 'torch_bicubic_aa')
#: the method each weights source's own library resamples with (timm: ``resample_abs_pos_embed``;
#: transformers: ``interpolate_pos_encoding``)
SOURCE_RESAMPLE = {'timm': 'torch_bicubic_aa', 'transformers': 'torch_bicubic'}
_CUBIC_A = {False: -0.75, True: -0.5}  # PyTorch: -0.75 as OpenCV, -0.5 with antialias as Pillow


def _check_method(method: str) -> None:
  if method not in RESAMPLE_METHODS:
    raise ValueError(f'Unknown resampling method {method!r}; allowed values: {", ".join(RESAMPLE_METHODS)}.')


def _cubic(x: np.ndarray, a: float) -> np.ndarray:
  """The cubic convolution kernel (Keys 1981) with parameter ``a``, zero beyond 2."""
  x = np.abs(x)
  near = ((a + 2) * x - (a + 3)) * x * x + 1
  far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
  return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def torch_bicubic_weights(old: int, new: int, antialias: bool = False) -> np.ndarray:
  """float64 ``[new, old]``: row ``i`` holds the weights of the old positions in new position ``i``
  of PyTorch's bicubic resize (``align_corners=False``, the sizes given, not a scale factor)."""
  scale = old / new
  weights = np.zeros((new, old))
  centres = scale * (np.arange(new) + 0.5)  # in old positions, from the first one's left edge
  if antialias:
    stretch = max(scale, 1.0)
    support = 2.0 * stretch
    for i, centre in enumerate(centres):
      low = max(int(centre - support + 0.5), 0)
      high = min(int(centre + support + 0.5), old)
      taps = np.arange(low, high)
      row = _cubic((taps + 0.5 - centre) / stretch, _CUBIC_A[True])
      weights[i, taps] = row / row.sum() if row.sum() else 0.0
    return weights
  source = centres - 0.5
  floor = np.minimum(np.floor(source), old - 1).astype(int)
  t = np.clip(source - floor, 0.0, 1.0)
  for j in range(4):  # the taps floor - 1 .. floor + 2, clamped to the grid
    taps = np.clip(floor - 1 + j, 0, old - 1)
    np.add.at(weights, (np.arange(new), taps), _cubic(t + 1 - j, _CUBIC_A[False]))
  return weights


def _torch_bicubic(array: jax.Array, shape: tuple[int, ...], antialias: bool) -> jax.Array:
  out = array.astype(jnp.float32)
  for axis, (old, new) in enumerate(zip(array.shape[:-1], shape[:-1])):
    if old != new:
      matrix = jnp.asarray(torch_bicubic_weights(old, new, antialias), jnp.float32)
      out = jnp.moveaxis(jnp.tensordot(matrix, jnp.moveaxis(out, axis, 0), axes=1), 0, axis)
  return out


def _resize(array: jax.Array, shape: tuple[int, ...], method: str) -> jax.Array:
  """``array`` resized to ``shape`` (the last axis, the features, keeps its size) in float32."""
  if method.startswith('torch_bicubic'):
    return _torch_bicubic(array, shape, antialias=method == 'torch_bicubic_aa')
  if method == 'scipy_zoom':
    import scipy.ndimage  # pylint: disable=g-import-not-at-top  (only when resampling this way)

    values = np.asarray(array, np.float32)
    zoomed = scipy.ndimage.zoom(values, [new / old for new, old in zip(shape, values.shape)], order=1)
    return jnp.asarray(zoomed.reshape(shape))
  return jax.image.resize(array.astype(jnp.float32), shape, method=method)


def resample_grid_table(
  table: jax.Array,
  old_grid: tuple[int, int],
  new_grid: tuple[int, int],
  num_prefix_tokens: int = 0,
  method: str = 'bilinear',
) -> jax.Array:
  """``[prefix + old_h * old_w, dim]`` (row-major patches) -> ``[prefix + new_h * new_w, dim]``."""
  _check_method(method)
  old_h, old_w = old_grid
  new_h, new_w = new_grid
  expected = num_prefix_tokens + old_h * old_w
  if table.shape[0] != expected:
    raise ValueError(
      f'Table has {table.shape[0]} rows; a {old_h}x{old_w} grid with '
      f'{num_prefix_tokens} prefix tokens needs {expected}.'
    )
  prefix, patches = table[:num_prefix_tokens], table[num_prefix_tokens:]
  if tuple(old_grid) != tuple(new_grid):
    grid = _resize(patches.reshape(old_h, old_w, -1), (new_h, new_w, patches.shape[-1]), method)
    patches = grid.reshape(new_h * new_w, -1).astype(table.dtype)
  return jnp.concatenate([prefix, patches], axis=0)


def resample_axis_table(table: jax.Array, new_length: int, method: str = 'bilinear') -> jax.Array:
  """A per-axis table (``learn2d``'s row or column table) ``[length, dim]`` -> ``[new_length, dim]``."""
  _check_method(method)
  if table.shape[0] == new_length:
    return table
  return _resize(table, (new_length, table.shape[1]), method).astype(table.dtype)
