"""Positional encodings, their injections, resampling, and the encoder and decoder blocks."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention import (
  INJECTIONS,
  POSEMB_KINDS,
  BlockOptions,
  DecoderBlock,
  Encoder,
  PositionalEncoding,
  causal_mask,
  combination_exists,
  resample_axis_table,
  resample_grid_table,
  sincos_1d_table,
  sincos_2d_table,
)
from attention.resample import RESAMPLE_METHODS
from attention.stacks import StackOptions

GRID = (3, 4)
FEATURES, HEADS = 16, 2


def test_sincos_1d_matches_closed_form():
  table = sincos_1d_table(11, 8)
  for pos, i in itertools.product(range(11), range(4)):
    angle = pos / 10000 ** (2 * i / 8)
    assert table[pos, 2 * i] == pytest.approx(np.sin(angle), abs=1e-6)
    assert table[pos, 2 * i + 1] == pytest.approx(np.cos(angle), abs=1e-6)


def test_sincos_2d_is_row_then_column_sinusoids():
  table = sincos_2d_table(*GRID, 16)
  rows, cols = sincos_1d_table(GRID[0], 8), sincos_1d_table(GRID[1], 8)
  for y, x in itertools.product(range(GRID[0]), range(GRID[1])):
    np.testing.assert_allclose(table[y * GRID[1] + x], np.concatenate([rows[y], cols[x]]))


def _encoder(posemb, injection='stem', grid=GRID, prefix=0, seed=0):
  length = grid[0] * grid[1] + prefix
  options = StackOptions(
    features=FEATURES, depth=2, num_heads=HEADS, mlp_features=32, posemb=posemb, posemb_injection=injection
  )
  return Encoder(
    options,
    grid=grid,
    max_length=length,
    num_prefix_tokens=prefix,
    rngs=nnx.Rngs(seed),
  )


def _tokens(length, seed=0):
  return jnp.asarray(np.random.default_rng(seed).normal(size=(2, length, FEATURES)).astype(np.float32))


def test_without_positions_the_encoder_is_permutation_equivariant():
  x = _tokens(12)
  permutation = np.random.default_rng(1).permutation(12)
  encoder = _encoder('none')
  out, _ = encoder(x)
  out_permuted, _ = encoder(x[:, permutation])
  np.testing.assert_allclose(out_permuted, out[:, permutation], atol=1e-5)


@pytest.mark.parametrize(
  'posemb,injection',
  [
    (kind, injection)
    for kind in POSEMB_KINDS
    for injection in INJECTIONS
    if kind != 'none' and combination_exists(kind, injection)
  ],
)
def test_every_positional_encoding_breaks_permutation_equivariance(posemb, injection):
  x = _tokens(12)
  permutation = np.random.default_rng(1).permutation(12)
  encoder = _encoder(posemb, injection)
  out, _ = encoder(x)
  out_permuted, _ = encoder(x[:, permutation])
  assert np.abs(np.asarray(out_permuted) - np.asarray(out)[:, permutation]).max() > 1e-3


def test_injections_have_the_expected_number_of_tables():
  def count(injection):
    encoding = PositionalEncoding(
      'learn1d', injection, dim=8, num_heads=2, num_layers=3, max_length=5, rngs=nnx.Rngs(0)
    )
    return len(jax.tree.leaves(nnx.state(encoding, nnx.Param)))

  assert (count('stem'), count('every_layer'), count('every_layer_shared')) == (1, 3, 1)


def test_shared_injection_adds_the_same_table_before_every_layer():
  encoding = PositionalEncoding(
    'learn1d', 'every_layer_shared', dim=8, num_heads=2, num_layers=3, max_length=5, rngs=nnx.Rngs(0)
  )
  np.testing.assert_array_equal(encoding.table_before(0), encoding.table_before(2))
  stem = PositionalEncoding(
    'learn1d', 'stem', dim=8, num_heads=2, num_layers=3, max_length=5, rngs=nnx.Rngs(0)
  )
  assert stem.table_before(2) is None


def test_prefix_tokens_get_no_additive_encoding():
  encoding = PositionalEncoding(
    'learn2d', dim=8, num_heads=2, num_layers=1, grid=GRID, num_prefix_tokens=1, rngs=nnx.Rngs(0)
  )
  x = jnp.zeros((1, 13, 8))
  out = encoding.add_table(x, encoding.table_before(0))
  np.testing.assert_array_equal(out[:, 0], 0.0)
  assert np.abs(np.asarray(out[:, 1:])).sum() > 0


def test_learn2d_is_row_table_and_column_table_concatenated():
  encoding = PositionalEncoding('learn2d', dim=8, num_heads=2, num_layers=1, grid=GRID, rngs=nnx.Rngs(0))
  table = encoding.tables[0]
  full = np.asarray(table())
  rows, cols = np.asarray(table.row_table[...]), np.asarray(table.column_table[...])
  assert rows.shape == (3, 4) and cols.shape == (4, 4)
  for y, x in itertools.product(range(3), range(4)):
    np.testing.assert_array_equal(full[y * 4 + x], np.concatenate([rows[y], cols[x]]))


def test_relative_bias_depends_only_on_the_offset():
  encoding = PositionalEncoding('relative', dim=8, num_heads=2, num_layers=1, max_length=6, rngs=nnx.Rngs(0))
  bias = np.asarray(encoding.attention_bias(0, 6, 6))[0]
  for i, j in itertools.product(range(5), range(5)):
    np.testing.assert_array_equal(bias[:, i, j], bias[:, i + 1, j + 1])
  assert not np.allclose(bias[:, 0, 1], bias[:, 1, 0])
  shifted = np.asarray(encoding.attention_bias(0, 1, 6, q_offset=3))[0]
  np.testing.assert_array_equal(shifted[:, 0], bias[:, 3])


def test_relative2d_bias_depends_only_on_the_2d_offset():
  encoding = PositionalEncoding(
    'relative2d', dim=8, num_heads=2, num_layers=1, grid=GRID, num_prefix_tokens=1, rngs=nnx.Rngs(0)
  )
  bias = np.asarray(encoding.attention_bias(0, 13, 13))[0]
  np.testing.assert_array_equal(bias[:, 0, :], 0.0)
  np.testing.assert_array_equal(bias[:, :, 0], 0.0)

  def token(y, x):
    return 1 + y * GRID[1] + x

  for (y1, x1), (y2, x2) in itertools.product(itertools.product(range(2), range(3)), repeat=2):
    np.testing.assert_array_equal(
      bias[:, token(y1, x1), token(y2, x2)], bias[:, token(y1 + 1, x1 + 1), token(y2 + 1, x2 + 1)]
    )
  # (0,0)->(0,1) and (0,0)->(1,0) are different offsets, though one apart in 1-D order after a wrap.
  assert not np.allclose(bias[:, token(0, 3), token(1, 0)], bias[:, token(0, 0), token(0, 1)])


def test_rope_dot_products_depend_only_on_the_offset():
  from attention.positional import apply_rope

  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(1, 1, 1, 8)).astype(np.float32))
  k = jnp.asarray(rng.normal(size=(1, 1, 1, 8)).astype(np.float32))

  def score(pq, pk):
    return float(jnp.sum(apply_rope(q, jnp.array([pq])) * apply_rope(k, jnp.array([pk]))))

  assert score(3, 1) == pytest.approx(score(7, 5), abs=1e-4)
  assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-4)


@pytest.mark.parametrize(
  'call,message',
  [
    (
      lambda: PositionalEncoding('learned', dim=8, num_heads=2, num_layers=1, max_length=4, rngs=nnx.Rngs(0)),
      'allowed values: none, learn1d, learn2d, sincos1d, sincos2d, relative, relative2d, rope',
    ),
    (
      lambda: PositionalEncoding(
        'learn1d', 'input', dim=8, num_heads=2, num_layers=1, max_length=4, rngs=nnx.Rngs(0)
      ),
      'allowed values: stem, every_layer, every_layer_shared',
    ),
    (
      lambda: PositionalEncoding('learn2d', dim=8, num_heads=2, num_layers=1, max_length=4, rngs=nnx.Rngs(0)),
      'needs a 2-D patch grid',
    ),
    (
      lambda: PositionalEncoding(
        'relative', 'every_layer', dim=8, num_heads=2, num_layers=1, max_length=4, rngs=nnx.Rngs(0)
      ),
      "has no 'every_layer' injection",
    ),
    (
      lambda: resample_grid_table(jnp.zeros((4, 2)), (2, 2), (3, 3), method='nearest'),
      'allowed values: bilinear, bicubic',
    ),
  ],
)
def test_bad_options_raise_value_error(call, message):
  with pytest.raises(ValueError, match=message):
    call()


@pytest.mark.parametrize('method', RESAMPLE_METHODS)
@pytest.mark.parametrize('prefix', [0, 1])
def test_resampling(method, prefix):
  rng = np.random.default_rng(0)
  table = jnp.asarray(rng.normal(size=(prefix + 3 * 5, 6)).astype(np.float32))
  np.testing.assert_array_equal(resample_grid_table(table, (3, 5), (3, 5), prefix, method), table)
  constant = jnp.full((prefix + 3 * 5, 6), 0.7)
  for new_grid in [(6, 10), (2, 7), (4, 4)]:
    resized = resample_grid_table(constant, (3, 5), new_grid, prefix, method)
    assert resized.shape == (prefix + new_grid[0] * new_grid[1], 6)
    np.testing.assert_allclose(resized, 0.7, atol=1e-5)
  resized = resample_grid_table(table, (3, 5), (6, 10), prefix, method)
  np.testing.assert_array_equal(resized[:prefix], table[:prefix])
  axis = jnp.asarray(rng.normal(size=(5, 4)).astype(np.float32))
  np.testing.assert_array_equal(resample_axis_table(axis, 5, method), axis)
  np.testing.assert_allclose(resample_axis_table(jnp.full((5, 4), -0.3), 9, method), -0.3, atol=1e-5)


def test_scipy_zoom_is_the_original_vit_resize_and_the_default_antialiases_when_shrinking():
  import scipy.ndimage  # pylint: disable=g-import-not-at-top

  table = np.random.default_rng(1).normal(size=(1 + 5 * 7, 4)).astype(np.float32)
  grid = table[1:].reshape(5, 7, 4)
  zoomed = scipy.ndimage.zoom(grid, (3 / 5, 4 / 7, 1), order=1).reshape(3 * 4, 4)
  ours = np.asarray(resample_grid_table(jnp.asarray(table), (5, 7), (3, 4), 1, 'scipy_zoom'))
  np.testing.assert_allclose(ours[1:], zoomed, rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(ours[0], table[0])
  default = np.asarray(resample_grid_table(jnp.asarray(table), (5, 7), (3, 4), 1))
  plain = np.asarray(jax.image.resize(jnp.asarray(grid), (3, 4, 4), 'bilinear', antialias=False)).reshape(
    12, 4
  )
  antialiased = np.asarray(jax.image.resize(jnp.asarray(grid), (3, 4, 4), 'bilinear')).reshape(12, 4)
  np.testing.assert_allclose(default[1:], antialiased, rtol=1e-6, atol=1e-6)
  assert np.abs(default[1:] - zoomed).max() > 0.05 and np.abs(default[1:] - plain).max() > 0.05
  axis = np.asarray(resample_axis_table(jnp.asarray(grid[:, 0]), 3, 'scipy_zoom'))
  np.testing.assert_allclose(axis, scipy.ndimage.zoom(grid[:, 0], (3 / 5, 1), order=1), rtol=1e-6, atol=1e-6)


def test_resampling_checks_the_table_size():
  with pytest.raises(ValueError, match='needs 13'):
    resample_grid_table(jnp.zeros((12, 4)), (3, 4), (6, 8), num_prefix_tokens=1)


@pytest.mark.parametrize('posemb', ['none', 'rope', 'relative'])
def test_cached_decoder_block_equals_full_pass(posemb):
  rng = np.random.default_rng(2)
  length, source_length = 5, 7
  x = jnp.asarray(rng.normal(size=(2, length, FEATURES)).astype(np.float32))
  encoded = jnp.asarray(rng.normal(size=(2, source_length, 24)).astype(np.float32))
  source_valid = np.ones((2, source_length), bool)
  source_valid[1, 4:] = False
  cross_mask = jnp.asarray(source_valid)[:, None, None, :]
  positions = PositionalEncoding(
    posemb, dim=FEATURES, num_heads=HEADS, num_layers=1, max_length=8, rngs=nnx.Rngs(1)
  )
  block = DecoderBlock(FEATURES, HEADS, 32, encoder_features=24, rotary=positions.rotary, rngs=nnx.Rngs(0))
  full, weights = block(
    x,
    encoded,
    self_mask=causal_mask(length),
    cross_mask=cross_mask,
    self_bias=positions.attention_bias(0, length, length),
    return_weights=True,
  )
  assert weights['cross'].shape == (2, HEADS, length, source_length)
  cache = block.init_cache(encoded, max_length=8)
  outputs = []
  for t in range(length):
    bias = positions.attention_bias(0, 1, 8, q_offset=t)
    out, cache = block.decode_step(x[:, t : t + 1], cache, cross_mask=cross_mask, self_bias=bias)
    outputs.append(out)
  np.testing.assert_allclose(jnp.concatenate(outputs, axis=1), full, atol=1e-5)


def test_encoder_returns_attention_maps_and_stochastic_depth_trains():
  options = StackOptions(
    features=FEATURES,
    depth=3,
    num_heads=HEADS,
    mlp_features=32,
    posemb='learn1d',
    drop_path_rate=0.5,
    block=BlockOptions(dropout=0.0),  # so that only stochastic depth makes training differ
  )
  encoder = Encoder(options, max_length=6, rngs=nnx.Rngs(0))
  x = _tokens(6)
  out, intermediates = encoder(x, return_weights=True)
  assert [w.shape for w in intermediates['attention_weights']] == [(2, HEADS, 6, 6)] * 3
  np.testing.assert_allclose(np.asarray(intermediates['attention_weights'][0]).sum(-1), 1.0, atol=1e-5)
  train_out, _ = encoder(x, deterministic=False, rngs=nnx.Rngs(dropout=0))
  assert train_out.shape == out.shape and not np.allclose(train_out, out)
  assert [block.drop_path.rate for block in encoder.blocks] == [0.0, 0.25, 0.5]


def torch_cubic_coefficients(t: float, a: float = -0.75) -> list[float]:
  """PyTorch's ``get_cubic_upsample_coefficients``: the weights of the 4 taps around ``t`` in [0, 1]."""

  def near(x):
    return ((a + 2) * x - (a + 3)) * x * x + 1

  def far(x):
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

  return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def torch_upsample_bicubic2d(grid: np.ndarray, new_h: int, new_w: int) -> np.ndarray:
  """PyTorch's ``upsample_bicubic2d`` (``align_corners=False``, no antialiasing), pixel by pixel as its
  reference kernel computes it: the source index ``scale * (i + 0.5) - 0.5``, 4 x 4 neighbours read
  with their indices clamped to the grid, interpolated along x in each row, then along y."""
  old_h, old_w = grid.shape[:2]
  out = np.zeros((new_h, new_w, grid.shape[2]))
  for y in range(new_h):
    real_y = old_h / new_h * (y + 0.5) - 0.5
    in_y = int(np.floor(real_y))
    for x in range(new_w):
      real_x = old_w / new_w * (x + 0.5) - 0.5
      in_x = int(np.floor(real_x))
      rows = []
      for dy in range(-1, 3):
        row_y = min(max(in_y + dy, 0), old_h - 1)
        taps = [grid[row_y, min(max(in_x + dx, 0), old_w - 1)] for dx in range(-1, 3)]
        rows.append(sum(w * tap for w, tap in zip(torch_cubic_coefficients(real_x - in_x), taps)))
      out[y, x] = sum(w * row for w, row in zip(torch_cubic_coefficients(real_y - in_y), rows))
  return out


def pillow_bicubic_axis(values: np.ndarray, new: int) -> np.ndarray:
  """Pillow's resampling filter along axis 0 (``ImagingResample``'s ``precompute_coeffs``, which
  PyTorch's antialiased bicubic copies): cubic with ``a = -0.5`` widened by the shrink factor,
  weights renormalised over the taps inside the grid."""
  old = values.shape[0]
  scale = old / new
  filterscale = max(scale, 1.0)
  out = np.zeros((new, *values.shape[1:]))
  for i in range(new):
    centre = (i + 0.5) * scale
    taps = [j for j in range(old) if abs((j + 0.5 - centre) / filterscale) < 2]
    weights = []
    for j in taps:
      x = abs((j + 0.5 - centre) / filterscale)
      weights.append(1.5 * x**3 - 2.5 * x**2 + 1 if x < 1 else -0.5 * x**3 + 2.5 * x**2 - 4 * x + 2)
    out[i] = sum(w * values[j] for w, j in zip(weights, taps)) / sum(weights)
  return out


@pytest.mark.parametrize(
  'old, new', [((3, 5), (6, 10)), ((5, 7), (3, 4)), ((4, 4), (7, 2)), ((14, 14), (24, 24))]
)
def test_torch_bicubic_is_pytorchs_algorithm(old, new):
  grid = np.random.default_rng(2).normal(size=(*old, 3)).astype(np.float32)
  table = jnp.asarray(np.concatenate([np.ones((1, 3), np.float32), grid.reshape(-1, 3)]))
  ours = np.asarray(resample_grid_table(table, old, new, 1, 'torch_bicubic'))
  np.testing.assert_array_equal(ours[0], 1.0)
  np.testing.assert_allclose(ours[1:].reshape(*new, 3), torch_upsample_bicubic2d(grid, *new), atol=2e-6)
  jax_cubic = np.asarray(resample_grid_table(table, old, new, 1, 'bicubic'))
  assert np.abs(ours - jax_cubic).max() > 1e-3  # another kernel (a = -0.75, no antialiasing)


@pytest.mark.parametrize('old, new', [((3, 5), (6, 10)), ((5, 7), (3, 4)), ((37, 37), (16, 16))])
def test_torch_bicubic_aa_is_pillows_filter_and_jax_cubic(old, new):
  grid = np.random.default_rng(3).normal(size=(*old, 3)).astype(np.float32)
  ours = np.asarray(resample_grid_table(jnp.asarray(grid.reshape(-1, 3)), old, new, 0, 'torch_bicubic_aa'))
  reference = pillow_bicubic_axis(pillow_bicubic_axis(grid, new[0]).transpose(1, 0, 2), new[1]).transpose(
    1, 0, 2
  )
  np.testing.assert_allclose(ours.reshape(*new, 3), reference, atol=2e-6)
  jax_cubic = np.asarray(resample_grid_table(jnp.asarray(grid.reshape(-1, 3)), old, new, 0, 'bicubic'))
  np.testing.assert_allclose(ours, jax_cubic, atol=2e-6)


def test_a_new_kind_is_one_class_and_the_lists_of_kinds_follow_it(monkeypatch):
  import attention.positional as positional

  monkeypatch.setattr(positional, 'KINDS', dict(positional.KINDS))  # the class below registers here only

  class Ramp(positional.PositionKind):
    name = 'ramp'
    adds_table = True

    def __init__(self, tokens, *, rngs):
      del rngs
      self.table = nnx.Variable(
        jnp.arange(tokens.length * tokens.dim, dtype=jnp.float32).reshape(tokens.length, -1)
      )

    def __call__(self):
      return self.table[...]

  assert positional.kinds(adds_table=True)[-1] == 'ramp' and 'ramp' not in positional.kinds(needs_grid=True)
  assert positional.combination_exists('ramp', 'every_layer')
  encoding = PositionalEncoding(
    'ramp', 'every_layer', dim=4, num_heads=2, num_layers=2, max_length=3, rngs=nnx.Rngs(0)
  )
  x = jnp.zeros((1, 3, 4))
  np.testing.assert_array_equal(
    encoding.add_table(x, encoding.table_before(1))[0], np.arange(12).reshape(3, 4)
  )
  assert encoding.attention_bias(1, 3, 3) is None and encoding.rotary is None


def test_the_kinds_say_how_they_act():
  import attention.positional as positional
  from video.model import SPATIAL_POSEMBS, TEMPORAL_POSEMBS

  assert positional.kinds(adds_table=True) == ('learn1d', 'learn2d', 'sincos1d', 'sincos2d')
  assert positional.kinds(biases_attention=True) == ('relative', 'relative2d')
  assert positional.kinds(adds_table=True, learned=True) == ('learn1d', 'learn2d')
  assert positional.KINDS['rope'].rotary is not None
  assert SPATIAL_POSEMBS == ('none', 'learn1d', 'learn2d', 'sincos1d', 'sincos2d', 'learn3d')
  assert TEMPORAL_POSEMBS == ('none', 'learn1d', 'sincos1d', 'relative')
