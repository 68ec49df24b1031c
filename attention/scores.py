"""Attention scores: how a query and a key are compared, chosen by a short string.

``dot``         q . k
``scaled_dot``  q . k / sqrt(d_k)                     (Vaswani et al. 2017)
``cosine``      cos(q, k) / tau, tau fixed or learned per head, never below 0.01 (Swin V2)
``additive``    v^T tanh(W_q q + W_k k), per head         (Bahdanau et al. 2015)

Queries are ``[batch, q_len, heads, head_dim]``, keys ``[batch, k_len, heads,
head_dim]``; every score returns logits ``[batch, heads, q_len, k_len]``.

``prepare_keys`` and ``logits_for_prepared`` split a score in two, for many queries that meet
the same keys one at a time (an RNN decoder's steps): the key-side work is done once.
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx

SCORES = ('dot', 'scaled_dot', 'cosine', 'additive')
# Swin V2 bounds the cosine score's logit scale 1 / tau at 100: a learned temperature that
# falls below this one counts as this one (and gets no gradient pushing it further down).
MIN_COSINE_TEMPERATURE = 0.01


def check_score(kind: str) -> str:
  if kind not in SCORES:
    raise ValueError(f'Unknown attention score {kind!r}; allowed values: {", ".join(SCORES)}.')
  return kind


class AttentionScore(nnx.Module):
  """Computes attention logits; holds the score's parameters (cosine, additive)."""

  def __init__(
    self,
    kind: str,
    *,
    num_heads: int,
    head_dim: int,
    cosine_temperature: float = 0.1,
    learn_temperature: bool = True,
    additive_features: int | None = None,
    param_dtype=jnp.float32,
    rngs: nnx.Rngs,
  ):
    self.kind = check_score(kind)
    self.head_dim = head_dim
    self.learn_temperature = learn_temperature
    if kind == 'cosine':
      if not cosine_temperature >= MIN_COSINE_TEMPERATURE:
        raise ValueError(
          f'cosine_temperature must be at least {MIN_COSINE_TEMPERATURE} (a logit scale of at '
          f'most {1 / MIN_COSINE_TEMPERATURE:g}), got {cosine_temperature}.'
        )
      log_tau = jnp.full((num_heads,), math.log(cosine_temperature), param_dtype)
      self.log_temperature = nnx.Param(log_tau) if learn_temperature else nnx.Variable(log_tau)
    if kind == 'additive':
      features = additive_features or head_dim
      init = nnx.initializers.lecun_normal()
      self.query_kernel = nnx.Param(init(rngs.params(), (num_heads, head_dim, features), param_dtype))
      self.key_kernel = nnx.Param(init(rngs.params(), (num_heads, head_dim, features), param_dtype))
      self.energy = nnx.Param(init(rngs.params(), (num_heads, features, 1), param_dtype)[..., 0])

  @property
  def fused_scale(self) -> float | None:
    """The scale to give the fused kernel, or ``None`` if this score has no fused form."""
    if self.kind == 'scaled_dot':
      return 1.0 / math.sqrt(self.head_dim)
    if self.kind == 'dot':
      return 1.0
    return None

  def __call__(self, query: jax.Array, key: jax.Array) -> jax.Array:
    if self.kind in ('dot', 'scaled_dot'):
      # Heads-major operands: XLA:CPU's batched matmuls run faster over [batch, heads, ...].
      logits = jnp.einsum('bhqd,bhkd->bhqk', jnp.swapaxes(query, 1, 2), jnp.swapaxes(key, 1, 2))
      return logits * self.fused_scale
    if self.kind == 'cosine':
      # Norms and similarities in float32 whatever the compute dtype: scaled by up to 100,
      # bfloat16 cosines would move in steps of up to 0.5.
      cosine = jnp.einsum('bqhd,bkhd->bhqk', _unit(query), _unit(key), preferred_element_type=jnp.float32)
      log_tau = jnp.maximum(self.log_temperature[...], math.log(MIN_COSINE_TEMPERATURE))
      inverse_tau = jnp.exp(-log_tau).astype(cosine.dtype)
      return cosine * inverse_tau[None, :, None, None]
    # additive: project each side once, then combine every query-key pair.
    projected_q = jnp.einsum('bqhd,hdf->bhqf', query, self.query_kernel[...].astype(query.dtype))
    projected_k = jnp.einsum('bkhd,hdf->bhkf', key, self.key_kernel[...].astype(key.dtype))
    hidden = jnp.tanh(projected_q[:, :, :, None, :] + projected_k[:, :, None, :, :])
    return jnp.einsum('bhqkf,hf->bhqk', hidden, self.energy[...].astype(hidden.dtype))

  def prepare_keys(self, key: jax.Array) -> jax.Array:
    """The key-side work of the score, done once: the additive score's key projection
    ``[batch, heads, k_len, features]``, the cosine score's unit keys, else the keys themselves."""
    if self.kind == 'additive':
      return jnp.einsum('bkhd,hdf->bhkf', key, self.key_kernel[...].astype(key.dtype))
    if self.kind == 'cosine':
      return _unit(key)
    return key

  def logits_for_prepared(self, query: jax.Array, prepared: jax.Array) -> jax.Array:
    """What ``__call__(query, key)`` returns, given ``prepare_keys(key)``."""
    if self.kind in ('dot', 'scaled_dot'):
      return jnp.einsum('bqhd,bkhd->bhqk', query, prepared) * self.fused_scale
    if self.kind == 'cosine':
      cosine = jnp.einsum('bqhd,bkhd->bhqk', _unit(query), prepared, preferred_element_type=jnp.float32)
      log_tau = jnp.maximum(self.log_temperature[...], math.log(MIN_COSINE_TEMPERATURE))
      return cosine * jnp.exp(-log_tau)[None, :, None, None]
    projected_q = jnp.einsum('bqhd,hdf->bhqf', query, self.query_kernel[...].astype(query.dtype))
    hidden = jnp.tanh(projected_q[:, :, :, None, :] + prepared[:, :, None, :, :])
    return jnp.einsum('bhqkf,hf->bhqk', hidden, self.energy[...].astype(hidden.dtype))


def _unit(vectors: jax.Array) -> jax.Array:
  """``vectors`` divided by their L2 norm over the last axis, computed in float32."""
  wide = vectors.astype(jnp.float32)
  return (wide * jax.lax.rsqrt(jnp.sum(wide * wide, -1, keepdims=True) + 1e-12)).astype(vectors.dtype)
