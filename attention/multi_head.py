"""Multi-head attention for self- and cross-attention, with a key/value cache for decoding.

Inputs are ``[batch, length, features]``. A mask is a ``Mask`` or boolean, broadcastable to
``[batch, heads, q_len, k_len]`` (``True`` = may attend); a bias (relative
positions) is added to the logits. Two paths compute the same output: the explicit one
(heads-major matmuls, the weights as an array) and the fused ``jax.nn.dot_product_attention``
(``fused_attention``), which runs cuDNN's flash attention on a GPU where cuDNN takes the shapes
and dtype (bfloat16 or float16, head size a multiple of 8, sequence lengths it supports, ...)
and XLA's implementation of the same einsums otherwise. The fused path needs a (scaled) dot
product score, no weights asked for and no dropout on them. A model's ``attention_kernel``
option (``ATTENTION_KERNELS``) chooses:

- ``'auto'`` (the default): cuDNN's kernel on a GPU where cuDNN takes the inputs, the explicit
  path everywhere else. Where cuDNN refuses, and on a CPU, the explicit path is faster than
  XLA's implementation of the fused call (docs/results.md, "Training throughput on a GPU").
- ``'fused'``: the fused call wherever the score allows it, XLA's implementation where cuDNN refuses.
- ``'explicit'``: the explicit path.

``pad_multiple`` (a model's ``attention_pad_multiple``; 0, the default: off) pads the queries, keys
and values of the fused call to a multiple of that many positions, the padded keys masked by a key
length, and cuts the padded query rows from the output, so the numbers are the unpadded call's. JAX's
cuDNN path refuses to train on odd lengths (``"Unsupported sequence length Q 197, KV 197"``: a ViT's
class token and 14x14 patches); any even multiple gives it a length it takes. The explicit path is
never padded.
"""

import jax
import jax.numpy as jnp
from absl import logging
from flax import nnx

from attention import matmul
from attention.masks import Mask, causal_mask, combine_masks, has_any_key, masked_softmax, pad_mask
from attention.positional import Rotary
from attention.scores import AttentionScore

# A model's ``attention_kernel`` option -> ``MultiHeadAttention``'s ``fused_kernel`` (the module docstring).
ATTENTION_KERNELS = {'auto': None, 'fused': True, 'explicit': False}


def fused_attention(query, key, value, *, bias, mask, scale, xla_fallback: bool = True) -> jax.Array | None:
  """``jax.nn.dot_product_attention`` with cuDNN's kernel where it takes the inputs, XLA's elsewhere.

  ``mask`` is a boolean array or a ``Mask``; a ``Mask`` is passed as what it is: ``is_causal``,
  ``query_seq_lengths`` / ``key_value_seq_lengths``, and a dense mask only for its ``dense``
  part (cuDNN's fast paths take the first two; a dense mask costs a ``[B, H, T, S]`` tensor).
  JAX's default implementation is XLA's, even on a GPU; cuDNN must be asked for by name, and
  it refuses (while tracing, with ``ValueError`` or ``NotImplementedError``) dtypes, head sizes,
  lengths and masks it has no kernel for, such as float32 inputs. The first refusal is logged
  with cuDNN's reason; then XLA computes it, or, without ``xla_fallback``, ``None`` is returned.
  """
  options = dict(bias=bias, mask=mask, scale=scale)
  if isinstance(mask, Mask):
    options.update(
      mask=mask.dense,
      is_causal=mask.causal,
      query_seq_lengths=_int32(mask.query_lengths),
      key_value_seq_lengths=_int32(mask.key_lengths),
    )
  if options['mask'] is not None:
    options['mask'] = jnp.broadcast_to(
      options['mask'], (query.shape[0], query.shape[2], query.shape[1], key.shape[1])
    )
  if jax.default_backend() == 'gpu':
    try:
      return jax.nn.dot_product_attention(query, key, value, implementation='cudnn', **options)
    except (ValueError, NotImplementedError) as refusal:
      logging.log_first_n(logging.WARNING, 'cuDNN has no fused attention for these inputs (%s)', 1, refusal)
      if not xla_fallback:
        return None
  return jax.nn.dot_product_attention(query, key, value, **options)


def _int32(lengths):
  return None if lengths is None else lengths.astype(jnp.int32)


def padded_fused_attention(query, key, value, *, bias, mask, scale, multiple: int, xla_fallback: bool = True):
  """``fused_attention`` on queries, keys and values padded to a multiple of ``multiple`` positions
  (``[batch, length, heads, head_dim]``): the padded keys are masked by a key length, the padded
  query rows are cut from the output, so it equals the unpadded call; ``None`` as ``fused_attention``."""
  q_len, k_len = query.shape[1], key.shape[1]
  pad_q, pad_k = -q_len % multiple, -k_len % multiple
  if not pad_q and not pad_k:
    return fused_attention(query, key, value, bias=bias, mask=mask, scale=scale, xla_fallback=xla_fallback)

  def pad(x, positions):
    return jnp.pad(x, ((0, 0), (0, positions), (0, 0), (0, 0)))

  if bias is not None:  # [batch or 1, heads or 1, q_len or 1, k_len or 1]
    bias = jnp.pad(
      bias, ((0, 0), (0, 0), (0, pad_q if bias.shape[2] > 1 else 0), (0, pad_k if bias.shape[3] > 1 else 0))
    )
  context = fused_attention(
    pad(query, pad_q),
    pad(key, pad_k),
    pad(value, pad_k),
    bias=bias,
    mask=pad_mask(mask, query.shape[0], k_len, pad_q, pad_k),
    scale=scale,
    xla_fallback=xla_fallback,
  )
  return None if context is None else context[:, :q_len]


class MultiHeadAttention(nnx.Module):
  """Query, key, value and output projections (with biases if ``use_bias``) around a score.

  The projections are stored with a head axis, as the fused computation uses them:
  self-attention keeps query, key and value as one kernel ``qkv`` ``[D, 3, H, Dh]`` (bias
  ``[3, H, Dh]``), so one matmul projects all three and tensor parallelism cuts the heads;
  cross-attention (``cross_attention=True``, keys and values from another sequence of
  ``kv_features``) keeps ``query`` ``[D, H, Dh]`` and ``kv`` ``[Dkv, 2, H, Dh]``; the output
  projection ``out`` is ``[H, Dh, D]``. Every kernel and bias carries logical axis names
  (``embed``, ``qkv``/``kv``, ``heads``, ``head_dim``) as its ``out_sharding`` metadata, which
  the trainer's partitioning rules map onto the mesh.

  ``rotary`` (a ``Rotary`` handed down by the stack's positional encoding) rotates the
  queries and keys of self-attention by their positions; ``None`` leaves them as they are.
  """

  def __init__(
    self,
    num_heads: int,
    in_features: int,
    *,
    kv_features: int | None = None,
    qkv_features: int | None = None,
    out_features: int | None = None,
    score: str = 'scaled_dot',
    dropout_rate: float = 0.0,
    use_bias: bool = True,
    rotary: Rotary | None = None,
    cosine_temperature: float = 0.1,
    learn_temperature: bool = True,
    additive_features: int | None = None,
    fused_kernel: bool | None = None,
    pad_multiple: int = 0,
    cross_attention: bool = False,
    dtype=None,
    param_dtype=jnp.float32,
    rngs: nnx.Rngs,
  ):
    qkv_features = qkv_features or in_features
    if qkv_features % num_heads:
      raise ValueError(f'qkv_features ({qkv_features}) must be divisible by num_heads ({num_heads}).')
    self.num_heads = num_heads
    self.head_dim = qkv_features // num_heads
    self.dropout_rate = dropout_rate
    self.rotary = rotary
    self.dtype = dtype
    # None: the fused kernel where it is a real kernel (GPU); True or False forces the choice.
    self.fused_kernel = fused_kernel
    if pad_multiple < 0:
      raise ValueError(f'pad_multiple must be >= 0 (0: no padding), got {pad_multiple}.')
    self.pad_multiple = pad_multiple
    self.cross_attention = cross_attention
    if kv_features is not None and kv_features != in_features and not cross_attention:
      raise ValueError(
        f'kv_features ({kv_features}) differ from in_features ({in_features}): use cross_attention=True.'
      )
    kv_features = kv_features or in_features
    heads = (num_heads, self.head_dim)

    def projection(features_in, features_out, names):
      """Kernel ``[features_in, *features_out]``, bias ``features_out``, with logical axis names."""
      in_axes = (-1,) if isinstance(features_in, int) else tuple(range(-len(features_in), 0))
      return matmul.LinearGeneral(
        features_in,
        features_out,
        axis=in_axes,
        use_bias=use_bias,
        dtype=dtype,
        param_dtype=param_dtype,
        kernel_init=nnx.with_partitioning(nnx.initializers.lecun_normal(), names, eager_sharding=False),
        bias_init=nnx.with_partitioning(nnx.initializers.zeros, names[len(in_axes) :], eager_sharding=False),
        rngs=rngs,
      )

    if cross_attention:
      self.query = projection(in_features, heads, ('embed', 'heads', 'head_dim'))
      self.kv = projection(kv_features, (2, *heads), ('embed', 'kv', 'heads', 'head_dim'))
    else:
      self.qkv = projection(in_features, (3, *heads), ('embed', 'qkv', 'heads', 'head_dim'))
    self.out = projection(heads, out_features or in_features, ('heads', 'head_dim', 'embed'))
    self.score = AttentionScore(
      score,
      num_heads=num_heads,
      head_dim=self.head_dim,
      cosine_temperature=cosine_temperature,
      learn_temperature=learn_temperature,
      additive_features=additive_features,
      param_dtype=param_dtype,
      rngs=rngs,
    )
    self.dropout = nnx.Dropout(dropout_rate)

  def _rotate(self, x: jax.Array, positions: jax.Array | None) -> jax.Array:
    """RoPE on heads-split queries or keys (positions ``0 .. length - 1`` by default), if enabled."""
    if self.rotary is None:
      return x
    return self.rotary(x, jnp.arange(x.shape[1]) if positions is None else positions)

  def _project_kv(self, inputs_kv: jax.Array, positions: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    """Keys and values ``[batch, length, heads, head_dim]``."""
    packed = self.kv(inputs_kv) if self.cross_attention else self.qkv(inputs_kv)[:, :, 1:]
    return self._rotate(packed[:, :, 0], positions), packed[:, :, 1]

  def _project_q(self, inputs_q: jax.Array, positions: jax.Array | None) -> jax.Array:
    query = self.query(inputs_q) if self.cross_attention else self.qkv(inputs_q)[:, :, 0]
    return self._rotate(query, positions)

  def _project_qkv(self, inputs: jax.Array, positions: jax.Array | None) -> tuple[jax.Array, ...]:
    """Self-attention's three projections as one matmul of the ``[D, 3, H, Dh]`` kernel, as stored."""
    if self.cross_attention:
      return self._project_q(inputs, positions), *self._project_kv(inputs, positions)
    packed = self.qkv(inputs)  # [batch, length, 3, heads, head_dim]
    return self._rotate(packed[:, :, 0], positions), self._rotate(packed[:, :, 1], positions), packed[:, :, 2]

  def _attend(self, query, key, value, mask, bias, deterministic, rngs, return_weights):
    """Heads-split q/k/v -> (``[batch, q_len, features]``, weights or ``None``)."""
    weights_dropped = self.dropout_rate > 0 and not deterministic
    fused_scale = self.score.fused_scale
    auto = self.fused_kernel is None
    fused_kernel = jax.default_backend() == 'gpu' if auto else self.fused_kernel
    q_len, k_len = query.shape[1], key.shape[1]
    context = None
    if fused_kernel and fused_scale is not None and not return_weights and not weights_dropped:
      fused_bias = None if bias is None else bias.astype(query.dtype)
      fused = dict(bias=fused_bias, mask=mask, scale=fused_scale, xla_fallback=not auto)
      if self.pad_multiple:
        context = padded_fused_attention(query, key, value, multiple=self.pad_multiple, **fused)
      else:
        context = fused_attention(query, key, value, **fused)
    if context is not None:
      # The fused kernel averages the values of an all-masked row; the explicit path gives zeros.
      visible = mask.rows_with_any_key(q_len, k_len) if isinstance(mask, Mask) else has_any_key(mask)
      if visible is not None:
        context = context * jnp.transpose(visible, (0, 2, 1, 3)).astype(context.dtype)
      weights = None
    else:
      if isinstance(mask, Mask):
        mask = mask.as_array(q_len, k_len)
      logits = self.score(query, key)
      if bias is not None:
        logits = logits + bias
      weights = masked_softmax(logits, mask).astype(value.dtype)
      dropped = self.dropout(weights, deterministic=deterministic, rngs=rngs)
      context = jnp.swapaxes(jnp.einsum('bhqk,bhkd->bhqd', dropped, jnp.swapaxes(value, 1, 2)), 1, 2)
      if not return_weights:
        weights = None
    return self.out(context), weights

  def __call__(
    self,
    inputs_q: jax.Array,
    inputs_kv: jax.Array | None = None,
    *,
    mask: jax.Array | Mask | None = None,
    bias: jax.Array | None = None,
    q_positions: jax.Array | None = None,
    k_positions: jax.Array | None = None,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
  ) -> tuple[jax.Array, jax.Array | None]:
    """Self-attention (``inputs_kv=None``) or cross-attention.

    Returns the output ``[batch, q_len, out_features]`` and, if ``return_weights``,
    the attention weights ``[batch, heads, q_len, k_len]`` (before dropout).
    """
    if inputs_kv is None and q_positions is k_positions:
      query, key, value = self._project_qkv(inputs_q, q_positions)
    else:
      inputs_kv = inputs_q if inputs_kv is None else inputs_kv
      query = self._project_q(inputs_q, q_positions)
      key, value = self._project_kv(inputs_kv, k_positions)
    return self._attend(query, key, value, mask, bias, deterministic, rngs, return_weights)

  # Decoding -----------------------------------------------------------------

  def init_cache(self, batch_size: int, max_length: int, dtype=jnp.float32) -> dict[str, jax.Array]:
    """An empty self-attention cache for ``max_length`` positions."""
    shape = (batch_size, max_length, self.num_heads, self.head_dim)
    return {
      'key': jnp.zeros(shape, dtype),
      'value': jnp.zeros(shape, dtype),
      'index': jnp.zeros((), jnp.int32),
    }

  def decode_step(
    self,
    inputs_q: jax.Array,
    cache: dict[str, jax.Array],
    *,
    mask: jax.Array | Mask | None = None,
    bias: jax.Array | None = None,
  ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Causal self-attention for the ``step_len`` new tokens at ``cache['index']``.

    ``inputs_q`` is ``[batch, step_len, features]``; ``mask``, if given, is ANDed with
    the causal mask over the cache (``[batch, 1, 1 or step_len, max_length]``, e.g. padded
    prompts). Returns the output and the cache with the new keys and values written.
    """
    index = cache['index']
    step_len = inputs_q.shape[1]
    max_length = cache['key'].shape[1]
    positions = index + jnp.arange(step_len)
    query, key, value = self._project_qkv(inputs_q, positions)
    cached_key = jax.lax.dynamic_update_slice(cache['key'], key.astype(cache['key'].dtype), (0, index, 0, 0))
    cached_value = jax.lax.dynamic_update_slice(
      cache['value'], value.astype(cache['value'].dtype), (0, index, 0, 0)
    )
    if step_len == 1:  # one new token sees the cache up to itself: a key length, no dense mask
      causal = Mask(key_lengths=jnp.full((inputs_q.shape[0],), index + 1, jnp.int32))
    else:
      causal = causal_mask(step_len, max_length, q_offset=index)
    mask = combine_masks(causal, mask)
    output, _ = self._attend(
      query, cached_key.astype(query.dtype), cached_value.astype(query.dtype), mask, bias, True, None, False
    )
    return output, {'key': cached_key, 'value': cached_value, 'index': index + step_len}

  def cross_cache(self, inputs_kv: jax.Array) -> dict[str, jax.Array]:
    """Keys and values of a fixed memory (the encoder output), computed once for decoding."""
    key, value = self._project_kv(inputs_kv, None)
    return {'key': key, 'value': value}

  def attend_to_cache(
    self, inputs_q: jax.Array, cross_cache: dict[str, jax.Array], *, mask: jax.Array | Mask | None = None
  ) -> jax.Array:
    """Cross-attention from new queries to a memory prepared by ``cross_cache``."""
    query = self._project_q(inputs_q, None)
    output, _ = self._attend(query, cross_cache['key'], cross_cache['value'], mask, None, True, None, False)
    return output
