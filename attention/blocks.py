"""Transformer building blocks: MLP, stochastic depth, pre-LayerNorm encoder and decoder blocks,
and the encoder stack that applies a positional encoding with its injection.

Every call takes ``deterministic`` (no dropout when ``True``) and ``rngs`` (an
``nnx.Rngs`` with a ``dropout`` stream, needed only when not deterministic), so a
train step can derive its randomness from the step number alone.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from attention.multi_head import MultiHeadAttention
from attention.positional import PositionalEncoding


class Mlp(nnx.Module):
  """Linear -> GELU -> dropout -> Linear -> dropout."""

  def __init__(self, features: int, hidden_features: int, *, dropout_rate: float = 0.0,
               dtype=None, param_dtype=jnp.float32, rngs: nnx.Rngs):
    self.fc1 = nnx.Linear(features, hidden_features, dtype=dtype, param_dtype=param_dtype, rngs=rngs,
                          kernel_init=nnx.initializers.xavier_uniform(),
                          bias_init=nnx.initializers.normal(1e-6))
    self.fc2 = nnx.Linear(hidden_features, features, dtype=dtype, param_dtype=param_dtype, rngs=rngs,
                          kernel_init=nnx.initializers.xavier_uniform(),
                          bias_init=nnx.initializers.normal(1e-6))
    self.dropout = nnx.Dropout(dropout_rate)

  def __call__(self, x, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    x = nnx.gelu(self.fc1(x))
    x = self.dropout(x, deterministic=deterministic, rngs=rngs)
    return self.dropout(self.fc2(x), deterministic=deterministic, rngs=rngs)


class DropPath(nnx.Module):
  """Stochastic depth: drops the whole residual branch of an example with probability ``rate``."""

  def __init__(self, rate: float):
    if not 0.0 <= rate < 1.0:
      raise ValueError(f'Stochastic depth rate must be in [0, 1), got {rate}.')
    self.rate = rate

  def __call__(self, x, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    if deterministic or self.rate == 0.0:
      return x
    keep = 1.0 - self.rate
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    kept = jax.random.bernoulli(rngs.dropout(), keep, shape)
    return jnp.where(kept, x / keep, 0.0).astype(x.dtype)


def _layer_norm(features, dtype, param_dtype, rngs):
  return nnx.LayerNorm(features, epsilon=1e-6, dtype=dtype, param_dtype=param_dtype, rngs=rngs)


class EncoderBlock(nnx.Module):
  """x + attn(LN(x)); x + mlp(LN(x)), with dropout and stochastic depth on each branch."""

  def __init__(self, features: int, num_heads: int, mlp_features: int, *, score: str = 'scaled_dot',
               dropout_rate: float = 0.0, attention_dropout_rate: float = 0.0, drop_path_rate: float = 0.0,
               rope: bool = False, dtype=None, param_dtype=jnp.float32, rngs: nnx.Rngs, **attention_options):
    self.norm1 = _layer_norm(features, dtype, param_dtype, rngs)
    self.attention = MultiHeadAttention(
        num_heads, features, score=score, dropout_rate=attention_dropout_rate, rope=rope, dtype=dtype,
        param_dtype=param_dtype, rngs=rngs, **attention_options)
    self.norm2 = _layer_norm(features, dtype, param_dtype, rngs)
    self.mlp = Mlp(features, mlp_features, dropout_rate=dropout_rate, dtype=dtype,
                   param_dtype=param_dtype, rngs=rngs)
    self.dropout = nnx.Dropout(dropout_rate)
    self.drop_path = DropPath(drop_path_rate)

  def __call__(self, x, *, mask=None, bias=None, deterministic: bool = True, rngs: nnx.Rngs | None = None,
               return_weights: bool = False):
    """Returns the new ``x`` and the attention weights (``None`` unless ``return_weights``)."""
    kwargs = dict(deterministic=deterministic, rngs=rngs)
    y, weights = self.attention(self.norm1(x), mask=mask, bias=bias, return_weights=return_weights, **kwargs)
    x = x + self.drop_path(self.dropout(y, **kwargs), **kwargs)
    x = x + self.drop_path(self.mlp(self.norm2(x), **kwargs), **kwargs)
    return x, weights


class DecoderBlock(nnx.Module):
  """Causal self-attention, cross-attention to the encoder output, MLP; each pre-LayerNorm."""

  def __init__(self, features: int, num_heads: int, mlp_features: int, *, score: str = 'scaled_dot',
               dropout_rate: float = 0.0, attention_dropout_rate: float = 0.0, drop_path_rate: float = 0.0,
               rope: bool = False, encoder_features: int | None = None, dtype=None,
               param_dtype=jnp.float32, rngs: nnx.Rngs, **attention_options):
    common = dict(score=score, dropout_rate=attention_dropout_rate, dtype=dtype, param_dtype=param_dtype,
                  rngs=rngs, **attention_options)
    self.norm1 = _layer_norm(features, dtype, param_dtype, rngs)
    self.self_attention = MultiHeadAttention(num_heads, features, rope=rope, **common)
    self.norm2 = _layer_norm(features, dtype, param_dtype, rngs)
    self.cross_attention = MultiHeadAttention(num_heads, features, kv_features=encoder_features, **common)
    self.norm3 = _layer_norm(features, dtype, param_dtype, rngs)
    self.mlp = Mlp(features, mlp_features, dropout_rate=dropout_rate, dtype=dtype,
                   param_dtype=param_dtype, rngs=rngs)
    self.dropout = nnx.Dropout(dropout_rate)
    self.drop_path = DropPath(drop_path_rate)

  def __call__(self, x, encoded, *, self_mask=None, cross_mask=None, self_bias=None,
               deterministic: bool = True, rngs: nnx.Rngs | None = None, return_weights: bool = False):
    """Teacher-forced pass. ``self_mask`` should include the causal mask.

    Returns the new ``x`` and ``{'self': weights, 'cross': weights}`` (``None`` values
    unless ``return_weights``).
    """
    kwargs = dict(deterministic=deterministic, rngs=rngs)
    y, self_weights = self.self_attention(self.norm1(x), mask=self_mask, bias=self_bias,
                                          return_weights=return_weights, **kwargs)
    x = x + self.drop_path(self.dropout(y, **kwargs), **kwargs)
    y, cross_weights = self.cross_attention(self.norm2(x), encoded, mask=cross_mask,
                                            return_weights=return_weights, **kwargs)
    x = x + self.drop_path(self.dropout(y, **kwargs), **kwargs)
    x = x + self.drop_path(self.mlp(self.norm3(x), **kwargs), **kwargs)
    return x, {'self': self_weights, 'cross': cross_weights}

  def init_cache(self, encoded, max_length: int) -> dict:
    """The decoding cache: an empty self-attention cache and the encoder's keys and values."""
    return {'self': self.self_attention.init_cache(encoded.shape[0], max_length, encoded.dtype),
            'cross': self.cross_attention.cross_cache(encoded)}

  def decode_step(self, x, cache: dict, *, cross_mask=None, self_bias=None):
    """Runs the new tokens ``x`` (``[batch, step_len, features]``) against the cache."""
    y, self_cache = self.self_attention.decode_step(self.norm1(x), cache['self'], bias=self_bias)
    x = x + y
    x = x + self.cross_attention.attend_to_cache(self.norm2(x), cache['cross'], mask=cross_mask)
    x = x + self.mlp(self.norm3(x))
    return x, {'self': self_cache, 'cross': cache['cross']}


class Encoder(nnx.Module):
  """A stack of encoder blocks with a positional encoding and a final LayerNorm.

  Stochastic depth grows linearly from 0 at the first block to ``drop_path_rate``
  at the last. ``posemb`` and ``posemb_injection`` are the option strings of
  ``attention.positional``; give ``grid`` for patch grids, ``max_length`` for sequences.
  """

  def __init__(self, *, features: int, depth: int, num_heads: int, mlp_features: int,
               posemb: str = 'sincos1d', posemb_injection: str = 'stem', max_length: int | None = None,
               grid: tuple[int, int] | None = None, num_prefix_tokens: int = 0, score: str = 'scaled_dot',
               dropout_rate: float = 0.0, attention_dropout_rate: float = 0.0, drop_path_rate: float = 0.0,
               dtype=None, param_dtype=jnp.float32, rngs: nnx.Rngs, **attention_options):
    self.positional = PositionalEncoding(
        posemb, posemb_injection, dim=features, num_heads=num_heads, num_layers=depth,
        max_length=max_length, grid=grid, num_prefix_tokens=num_prefix_tokens,
        param_dtype=param_dtype, rngs=rngs)
    self.blocks = nnx.List([
        EncoderBlock(features, num_heads, mlp_features, score=score, dropout_rate=dropout_rate,
                     attention_dropout_rate=attention_dropout_rate,
                     drop_path_rate=drop_path_rate * i / max(depth - 1, 1),
                     rope=self.positional.uses_rope, dtype=dtype, param_dtype=param_dtype, rngs=rngs,
                     **attention_options)
        for i in range(depth)])
    self.norm = _layer_norm(features, dtype, param_dtype, rngs)
    self.dropout = nnx.Dropout(dropout_rate)

  def __call__(self, x, *, mask=None, deterministic: bool = True, rngs: nnx.Rngs | None = None,
               return_weights: bool = False):
    """``x``: ``[batch, length, features]`` tokens (prefix tokens first).

    Returns the encoded tokens and intermediates: ``attention_weights`` (a list per
    layer, when ``return_weights``) and ``pre_norm`` (the output before the final LayerNorm).
    """
    x = self.dropout(x, deterministic=deterministic, rngs=rngs)
    all_weights = []
    for layer, block in enumerate(self.blocks):
      x = self.positional.before_layer(x, layer)
      bias = self.positional.attention_bias(layer, x.shape[1], x.shape[1])
      x, weights = block(x, mask=mask, bias=bias, deterministic=deterministic, rngs=rngs,
                         return_weights=return_weights)
      all_weights.append(weights)
    intermediates = {'pre_norm': x}
    if return_weights:
      intermediates['attention_weights'] = all_weights
    return self.norm(x), intermediates
