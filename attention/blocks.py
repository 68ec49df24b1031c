"""Transformer building blocks: the MLP, stochastic depth, and the encoder and decoder blocks.

Each residual sublayer normalises its input (``norm_placement='pre'``, our default: more
stable, no learning-rate care) or the residual sum (``'post'``, Vaswani et al.:
``x = LN(x + sublayer(x))``). The MLP's activation is ``'gelu'`` (our default, as in the
ViT: the tanh approximation that Flax's ``gelu`` computes, as do the ViT and big_vision
code bases), ``'gelu_exact'`` (the erf form, as PyTorch code computes it), ``'quick_gelu'``
(``x * sigmoid(1.702 x)``, OpenAI's CLIP) or ``'relu'`` (Vaswani et al.). An encoder block may scale
each residual branch by a learned vector (``layer_scale``, the initial value; CaiT, DeiT III, DINOv2),
as ``x + ls * sublayer(x)``. What every block of a stack shares is one ``BlockOptions``, built once
by the model and handed down whole; only what differs per layer (the drop-path rate, the stack's
rotary encoding, the width a decoder attends to) is an argument of its own. The stacks of blocks are
in ``attention.stacks``.

Every call takes ``deterministic`` (no dropout when ``True``) and ``rngs`` (an
``nnx.Rngs`` with a ``dropout`` stream, needed only when not deterministic), so a
train step can derive its randomness from the step number alone.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from attention import matmul
from attention.dtypes import resolve_dtype
from attention.multi_head import ATTENTION_KERNELS, MultiHeadAttention
from attention.positional import Rotary
from attention.scores import SCORES

ACTIVATIONS = ('gelu', 'gelu_exact', 'quick_gelu', 'relu')
NORM_PLACEMENTS = ('pre', 'post')
LAYERNORM_EPSILON = 1e-6  # the ViT's and big_vision's


@dataclasses.dataclass(frozen=True)
class BlockOptions:
  """What every block of a stack is built with; a model builds one and hands it down whole.

  ``score`` (``attention.scores``), ``dropout`` (on each residual branch and inside the MLP),
  ``attention_dropout`` (on the attention weights), ``activation`` (the MLP's), ``norm_placement``,
  ``layernorm_epsilon`` (of every LayerNorm), ``layer_scale`` (0: none), ``use_bias`` (of the
  attention projections), ``attention_kernel`` (``attention.multi_head.ATTENTION_KERNELS``),
  ``attention_pad_multiple`` (the fused call's lengths padded to a multiple of it; 0: not padded),
  ``dtype`` (computed in; ``None``: the inputs') and ``param_dtype``.
  """

  score: str = 'scaled_dot'
  dropout: float = 0.0
  attention_dropout: float = 0.0
  activation: str = 'gelu'
  norm_placement: str = 'pre'
  layernorm_epsilon: float = LAYERNORM_EPSILON
  layer_scale: float = 0.0
  use_bias: bool = True
  attention_kernel: str = 'auto'
  attention_pad_multiple: int = 0
  dtype: Any = None
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    for name, allowed in (
      ('score', SCORES),
      ('activation', ACTIVATIONS),
      ('norm_placement', NORM_PLACEMENTS),
      ('attention_kernel', tuple(ATTENTION_KERNELS)),
    ):
      if getattr(self, name) not in allowed:
        raise ValueError(f'Unknown {name} {getattr(self, name)!r}; allowed values: {", ".join(allowed)}.')
    for name in ('dropout', 'attention_dropout'):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f'{name} must be in [0, 1), got {getattr(self, name)}.')
    if self.attention_pad_multiple < 0:
      raise ValueError(
        f'attention_pad_multiple must be >= 0 (0: no padding), got {self.attention_pad_multiple}.'
      )
    if not self.layernorm_epsilon > 0:
      raise ValueError(f'layernorm_epsilon must be positive, got {self.layernorm_epsilon}.')
    for name in ('dtype', 'param_dtype'):
      value = getattr(self, name)
      if value is not None and not jnp.issubdtype(value, jnp.floating):
        raise ValueError(f'{name} must be a floating-point dtype, got {value!r}.')

  @classmethod
  def of(cls, options) -> 'BlockOptions':
    """The block options a model's options hold: each field of ``options`` named as one of these,
    with ``dtype`` given by its name (``'bfloat16'``); the fields it lacks keep their defaults."""
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(cls) if hasattr(options, f.name)}
    if 'dtype' in fields:
      fields['dtype'] = resolve_dtype(fields['dtype'])
    return cls(**fields)


def attention_layer(num_heads: int, features: int, options: BlockOptions, **layer) -> MultiHeadAttention:
  """A ``MultiHeadAttention`` as ``options`` say (score, dropout on the weights, biases, dtypes);
  ``layer`` holds what only this layer has (``rotary``, ``cross_attention``, ``kv_features``, ...)."""
  return MultiHeadAttention(
    num_heads,
    features,
    score=options.score,
    dropout_rate=options.attention_dropout,
    use_bias=options.use_bias,
    fused_kernel=ATTENTION_KERNELS[options.attention_kernel],
    pad_multiple=options.attention_pad_multiple,
    dtype=options.dtype,
    param_dtype=options.param_dtype,
    **layer,
  )


class Mlp(nnx.Module):
  """Linear -> activation -> dropout -> Linear -> dropout; kernels named ``('embed', 'mlp')``
  and ``('mlp', 'embed')`` for the partitioning rules. ``options`` give the activation, the
  dropout rate and the dtypes."""

  def __init__(self, features: int, hidden_features: int, options: BlockOptions = BlockOptions(), *, rngs):
    self.activation = options.activation
    dtype, param_dtype = options.dtype, options.param_dtype

    def dense(features_in, features_out, names):
      return matmul.Linear(
        features_in,
        features_out,
        dtype=dtype,
        param_dtype=param_dtype,
        rngs=rngs,
        kernel_init=nnx.with_partitioning(nnx.initializers.xavier_uniform(), names, eager_sharding=False),
        bias_init=nnx.with_partitioning(nnx.initializers.normal(1e-6), names[1:], eager_sharding=False),
      )

    self.fc1 = dense(features, hidden_features, ('embed', 'mlp'))
    self.fc2 = dense(hidden_features, features, ('mlp', 'embed'))
    self.dropout = nnx.Dropout(options.dropout)

  def __call__(self, x, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    x = self.fc1(x)
    if self.activation == 'gelu':
      x = nnx.gelu(x)
    elif self.activation == 'gelu_exact':
      x = nnx.gelu(x, approximate=False)
    elif self.activation == 'quick_gelu':
      x = x * nnx.sigmoid(1.702 * x)
    elif self.activation == 'relu':
      x = nnx.relu(x)
    x = self.dropout(x, deterministic=deterministic, rngs=rngs)
    return self.dropout(self.fc2(x), deterministic=deterministic, rngs=rngs)


class DropPath(nnx.Module):
  """Stochastic depth: drops the whole residual branch of an example with probability ``rate``."""

  def __init__(self, rate: float):
    if not 0.0 <= rate < 1.0:
      raise ValueError(f'Stochastic depth rate must be in [0, 1), got {rate}.')
    self.rate = rate

  def __call__(self, x, *, deterministic: bool = True, rngs: nnx.Rngs | None = None, rate=None):
    """``rate`` (a scanned stack's per-layer rate, possibly traced) replaces ``self.rate``, which
    then only says whether any layer drops (a stack's largest rate)."""
    if deterministic or self.rate == 0.0:
      return x
    keep = 1.0 - (self.rate if rate is None else rate)
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    kept = jax.random.bernoulli(rngs.dropout(), keep, shape)
    return jnp.where(kept, x / keep, 0.0).astype(x.dtype)


def layer_norm(features: int, options: BlockOptions = BlockOptions(), *, rngs: nnx.Rngs) -> nnx.LayerNorm:
  """A LayerNorm with the epsilon and dtypes of ``options``."""
  return nnx.LayerNorm(
    features,
    epsilon=options.layernorm_epsilon,
    dtype=options.dtype,
    param_dtype=options.param_dtype,
    rngs=rngs,
  )


class _ResidualBlock(nnx.Module):
  """Where the LayerNorm of each residual sublayer goes: around its input or after the sum."""

  norm_placement: str

  def _norm_input(self, x, norm):
    return norm(x) if self.norm_placement == 'pre' else x

  def _add(self, x, branch, norm):
    return x + branch if self.norm_placement == 'pre' else norm(x + branch)


class EncoderBlock(_ResidualBlock):
  """Self-attention and MLP, each a residual sublayer with dropout and stochastic depth; ``layer_scale``
  (0: none) gives each branch a learned per-feature scale ``ls1``, ``ls2`` starting at that value.
  ``drop_path_rate`` and ``rotary`` are this layer's own; everything else is in ``options``."""

  def __init__(
    self,
    features: int,
    num_heads: int,
    mlp_features: int,
    options: BlockOptions = BlockOptions(),
    *,
    drop_path_rate: float = 0.0,
    rotary: Rotary | None = None,
    rngs: nnx.Rngs,
  ):
    self.norm_placement = options.norm_placement
    self.norm1 = layer_norm(features, options, rngs=rngs)
    scale = lambda: nnx.Param(jnp.full((features,), options.layer_scale, options.param_dtype))  # noqa: E731
    self.ls1 = scale() if options.layer_scale else None
    self.ls2 = scale() if options.layer_scale else None
    self.attention = attention_layer(num_heads, features, options, rotary=rotary, rngs=rngs)
    self.norm2 = layer_norm(features, options, rngs=rngs)
    self.mlp = Mlp(features, mlp_features, options, rngs=rngs)
    self.dropout = nnx.Dropout(options.dropout)
    self.drop_path = DropPath(drop_path_rate)

  def __call__(
    self,
    x,
    *,
    mask=None,
    bias=None,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
    drop_path_rate=None,
  ):
    """Returns the new ``x`` and the attention weights (``None`` unless ``return_weights``).

    ``drop_path_rate`` (from a scanned stack) replaces the rate the block was built with."""
    kwargs = dict(deterministic=deterministic, rngs=rngs)
    path = dict(kwargs, rate=drop_path_rate)
    y, weights = self.attention(
      self._norm_input(x, self.norm1), mask=mask, bias=bias, return_weights=return_weights, **kwargs
    )
    x = self._add(x, self.drop_path(self.dropout(self._scale(y, self.ls1), **kwargs), **path), self.norm1)
    y = self.mlp(self._norm_input(x, self.norm2), **kwargs)
    x = self._add(x, self.drop_path(self._scale(y, self.ls2), **path), self.norm2)
    return x, weights

  def _scale(self, y, scale):
    return y * scale[...].astype(y.dtype) if scale is not None else y


class DecoderBlock(_ResidualBlock):
  """Causal self-attention, cross-attention to the encoder output and MLP, each a residual sublayer.
  ``encoder_features`` is the width of what it attends to (default: its own)."""

  def __init__(
    self,
    features: int,
    num_heads: int,
    mlp_features: int,
    options: BlockOptions = BlockOptions(),
    *,
    drop_path_rate: float = 0.0,
    rotary: Rotary | None = None,
    encoder_features: int | None = None,
    rngs: nnx.Rngs,
  ):
    self.norm_placement = options.norm_placement
    self.norm1 = layer_norm(features, options, rngs=rngs)
    self.self_attention = attention_layer(num_heads, features, options, rotary=rotary, rngs=rngs)
    self.norm2 = layer_norm(features, options, rngs=rngs)
    self.cross_attention = attention_layer(
      num_heads, features, options, kv_features=encoder_features, cross_attention=True, rngs=rngs
    )
    self.norm3 = layer_norm(features, options, rngs=rngs)
    self.mlp = Mlp(features, mlp_features, options, rngs=rngs)
    self.dropout = nnx.Dropout(options.dropout)
    self.drop_path = DropPath(drop_path_rate)

  def __call__(
    self,
    x,
    encoded,
    *,
    self_mask=None,
    cross_mask=None,
    self_bias=None,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
    drop_path_rate=None,
  ):
    """Teacher-forced pass. ``self_mask`` should include the causal mask.

    Returns the new ``x`` and ``{'self': weights, 'cross': weights}`` (``None`` values
    unless ``return_weights``). ``drop_path_rate`` as in ``EncoderBlock``.
    """
    kwargs = dict(deterministic=deterministic, rngs=rngs)
    path = dict(kwargs, rate=drop_path_rate)
    y, self_weights = self.self_attention(
      self._norm_input(x, self.norm1), mask=self_mask, bias=self_bias, return_weights=return_weights, **kwargs
    )
    x = self._add(x, self.drop_path(self.dropout(y, **kwargs), **path), self.norm1)
    y, cross_weights = self.cross_attention(
      self._norm_input(x, self.norm2), encoded, mask=cross_mask, return_weights=return_weights, **kwargs
    )
    x = self._add(x, self.drop_path(self.dropout(y, **kwargs), **path), self.norm2)
    y = self.mlp(self._norm_input(x, self.norm3), **kwargs)
    x = self._add(x, self.drop_path(y, **path), self.norm3)
    return x, {'self': self_weights, 'cross': cross_weights}

  def init_cache(self, encoded, max_length: int) -> dict:
    """The decoding cache: an empty self-attention cache and the encoder's keys and values."""
    return {
      'self': self.self_attention.init_cache(encoded.shape[0], max_length, encoded.dtype),
      'cross': self.cross_attention.cross_cache(encoded),
    }

  def decode_step(self, x, cache: dict, *, cross_mask=None, self_bias=None):
    """Runs the new tokens ``x`` (``[batch, step_len, features]``) against the cache."""
    y, self_cache = self.self_attention.decode_step(
      self._norm_input(x, self.norm1), cache['self'], bias=self_bias
    )
    x = self._add(x, y, self.norm1)
    y = self.cross_attention.attend_to_cache(self._norm_input(x, self.norm2), cache['cross'], mask=cross_mask)
    x = self._add(x, y, self.norm2)
    x = self._add(x, self.mlp(self._norm_input(x, self.norm3)), self.norm3)
    return x, {'self': self_cache, 'cross': cache['cross']}
