"""The encoder and decoder stacks: blocks behind a positional encoding, with a final LayerNorm.

Both stacks begin with the same stem: the positional encoding is added to the tokens
and dropout is applied to the sum (as in Vaswani et al., the ViT and big_vision), so the
positional part is dropped too. ``posemb`` and ``posemb_injection`` are the option strings
of ``attention.positional``; the stack builds one ``PositionalEncoding``, adds its tables
and relative biases layer by layer and hands its ``rotary`` (RoPE) down to the attention
layers. With ``norm_placement='post'`` every block already ends in a LayerNorm, so the
stack adds no final one. Stochastic depth grows linearly from 0 at the first block to
``drop_path_rate`` at the last.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from attention.blocks import DecoderBlock, EncoderBlock, check_norm_placement, layer_norm
from attention.masks import Mask, combine_masks
from attention.positional import PositionalEncoding


class _Stack(nnx.Module):
  """What both stacks share: the positional encoding, the stem and the final LayerNorm."""

  def _build_common(
    self,
    *,
    features,
    depth,
    num_heads,
    posemb,
    posemb_injection,
    max_length,
    grid,
    num_prefix_tokens,
    dropout_rate,
    norm_placement,
    dtype,
    param_dtype,
    rngs,
  ):
    check_norm_placement(norm_placement)
    self.positional = PositionalEncoding(
      posemb,
      posemb_injection,
      dim=features,
      num_heads=num_heads,
      num_layers=depth,
      max_length=max_length,
      grid=grid,
      num_prefix_tokens=num_prefix_tokens,
      param_dtype=param_dtype,
      rngs=rngs,
    )
    self.dropout = nnx.Dropout(dropout_rate)
    self.final_norm = norm_placement == 'pre'

  def _stem(self, x, *, deterministic, rngs):
    """The first layer's positional encoding, then dropout on the sum."""
    x = self.positional.before_layer(x, 0)
    return self.dropout(x, deterministic=deterministic, rngs=rngs)

  def _finish(self, x):
    return self.norm(x) if self.final_norm else x


class Encoder(_Stack):
  """A stack of encoder blocks. Give ``grid`` for patch grids, ``max_length`` for sequences."""

  def __init__(
    self,
    *,
    features: int,
    depth: int,
    num_heads: int,
    mlp_features: int,
    posemb: str = 'sincos1d',
    posemb_injection: str = 'stem',
    max_length: int | None = None,
    grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 0,
    score: str = 'scaled_dot',
    dropout_rate: float = 0.0,
    attention_dropout_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    activation: str = 'gelu',
    norm_placement: str = 'pre',
    dtype=None,
    param_dtype=jnp.float32,
    rngs: nnx.Rngs,
    **attention_options,
  ):
    self._build_common(
      features=features,
      depth=depth,
      num_heads=num_heads,
      posemb=posemb,
      posemb_injection=posemb_injection,
      max_length=max_length,
      grid=grid,
      num_prefix_tokens=num_prefix_tokens,
      dropout_rate=dropout_rate,
      norm_placement=norm_placement,
      dtype=dtype,
      param_dtype=param_dtype,
      rngs=rngs,
    )
    self.blocks = nnx.List(
      [
        EncoderBlock(
          features,
          num_heads,
          mlp_features,
          score=score,
          dropout_rate=dropout_rate,
          attention_dropout_rate=attention_dropout_rate,
          drop_path_rate=drop_path_rate * i / max(depth - 1, 1),
          activation=activation,
          norm_placement=norm_placement,
          rotary=self.positional.rotary,
          dtype=dtype,
          param_dtype=param_dtype,
          rngs=rngs,
          **attention_options,
        )
        for i in range(depth)
      ]
    )
    if self.final_norm:
      self.norm = layer_norm(features, dtype, param_dtype, rngs=rngs)

  def __call__(
    self,
    x,
    *,
    mask=None,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
  ):
    """``x``: ``[batch, length, features]`` tokens (prefix tokens first).

    Returns the encoded tokens and intermediates: ``attention_weights`` (a list per
    layer, when ``return_weights``) and ``pre_norm`` (the output of the last block, before
    the final LayerNorm if there is one).
    """
    x = self._stem(x, deterministic=deterministic, rngs=rngs)
    all_weights = []
    for layer, block in enumerate(self.blocks):
      if layer:
        x = self.positional.before_layer(x, layer)
      bias = self.positional.attention_bias(layer, x.shape[1], x.shape[1])
      x, weights = block(
        x, mask=mask, bias=bias, deterministic=deterministic, rngs=rngs, return_weights=return_weights
      )
      all_weights.append(weights)
    intermediates = {'pre_norm': x}
    if return_weights:
      intermediates['attention_weights'] = all_weights
    return self._finish(x), intermediates


class Decoder(_Stack):
  """A stack of causal decoder blocks attending to an encoder output; 1-D sequences only."""

  def __init__(
    self,
    *,
    features: int,
    depth: int,
    num_heads: int,
    mlp_features: int,
    max_length: int,
    posemb: str = 'sincos1d',
    posemb_injection: str = 'stem',
    score: str = 'scaled_dot',
    dropout_rate: float = 0.0,
    attention_dropout_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    activation: str = 'gelu',
    norm_placement: str = 'pre',
    encoder_features: int | None = None,
    dtype=None,
    param_dtype=jnp.float32,
    rngs: nnx.Rngs,
    **attention_options,
  ):
    self._build_common(
      features=features,
      depth=depth,
      num_heads=num_heads,
      posemb=posemb,
      posemb_injection=posemb_injection,
      max_length=max_length,
      grid=None,
      num_prefix_tokens=0,
      dropout_rate=dropout_rate,
      norm_placement=norm_placement,
      dtype=dtype,
      param_dtype=param_dtype,
      rngs=rngs,
    )
    self.blocks = nnx.List(
      [
        DecoderBlock(
          features,
          num_heads,
          mlp_features,
          score=score,
          dropout_rate=dropout_rate,
          attention_dropout_rate=attention_dropout_rate,
          drop_path_rate=drop_path_rate * i / max(depth - 1, 1),
          activation=activation,
          norm_placement=norm_placement,
          rotary=self.positional.rotary,
          encoder_features=encoder_features,
          dtype=dtype,
          param_dtype=param_dtype,
          rngs=rngs,
          **attention_options,
        )
        for i in range(depth)
      ]
    )
    if self.final_norm:
      self.norm = layer_norm(features, dtype, param_dtype, rngs=rngs)

  def __call__(
    self,
    x,
    encoded,
    *,
    target_mask=None,
    cross_mask=None,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
  ):
    """Teacher-forced pass over all target positions ``x`` (``[batch, target, features]``).

    ``target_mask`` (e.g. padded target keys) is combined with the causal mask.
    Returns the output and intermediates: ``self_attention_weights`` and
    ``cross_attention_weights`` (lists per layer, when ``return_weights``).
    """
    length = x.shape[1]
    self_mask = combine_masks(Mask(causal=True), target_mask)
    x = self._stem(x, deterministic=deterministic, rngs=rngs)
    self_weights, cross_weights = [], []
    for layer, block in enumerate(self.blocks):
      if layer:
        x = self.positional.before_layer(x, layer)
      bias = self.positional.attention_bias(layer, length, length)
      x, weights = block(
        x,
        encoded,
        self_mask=self_mask,
        cross_mask=cross_mask,
        self_bias=bias,
        deterministic=deterministic,
        rngs=rngs,
        return_weights=return_weights,
      )
      self_weights.append(weights['self'])
      cross_weights.append(weights['cross'])
    intermediates = {}
    if return_weights:
      intermediates = {'self_attention_weights': self_weights, 'cross_attention_weights': cross_weights}
    return self._finish(x), intermediates

  def init_cache(self, encoded: jax.Array, max_length: int) -> list[dict]:
    """Per layer: an empty self-attention cache and the keys and values of ``encoded``."""
    return [block.init_cache(encoded, max_length) for block in self.blocks]

  def decode_step(self, x, cache: list[dict], *, cross_mask=None):
    """The new tokens ``x`` (``[batch, step_len, features]``) at the cache's position."""
    index = cache[0]['self']['index']
    max_length = cache[0]['self']['key'].shape[1]
    positions = index + jnp.arange(x.shape[1])
    new_cache = []
    for layer, block in enumerate(self.blocks):
      x = self.positional.before_layer(x, layer, positions=positions)
      bias = self.positional.attention_bias(layer, x.shape[1], max_length, q_offset=index)
      x, layer_cache = block.decode_step(x, cache[layer], cross_mask=cross_mask, self_bias=bias)
      new_cache.append(layer_cache)
    return self._finish(x), new_cache
