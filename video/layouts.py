"""The four space-time attention layouts of a video Transformer, built from ``attention``'s blocks.

Tokens arrive as ``[batch, time, space, features]`` (``space`` counts the patches of one frame,
after any class-token column). Each layout returns the pooled features ``[batch, features]``
and, when asked, its attention weights per layer as a dict whose keys name the axes attended
over (``AXES`` spells out every array's dimensions):

``spacetime``               joint attention over all time x space tokens (ViViT model 1)
``factorised_encoder``      a spatial encoder per frame, then a temporal encoder over the frames'
                            class tokens or pooled features (ViViT model 2); each of the two
                            encoders ramps its stochastic depth from 0 to ``drop_path`` over its
                            own blocks
``divided``                 every block attends over time (each patch position with itself in the
                            other frames), then over space (within each frame), then its MLP
                            (TimeSformer, ViViT model 3); the temporal attention's output
                            projection starts at zero, so a new block starts as the image block
``factorised_dot_product``  half of each block's heads attend over space, half over time; their
                            outputs are projected together (ViViT model 4); pre-norm only

A relative temporal encoding (``time_relative``) is a learned bias per head and per frame
offset in every temporal attention (in ``spacetime``, between the frames of any two tokens).
With a class token, ``divided`` and ``factorised_dot_product`` keep one copy per frame as
column 0 of the space axis (TimeSformer's placement); the copies are averaged at the end.

Each layout is built from the model's ``video.model.VideoOptions`` (sizes, pooling, stochastic
depth, scanning) and one ``attention.blocks.BlockOptions`` that every block shares.
``scan_layers`` keeps each stack of blocks (``STACKS``: the blocks, the temporal encoder's
blocks, the divided layout's temporal sublayers) stacked on a leading depth axis and scans over
it, and ``remat`` rematerialises every layer, as in the ViT (``attention.layers``); the
relative biases are computed before the scan and handed to each layer as its input.
"""

import re

import jax
import jax.numpy as jnp
from flax import nnx

from attention.blocks import BlockOptions, DropPath, EncoderBlock, Mlp, attention_layer, layer_norm
from attention.layers import check_remat, keep_blocks, layer_inputs, layer_options, run_layers
from attention.positional import KINDS, Tokens

LAYOUTS = ('spacetime', 'factorised_encoder', 'divided', 'factorised_dot_product')
AXES = {
  'spacetime': ('batch', 'head', 'query_token', 'key_token'),
  'space': ('batch', 'time', 'head', 'query_space', 'key_space'),
  'time': ('batch', 'space', 'head', 'query_time', 'key_time'),
  'frames': ('batch', 'head', 'query_frame', 'key_frame'),
}
#: the names of the layouts' stacks of blocks, stacked when scanned (``attention.layers.stack_blocks``)
STACKS = ('blocks', 'temporal', 'temporal_blocks')
_LAYER_PARTS = re.compile(r'(?:^|\.)layout\.(blocks|temporal|temporal_blocks|time_biases)\.(\d+)\.')


def parameter_layer(path: str, layout: str, depth: int) -> int | None:
  """The depth (0 = nearest the input) of the layer an unrolled model's parameter ``path`` belongs to,
  ``None`` outside the layers: block ``i``, ``divided``'s temporal sublayer ``i`` and relative time
  bias ``i`` are layer ``i``; in the factorised encoder the temporal blocks (and their time biases)
  follow its ``depth`` spatial blocks."""
  found = _LAYER_PARTS.search(path)
  if found is None:
    return None
  part, index = found.group(1), int(found.group(2))
  temporal_encoder = part == 'temporal_blocks' or (part == 'time_biases' and layout == 'factorised_encoder')
  return depth + index if temporal_encoder else index


def over_space(layer, x, **kwargs):
  """Applies ``layer`` (returning ``(tokens, weights)``) within each frame of ``x`` ``[B, T, S, D]``."""
  batch, time, space, features = x.shape
  y, weights = layer(x.reshape(batch * time, space, features), **kwargs)
  if weights is not None:
    weights = weights.reshape(batch, time, *weights.shape[1:])
  return y.reshape(x.shape), weights


def over_time(layer, x, **kwargs):
  """Applies ``layer`` along the time axis of ``x`` ``[B, T, S, D]``, each space position on its own."""
  batch, time, space, features = x.shape
  by_position = jnp.swapaxes(x, 1, 2).reshape(batch * space, time, features)
  y, weights = layer(by_position, **kwargs)
  if weights is not None:
    weights = weights.reshape(batch, space, *weights.shape[1:])
  return jnp.swapaxes(y.reshape(batch, space, time, features), 1, 2), weights


def pad_prefix(bias: jax.Array, num_prefix: int) -> jax.Array:
  """Zero bias rows and columns for prefix (class) tokens in front of ``bias`` ``[1, H, Q, K]``."""
  return jnp.pad(bias, ((0, 0), (0, 0), (num_prefix, 0), (num_prefix, 0)))


def drop_path_ramp(drop_path: float, depth: int) -> tuple[float, ...]:
  """Stochastic-depth rates rising linearly from 0 at the first block to ``drop_path`` at the last."""
  return tuple(drop_path * i / max(depth - 1, 1) for i in range(depth))  # hashable: part of the graph


def _time_biases(options, num_heads, num_frames, depth, rngs):
  """``depth`` biases of the temporal kind (``attention.positional``) over ``num_frames`` frames."""
  tokens = Tokens(
    dim=options.width, length=num_frames, num_heads=num_heads, max_distance=max(num_frames - 1, 1)
  )
  return nnx.List([KINDS[options.temporal_posemb](tokens, rngs=rngs) for _ in range(depth)])


def _pool(x: jax.Array, pool: str, axis: int) -> jax.Array:
  """``'cls'``: the class token (index 0 of ``axis``); ``'gap'``: the mean over ``axis``, every token
  (with ``'gap'`` there is no class token, so these are the patch tokens or the frames)."""
  if pool == 'cls':
    return jnp.take(x, 0, axis=axis)
  return jnp.mean(x, axis=axis)


class _Layout(nnx.Module):
  """What every layout shares: its sizes, pooling, stochastic depth, scanning and remat come from the
  model's ``VideoOptions``; every block is built with one ``BlockOptions``."""

  def _setup(self, options, num_frames: int):
    self.depth, self.num_heads, self.pool = options.depth, options.num_heads, options.pool
    self.num_frames = num_frames
    self.drop_path_rates = drop_path_ramp(options.drop_path, options.depth)
    self.time_relative = KINDS[options.temporal_posemb].biases_attention
    self.scan_layers, self.remat = options.scan_layers, check_remat(options.remat)

  def _encoder_block(self, options, block: BlockOptions, rngs):
    """``make_block(rate)`` of an ``EncoderBlock`` of the model's width, heads and MLP."""
    return lambda rate: EncoderBlock(
      options.width, options.num_heads, options.mlp_dim, block, drop_path_rate=rate, rngs=rngs
    )

  def _keep(self, make_block, rates):
    """The blocks ``make_block(rate)``, one per rate: a list, or stacked for scanning."""
    return keep_blocks(make_block, rates, self.scan_layers)

  def _run(self, blocks, x, per_layer, rates, call, *, deterministic, rngs):
    """``call(block, x, inputs, options) -> (x, weights)`` over the layers of ``blocks`` (a stack, or a
    tuple of stacks run side by side); ``options`` are the block's ``deterministic``, ``rngs`` and
    ``drop_path_rate``. Returns ``x`` and the weights of each layer."""
    per_layer = layer_inputs(
      per_layer, rates, scan_layers=self.scan_layers, remat=self.remat, deterministic=deterministic, rngs=rngs
    )

    def layer(block, x, inputs):
      return call(block, x, inputs, layer_options(inputs, deterministic=deterministic, rngs=rngs))

    return run_layers(blocks, x, per_layer, layer, remat=self.remat)

  def _time_bias(self, layer, time, num_prefix=None):
    """Layer ``layer``'s relative temporal bias ``[1, H, T, T]`` (``num_prefix`` zero rows and columns in
    front when given), or None without a relative temporal encoding."""
    if not self.time_relative:
      return None
    bias = self.time_biases[layer](time, time)
    return bias if num_prefix is None else pad_prefix(bias, num_prefix)


class SpaceTime(_Layout):
  def __init__(self, options, block: BlockOptions, *, num_frames: int, rngs: nnx.Rngs):
    self._setup(options, num_frames)
    self.blocks = self._keep(self._encoder_block(options, block, rngs), self.drop_path_rates)
    self.norm = layer_norm(options.width, block, rngs=rngs)
    if self.time_relative:
      self.time_biases = _time_biases(options, options.num_heads, num_frames, options.depth, rngs)

  def __call__(self, tokens, class_token, *, deterministic, rngs, return_weights):
    batch, time, space, features = tokens.shape
    x = tokens.reshape(batch, time * space, features)
    num_prefix = 0
    if class_token is not None:
      x = jnp.concatenate([jnp.broadcast_to(class_token, (batch, 1, features)), x], axis=1)
      num_prefix = 1
    per_layer = []
    for layer in range(self.depth):
      bias = self._time_bias(layer, time)
      if bias is not None:  # between the frames of any two tokens
        bias = pad_prefix(jnp.repeat(jnp.repeat(bias, space, axis=2), space, axis=3), num_prefix)
      per_layer.append(dict(bias=bias))

    def call(block, x, inputs, options):
      x, layer_weights = block(x, bias=inputs['bias'], return_weights=return_weights, **options)
      return x, {'spacetime': layer_weights}

    x, weights = self._run(
      self.blocks, x, per_layer, self.drop_path_rates, call, deterministic=deterministic, rngs=rngs
    )
    return _pool(self.norm(x), self.pool, axis=1), weights


class FactorisedEncoder(_Layout):
  def __init__(self, options, block: BlockOptions, *, num_frames: int, rngs: nnx.Rngs):
    self._setup(options, num_frames)
    make_block = self._encoder_block(options, block, rngs)
    self.blocks = self._keep(make_block, self.drop_path_rates)
    self.norm = layer_norm(options.width, block, rngs=rngs)
    if options.pool == 'cls':
      self.temporal_class_token = nnx.Param(jnp.zeros((1, 1, options.width)))
    self.temporal_depth = options.temporal_depth
    self.temporal_drop_path_rates = drop_path_ramp(options.drop_path, options.temporal_depth)
    self.temporal_blocks = self._keep(make_block, self.temporal_drop_path_rates)
    self.temporal_norm = layer_norm(options.width, block, rngs=rngs)
    if self.time_relative:
      self.time_biases = _time_biases(options, options.num_heads, num_frames, options.temporal_depth, rngs)

  def __call__(self, tokens, class_token, *, deterministic, rngs, return_weights, time_table=None):
    batch, time, space, features = tokens.shape
    x = tokens
    if class_token is not None:
      x = jnp.concatenate([jnp.broadcast_to(class_token, (batch, time, 1, features)), x], axis=2)
    run = dict(deterministic=deterministic, rngs=rngs)

    def spatial(block, x, inputs, options):
      x, layer_weights = over_space(block, x, return_weights=return_weights, **options)
      return x, {'space': layer_weights}

    per_layer = [{} for _ in range(self.depth)]
    x, weights = self._run(self.blocks, x, per_layer, self.drop_path_rates, spatial, **run)
    frames = _pool(self.norm(x), self.pool, axis=2)  # [batch, time, features]
    if time_table is not None:
      frames = frames + time_table[None].astype(frames.dtype)
    num_prefix = 0
    if self.pool == 'cls':
      cls = jnp.broadcast_to(self.temporal_class_token[...].astype(frames.dtype), (batch, 1, features))
      frames = jnp.concatenate([cls, frames], axis=1)
      num_prefix = 1

    def temporal(block, frames, inputs, options):
      frames, layer_weights = block(frames, bias=inputs['bias'], return_weights=return_weights, **options)
      return frames, {'frames': layer_weights}

    per_layer = [dict(bias=self._time_bias(layer, time, num_prefix)) for layer in range(self.temporal_depth)]
    frames, temporal_weights = self._run(
      self.temporal_blocks, frames, per_layer, self.temporal_drop_path_rates, temporal, **run
    )
    return _pool(self.temporal_norm(frames), self.pool, axis=1), weights + temporal_weights


class TemporalSublayer(nnx.Module):
  """Pre-norm temporal self-attention whose output projection starts at zero (identity at start)."""

  def __init__(self, features, num_heads, options: BlockOptions, *, drop_path_rate, rngs):
    self.norm = layer_norm(features, options, rngs=rngs)
    self.attention = attention_layer(num_heads, features, options, rngs=rngs)
    self.attention.out.kernel[...] = jnp.zeros_like(self.attention.out.kernel[...])
    self.dropout = nnx.Dropout(options.dropout)
    self.drop_path = DropPath(drop_path_rate)

  def __call__(self, x, *, bias, deterministic, rngs, return_weights, drop_path_rate=None):
    """``drop_path_rate`` (from a scanned stack) replaces the rate the sublayer was built with."""
    kwargs = dict(deterministic=deterministic, rngs=rngs)
    y, weights = self.attention(self.norm(x), bias=bias, return_weights=return_weights, **kwargs)
    return x + self.drop_path(self.dropout(y, **kwargs), **kwargs, rate=drop_path_rate), weights


class Divided(_Layout):
  def __init__(self, options, block: BlockOptions, *, num_frames: int, rngs: nnx.Rngs):
    self._setup(options, num_frames)
    self.temporal = self._keep(
      lambda rate: TemporalSublayer(options.width, options.num_heads, block, drop_path_rate=rate, rngs=rngs),
      self.drop_path_rates,
    )
    self.blocks = self._keep(self._encoder_block(options, block, rngs), self.drop_path_rates)
    self.norm = layer_norm(options.width, block, rngs=rngs)
    if self.time_relative:
      self.time_biases = _time_biases(options, options.num_heads, num_frames, options.depth, rngs)

  def __call__(self, tokens, class_token, *, deterministic, rngs, return_weights):
    x = _with_class_column(tokens, class_token)

    def call(blocks, x, inputs, options):
      temporal, block = blocks
      x, time_weights = over_time(temporal, x, bias=inputs['bias'], return_weights=return_weights, **options)
      x, space_weights = over_space(block, x, return_weights=return_weights, **options)
      return x, {'time': time_weights, 'space': space_weights}

    per_layer = [dict(bias=self._time_bias(layer, x.shape[1])) for layer in range(self.depth)]
    x, weights = self._run(
      (self.temporal, self.blocks),
      x,
      per_layer,
      self.drop_path_rates,
      call,
      deterministic=deterministic,
      rngs=rngs,
    )
    return _pool_columns(self.norm(x), self.pool), weights


class FactorisedDotProductBlock(nnx.Module):
  """One attention sublayer whose first half of heads attends over space, the second over time.

  Two ``MultiHeadAttention`` halves with ``features / 2`` query/key/value features each, both
  projecting to ``features``; the sum of their outputs is the projection of the concatenated
  heads (ViViT model 4). Then the MLP sublayer, as in ``EncoderBlock``. Pre-norm only: another
  ``norm_placement`` is refused (``ValueError``, which the video task reports as a config error).
  """

  def __init__(self, features, num_heads, mlp_features, options: BlockOptions, *, drop_path_rate, rngs):
    if num_heads % 2 or features % 2:
      raise ValueError(
        f'factorised_dot_product splits the heads in two: num_heads ({num_heads}) and width ({features}) '
        'must be even.'
      )
    if options.norm_placement != 'pre':
      raise ValueError(
        f"factorised_dot_product normalises before each sublayer only: norm_placement must be 'pre', "
        f'got {options.norm_placement!r}.'
      )
    half = dict(qkv_features=features // 2, out_features=features, rngs=rngs)
    self.norm1 = layer_norm(features, options, rngs=rngs)
    self.space_attention = attention_layer(num_heads // 2, features, options, **half)
    self.time_attention = attention_layer(num_heads // 2, features, options, **half)
    self.norm2 = layer_norm(features, options, rngs=rngs)
    self.mlp = Mlp(features, mlp_features, options, rngs=rngs)
    self.dropout = nnx.Dropout(options.dropout)
    self.drop_path = DropPath(drop_path_rate)

  def __call__(self, x, *, time_bias, deterministic, rngs, return_weights, drop_path_rate=None):
    """``drop_path_rate`` (from a scanned stack) replaces the rate the block was built with."""
    kwargs = dict(deterministic=deterministic, rngs=rngs, return_weights=return_weights)
    y = self.norm1(x)
    space, space_weights = over_space(self.space_attention, y, **kwargs)
    time, time_weights = over_time(self.time_attention, y, bias=time_bias, **kwargs)
    del kwargs['return_weights']
    path = dict(kwargs, rate=drop_path_rate)
    x = x + self.drop_path(self.dropout(space + time, **kwargs), **path)
    x = x + self.drop_path(self.mlp(self.norm2(x), **kwargs), **path)
    return x, {'space': space_weights, 'time': time_weights}


class FactorisedDotProduct(_Layout):
  def __init__(self, options, block: BlockOptions, *, num_frames: int, rngs: nnx.Rngs):
    self._setup(options, num_frames)
    self.blocks = self._keep(
      lambda rate: FactorisedDotProductBlock(
        options.width, options.num_heads, options.mlp_dim, block, drop_path_rate=rate, rngs=rngs
      ),
      self.drop_path_rates,
    )
    self.norm = layer_norm(options.width, block, rngs=rngs)
    if self.time_relative:
      self.time_biases = _time_biases(options, options.num_heads // 2, num_frames, options.depth, rngs)

  def __call__(self, tokens, class_token, *, deterministic, rngs, return_weights):
    x = _with_class_column(tokens, class_token)

    def call(block, x, inputs, options):
      return block(x, time_bias=inputs['bias'], return_weights=return_weights, **options)

    per_layer = [dict(bias=self._time_bias(layer, x.shape[1])) for layer in range(self.depth)]
    x, weights = self._run(
      self.blocks, x, per_layer, self.drop_path_rates, call, deterministic=deterministic, rngs=rngs
    )
    return _pool_columns(self.norm(x), self.pool), weights


def _with_class_column(tokens, class_token):
  """Prepends a copy of the class token to every frame: ``[B, T, S, D]`` -> ``[B, T, 1 + S, D]``."""
  if class_token is None:
    return tokens
  batch, time, _, features = tokens.shape
  return jnp.concatenate([jnp.broadcast_to(class_token, (batch, time, 1, features)), tokens], axis=2)


def _pool_columns(x, pool):
  """The class column averaged over frames, or the mean of all patch tokens."""
  if pool == 'cls':
    return jnp.mean(x[:, :, 0], axis=1)
  return jnp.mean(x, axis=(1, 2))
