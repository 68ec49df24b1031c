"""Positional encodings for 1-D sequences and 2-D patch grids, chosen by a short string.

Each kind is one class, registered under its name in ``KINDS`` when it is defined; every list of
kinds (``POSEMB_KINDS``, ``ADDITIVE_KINDS``, the video model's, the pictures') is derived from what
the classes say of themselves (``kinds``). Adding a kind is one subclass of ``PositionKind``.

Kinds (``POSEMB_KINDS``):
``none``        no position information (the model is permutation-equivariant)
``learn1d``     a learned table, one row per position (a grid is read in row-major order)
``learn2d``     a learned row table and a learned column table of width D/2 each,
                concatenated (ViT paper, appendix D.4); grids only
``sincos1d``    the fixed sinusoids of Vaswani et al.: PE[p, 2i] = sin(p / 10000^(2i/D)),
                PE[p, 2i+1] = cos(p / 10000^(2i/D))
``sincos2d``    ``sincos1d`` of the row index in the first D/2 features and of the column
                index in the last D/2; grids only. ``sincos2d_layout='big_vision'`` gives
                big_vision's table instead: ``[sin(x w), cos(x w), sin(y w), cos(y w)]``,
                x the column, y the row, ``w_i = 10000^(-i/(D/4-1))``
``relative``    a learned bias per head and per query-key offset j - i, added to the
                attention logits (offsets clipped to +-max_distance; ViT appendix D.4)
``relative2d``  the same with 2-D offsets (dy, dx) between patches; grids only
``rope``        rotary position embedding (Su et al.): queries and keys are rotated by
                an angle proportional to their position

Where additive encodings enter (``INJECTIONS``, the three columns of ViT Table 8):
``stem``                once, at the input of the first layer
``every_layer``         before every layer, each layer with its own table
``every_layer_shared``  before every layer, one table shared by all layers
``relative``, ``relative2d`` and ``rope`` act inside every attention layer; for them,
and for ``none``, only ``stem`` (the default placement) exists.

Prefix tokens (a class token) get no additive encoding and no 2-D relative bias.
"""

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

INJECTIONS = ('stem', 'every_layer', 'every_layer_shared')

_TABLE_INIT = nnx.initializers.normal(stddev=0.02)


def sincos_1d_table(length: int, dim: int, max_wavelength: float = 10_000.0) -> np.ndarray:
  """``[length, dim]`` fixed sinusoids, sin at even and cos at odd features (Vaswani et al.)."""
  if dim % 2:
    raise ValueError(f'sincos1d needs an even width, got {dim}.')
  position = np.arange(length, dtype=np.float64)[:, None]
  frequency = max_wavelength ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
  table = np.zeros((length, dim), np.float64)
  table[:, 0::2] = np.sin(position * frequency)
  table[:, 1::2] = np.cos(position * frequency)
  return table.astype(np.float32)


def sincos_2d_table(height: int, width: int, dim: int, max_wavelength: float = 10_000.0) -> np.ndarray:
  """``[height * width, dim]``: row sinusoids in the first D/2 features, column ones in the rest."""
  if dim % 4:
    raise ValueError(f'sincos2d needs a width divisible by 4, got {dim}.')
  rows = sincos_1d_table(height, dim // 2, max_wavelength)
  cols = sincos_1d_table(width, dim // 2, max_wavelength)
  return np.concatenate([np.repeat(rows, width, axis=0), np.tile(cols, (height, 1))], axis=1)


def big_vision_sincos_2d(height: int, width: int, dim: int, temperature: float = 10_000.0) -> np.ndarray:
  """``[height * width, dim]``: big_vision's 2-D sin-cos table (x is the column, y the row)."""
  if dim % 4:
    raise ValueError(f'sincos2d needs a width divisible by 4, got {dim}.')
  omega = 1.0 / temperature ** (np.arange(dim // 4) / max(dim // 4 - 1, 1))
  y, x = np.mgrid[:height, :width]
  x_angle, y_angle = np.outer(x.ravel(), omega), np.outer(y.ravel(), omega)
  table = np.concatenate([np.sin(x_angle), np.cos(x_angle), np.sin(y_angle), np.cos(y_angle)], axis=1)
  return table.astype(np.float32)


SINCOS2D_TABLES = {'rows_cols': sincos_2d_table, 'big_vision': big_vision_sincos_2d}
SINCOS2D_LAYOUTS = tuple(SINCOS2D_TABLES)


def apply_rope(x: jax.Array, positions: jax.Array, max_wavelength: float = 10_000.0) -> jax.Array:
  """Rotates ``x`` (``[batch, length, heads, head_dim]``) by its ``positions`` (``[length]`` or ``[batch, length]``).

  Feature ``i`` of the first half and feature ``i`` of the second half form a pair
  rotated by ``position * max_wavelength^(-2i/head_dim)``.
  """
  head_dim = x.shape[-1]
  if head_dim % 2:
    raise ValueError(f'rope needs an even head dimension, got {head_dim}.')
  half = head_dim // 2
  frequency = max_wavelength ** (-jnp.arange(half, dtype=jnp.float32) * 2 / head_dim)
  positions = jnp.asarray(positions, jnp.float32)
  if positions.ndim == 1:
    positions = positions[None]
  angle = positions[:, :, None, None] * frequency  # [batch, length, 1, half]
  cos, sin = jnp.cos(angle), jnp.sin(angle)
  first, second = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
  rotated = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
  return rotated.astype(x.dtype)


@dataclasses.dataclass(frozen=True)
class Rotary:
  """What an attention layer is handed when its stack uses RoPE: rotates queries and keys.

  It holds no parameters (a hashable, static part of the model's structure), so the
  positional encoding of a stack can pass it down to every block and attention layer.
  """

  max_wavelength: float = 10_000.0

  def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    return apply_rope(x, positions, self.max_wavelength)


@dataclasses.dataclass(frozen=True)
class Tokens:
  """What a position kind is built for: the tokens' width and heads, and where they lie.

  ``length`` positions after ``num_prefix_tokens`` prefix tokens, laid out on ``grid`` (rows,
  columns; row-major) for patch grids; ``max_distance`` clips relative offsets (``None``: the
  longest there is); ``sincos2d_layout`` chooses the ``sincos2d`` table (``SINCOS2D_LAYOUTS``).
  """

  dim: int
  length: int
  num_heads: int = 1
  grid: tuple[int, int] | None = None
  num_prefix_tokens: int = 0
  max_distance: int | None = None
  sincos2d_layout: str = 'rows_cols'
  param_dtype: Any = jnp.float32


#: every kind by name, in the order the classes are defined
KINDS: dict[str, type['PositionKind']] = {}


class PositionKind(nnx.Module):
  """One kind of positional encoding, built with ``(tokens: Tokens, *, rngs)``.

  A subclass names itself (``name``), which registers it in ``KINDS``, and says how it acts: an
  additive table (``adds_table``; called with no arguments it returns the ``[positions, dim]``
  table), a bias on every layer's attention logits (``biases_attention``; called with
  ``(q_len, k_len, q_offset)`` it returns ``[1, heads, q_len, k_len]``), a rotation of queries and
  keys (``rotary``), or none of these. ``learned``: its table has trained parameters;
  ``needs_grid``: it exists for patch grids only.
  """

  name: ClassVar[str]
  adds_table: ClassVar[bool] = False
  biases_attention: ClassVar[bool] = False
  rotary: ClassVar[Rotary | None] = None
  learned: ClassVar[bool] = False
  needs_grid: ClassVar[bool] = False

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    KINDS[cls.name] = cls

  def __call__(self) -> jax.Array:
    """A table kind's table (its ``table`` unless it says otherwise)."""
    return self.table[...]


class NoPositions(PositionKind):
  name = 'none'


class Learn1D(PositionKind):
  name = 'learn1d'
  adds_table = learned = True

  def __init__(self, tokens: Tokens, *, rngs: nnx.Rngs):
    self.table = nnx.Param(_TABLE_INIT(rngs.params(), (tokens.length, tokens.dim), tokens.param_dtype))


class Learn2D(PositionKind):
  name = 'learn2d'
  adds_table = learned = needs_grid = True

  def __init__(self, tokens: Tokens, *, rngs: nnx.Rngs):
    if tokens.dim % 2:
      raise ValueError(f'learn2d needs an even width, got {tokens.dim}.')
    (height, width), half = tokens.grid, tokens.dim // 2
    self.row_table = nnx.Param(_TABLE_INIT(rngs.params(), (height, half), tokens.param_dtype))
    self.column_table = nnx.Param(_TABLE_INIT(rngs.params(), (width, half), tokens.param_dtype))

  def __call__(self) -> jax.Array:
    rows, columns = self.row_table[...], self.column_table[...]
    height, width = rows.shape[0], columns.shape[0]
    return jnp.concatenate([jnp.repeat(rows, width, axis=0), jnp.tile(columns, (height, 1))], axis=1)


class Sincos1D(PositionKind):
  name = 'sincos1d'
  adds_table = True

  def __init__(self, tokens: Tokens, *, rngs: nnx.Rngs):
    del rngs
    self.table = nnx.Variable(jnp.asarray(sincos_1d_table(tokens.length, tokens.dim)))


class Sincos2D(PositionKind):
  name = 'sincos2d'
  adds_table = needs_grid = True

  def __init__(self, tokens: Tokens, *, rngs: nnx.Rngs):
    del rngs
    if tokens.sincos2d_layout not in SINCOS2D_TABLES:
      raise ValueError(
        f'Unknown sincos2d_layout {tokens.sincos2d_layout!r}; allowed values: {", ".join(SINCOS2D_LAYOUTS)}.'
      )
    make_table = SINCOS2D_TABLES[tokens.sincos2d_layout]
    self.table = nnx.Variable(jnp.asarray(make_table(*tokens.grid, tokens.dim)))


class RelativePositionBias(PositionKind):
  """A learned bias per head and per 1-D offset ``key - query``, clipped to ``+-max_distance``."""

  name = 'relative'
  biases_attention = learned = True

  def __init__(self, tokens: Tokens, *, rngs: nnx.Rngs):
    self.max_distance = tokens.max_distance or (tokens.num_prefix_tokens + tokens.length - 1)
    shape = (2 * self.max_distance + 1, tokens.num_heads)
    self.table = nnx.Param(_TABLE_INIT(rngs.params(), shape, tokens.param_dtype))

  def __call__(self, q_len: int, k_len: int, q_offset: int | jax.Array = 0) -> jax.Array:
    """``[1, heads, q_len, k_len]`` for queries at ``q_offset + i`` and keys at ``j``."""
    offset = jnp.arange(k_len)[None, :] - (q_offset + jnp.arange(q_len)[:, None])
    index = jnp.clip(offset, -self.max_distance, self.max_distance) + self.max_distance
    return jnp.transpose(self.table[...][index], (2, 0, 1))[None]


class RelativePositionBias2D(PositionKind):
  """A learned bias per head and per 2-D offset ``(dy, dx)`` between the patches of a grid."""

  name = 'relative2d'
  biases_attention = learned = needs_grid = True

  def __init__(self, tokens: Tokens, *, rngs: nnx.Rngs):
    self.grid = tuple(tokens.grid)
    self.num_prefix_tokens = tokens.num_prefix_tokens
    height, width = self.grid
    shape = ((2 * height - 1) * (2 * width - 1), tokens.num_heads)
    self.table = nnx.Param(_TABLE_INIT(rngs.params(), shape, tokens.param_dtype))

  def __call__(self, q_len: int, k_len: int, q_offset: int | jax.Array = 0) -> jax.Array:
    height, width = self.grid
    num_tokens = self.num_prefix_tokens + height * width
    if q_len != num_tokens or k_len != num_tokens:
      raise ValueError(f'relative2d was built for {num_tokens} tokens, got queries {q_len} and keys {k_len}.')
    rows, cols = np.divmod(np.arange(height * width), width)
    dy = rows[None, :] - rows[:, None] + height - 1
    dx = cols[None, :] - cols[:, None] + width - 1
    patch_bias = self.table[...][dy * (2 * width - 1) + dx]  # [patches, patches, heads]
    pad = self.num_prefix_tokens
    bias = jnp.pad(patch_bias, ((pad, 0), (pad, 0), (0, 0)))
    return jnp.transpose(bias, (2, 0, 1))[None]


class Rope(PositionKind):
  name = 'rope'
  rotary = Rotary()


def kinds(**wanted: bool) -> tuple[str, ...]:
  """The names of the kinds whose properties have the ``wanted`` values (``kinds(adds_table=True)``)."""
  return tuple(
    name for name, kind in KINDS.items() if all(getattr(kind, key) == value for key, value in wanted.items())
  )


POSEMB_KINDS = tuple(KINDS)
ADDITIVE_KINDS = kinds(adds_table=True)
GRID_ONLY_KINDS = kinds(needs_grid=True)


class NoSuchCombination(ValueError):
  """Options that each exist but not together (the N/A cells of ViT Table 8)."""


def check_posemb(kind: str, injection: str = 'stem', grid: tuple[int, int] | None = None) -> None:
  """Raises ``ValueError`` for an unknown kind or injection, ``NoSuchCombination`` for a combination
  that does not exist."""
  if kind not in KINDS:
    raise ValueError(f'Unknown positional encoding {kind!r}; allowed values: {", ".join(KINDS)}.')
  if injection not in INJECTIONS:
    raise ValueError(
      f'Unknown positional-encoding injection {injection!r}; allowed values: {", ".join(INJECTIONS)}.'
    )
  if not combination_exists(kind, injection):
    raise NoSuchCombination(
      f'Positional encoding {kind!r} has no {injection!r} injection: it is not added to the tokens '
      "(use injection 'stem', its default placement)."
    )
  if KINDS[kind].needs_grid and grid is None:
    raise ValueError(f'Positional encoding {kind!r} needs a 2-D patch grid, but the input is a 1-D sequence.')


def combination_exists(kind: str, injection: str) -> bool:
  """Whether ``(kind, injection)`` is a real configuration (Table 8 writes N/A otherwise)."""
  return injection == 'stem' or KINDS[kind].adds_table


class PositionalEncoding(nnx.Module):
  """Everything one Transformer stack needs to know about positions.

  ``table_before(layer)`` is the additive table the injection adds before ``layer`` (or ``None``)
  and ``add_table`` adds it to the tokens; ``attention_bias(layer, ...)`` returns the relative bias
  for that layer's attention, or ``None``; ``rotary`` is the ``Rotary`` that the stack hands its
  attention layers (``None`` unless the kind rotates). Give ``grid`` for patch grids (row-major
  tokens after the prefix tokens) and ``max_length`` for 1-D sequences; ``sincos2d_layout``
  chooses the ``sincos2d`` table.
  """

  def __init__(
    self,
    kind: str,
    injection: str = 'stem',
    *,
    dim: int,
    num_heads: int,
    num_layers: int,
    max_length: int | None = None,
    grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 0,
    max_distance: int | None = None,
    sincos2d_layout: str = 'rows_cols',
    param_dtype=jnp.float32,
    rngs: nnx.Rngs,
  ):
    check_posemb(kind, injection, grid)
    if grid is None and max_length is None:
      raise ValueError('PositionalEncoding needs max_length (1-D sequences) or grid (patch grids).')
    self.kind = kind
    self.injection = injection
    self.num_prefix_tokens = num_prefix_tokens
    tokens = Tokens(
      dim=dim,
      length=grid[0] * grid[1] if grid is not None else max_length,
      num_heads=num_heads,
      grid=grid,
      num_prefix_tokens=num_prefix_tokens,
      max_distance=max_distance,
      sincos2d_layout=sincos2d_layout,
      param_dtype=param_dtype,
    )
    make = KINDS[kind]
    num_tables = (num_layers if injection == 'every_layer' else 1) if make.adds_table else 0
    num_biases = num_layers if make.biases_attention else 0
    self.tables = nnx.List([make(tokens, rngs=rngs) for _ in range(num_tables)]) if num_tables else None
    self.biases = nnx.List([make(tokens, rngs=rngs) for _ in range(num_biases)]) if num_biases else None
    self.rotary = make.rotary

  def table_before(self, layer: int) -> jax.Array | None:
    """The table the injection adds before ``layer`` (the stem's is layer 0's), or ``None``."""
    if self.tables is None or (self.injection == 'stem' and layer != 0):
      return None
    return self.tables[layer if self.injection == 'every_layer' else 0]()

  def add_table(self, x: jax.Array, table: jax.Array | None, positions: jax.Array | None = None) -> jax.Array:
    """``x`` plus ``table`` (from ``table_before``) on its tokens after the prefix tokens.

    ``positions`` (``[length]`` or ``[batch, length]``) selects table rows for 1-D sequences
    decoded piece by piece or packed; by default the tokens are at ``0 .. length-1``.
    """
    if table is None:
      return x
    prefix, tokens = x[:, : self.num_prefix_tokens], x[:, self.num_prefix_tokens :]
    if positions is None:
      too_long = tokens.shape[1] > table.shape[0]
      if too_long or (tokens.shape[1] != table.shape[0] and KINDS[self.kind].needs_grid):
        raise ValueError(
          f'{self.kind} table has {table.shape[0]} positions, input has {tokens.shape[1]} tokens.'
        )
      encoding = table[None, : tokens.shape[1]]
    else:
      encoding = table[jnp.asarray(positions)]
      if encoding.ndim == 2:
        encoding = encoding[None]
    return jnp.concatenate([prefix, tokens + encoding.astype(x.dtype)], axis=1)

  def attention_bias(
    self, layer: int, q_len: int, k_len: int, q_offset: int | jax.Array = 0
  ) -> jax.Array | None:
    """``[1, heads, q_len, k_len]`` relative bias for ``layer``, or ``None``."""
    if self.biases is None:
      return None
    return self.biases[layer](q_len, k_len, q_offset)
