"""Resampling learned positional tables to another patch grid (fine-tuning at another resolution).

Grids may be non-square; prefix tokens (a class token) are kept as they are.
"""

import jax
import jax.numpy as jnp

RESAMPLE_METHODS = ('bilinear', 'bicubic')


def _check_method(method: str) -> None:
  if method not in RESAMPLE_METHODS:
    raise ValueError(f'Unknown resampling method {method!r}; allowed values: {", ".join(RESAMPLE_METHODS)}.')


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
    grid = patches.reshape(old_h, old_w, -1)
    grid = jax.image.resize(grid.astype(jnp.float32), (new_h, new_w, grid.shape[-1]), method=method)
    patches = grid.reshape(new_h * new_w, -1).astype(table.dtype)
  return jnp.concatenate([prefix, patches], axis=0)


def resample_axis_table(table: jax.Array, new_length: int, method: str = 'bilinear') -> jax.Array:
  """A per-axis table (``learn2d``'s row or column table) ``[length, dim]`` -> ``[new_length, dim]``."""
  _check_method(method)
  if table.shape[0] == new_length:
    return table
  resized = jax.image.resize(table.astype(jnp.float32), (new_length, table.shape[1]), method=method)
  return resized.astype(table.dtype)
