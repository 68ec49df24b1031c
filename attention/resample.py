"""Resampling learned positional tables to another patch grid (fine-tuning at another resolution).

Grids may be non-square; prefix tokens (a class token) are kept as they are. Methods:

- ``bilinear``, ``bicubic`` (the default is ``bilinear``): ``jax.image.resize``, which samples at
  pixel centres (half-pixel offsets) and, when shrinking, antialiases (widens its kernel by the
  shrink factor, so every old position contributes to the new ones).
- ``scipy_zoom``: ``scipy.ndimage.zoom(order=1)``, the resize of the original ViT code
  (google-research/vision_transformer) and of big_vision: linear interpolation with the corner
  positions kept at the corners, and no antialiasing when shrinking. Computed on the host, so not
  inside ``jax.jit``.

Growing a grid, the two linear methods differ only in where they place the samples; shrinking it,
they also differ in antialiasing (``tests/test_positional.py`` shows both).
"""

import jax
import jax.numpy as jnp
import numpy as np

RESAMPLE_METHODS = ('bilinear', 'bicubic', 'scipy_zoom')


def _check_method(method: str) -> None:
  if method not in RESAMPLE_METHODS:
    raise ValueError(f'Unknown resampling method {method!r}; allowed values: {", ".join(RESAMPLE_METHODS)}.')


def _resize(array: jax.Array, shape: tuple[int, ...], method: str) -> jax.Array:
  """``array`` resized to ``shape`` (the last axis, the features, keeps its size) in float32."""
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
