"""Attention masks and the masked softmax.

A mask is a boolean array broadcastable to ``[batch, heads, q_len, k_len]``;
``True`` means "this query may attend to this key". A query row whose keys are
all masked gets all-zero weights (and so a zero output), never NaN.
"""

import jax
import jax.numpy as jnp


def padding_mask(query_valid: jax.Array | None, key_valid: jax.Array) -> jax.Array:
  """Mask from per-token validity: ``key_valid`` is ``[batch, k_len]`` (bool or 0/1).

  With ``query_valid`` (``[batch, q_len]``), padded queries attend to nothing.
  Returns ``[batch, 1, 1 or q_len, k_len]``.
  """
  mask = key_valid.astype(bool)[:, None, None, :]
  if query_valid is not None:
    mask = mask & query_valid.astype(bool)[:, None, :, None]
  return mask


def causal_mask(length: int, k_length: int | None = None, q_offset: int | jax.Array = 0) -> jax.Array:
  """``[1, 1, length, k_length]``: query ``q_offset + i`` sees keys ``0 .. q_offset + i``."""
  k_length = length if k_length is None else k_length
  q_pos = q_offset + jnp.arange(length)[:, None]
  k_pos = jnp.arange(k_length)[None, :]
  return (k_pos <= q_pos)[None, None]


def combine_masks(*masks: jax.Array | None) -> jax.Array | None:
  """Logical AND of the masks that are not ``None`` (``None`` if all are)."""
  present = [m for m in masks if m is not None]
  if not present:
    return None
  combined = present[0].astype(bool)
  for m in present[1:]:
    combined = combined & m.astype(bool)
  return combined


def masked_softmax(logits: jax.Array, mask: jax.Array | None) -> jax.Array:
  """Softmax over the last axis in float32; masked entries get exactly zero weight.

  Masked logits are replaced by a large finite negative number (not -inf, whose
  gradient through an all-masked row would be NaN), then the weights are zeroed
  where masked, so an all-masked row is all zeros and masked keys get zero gradient.
  """
  logits = logits.astype(jnp.float32)
  if mask is None:
    return jax.nn.softmax(logits, axis=-1)
  mask = jnp.broadcast_to(mask, logits.shape)
  big_negative = jnp.finfo(jnp.float32).min / 2
  weights = jax.nn.softmax(jnp.where(mask, logits, big_negative), axis=-1)
  return jnp.where(mask, weights, 0.0)


def has_any_key(mask: jax.Array | None) -> jax.Array | None:
  """``[..., q_len, 1]``: whether each query row has at least one visible key."""
  return None if mask is None else jnp.any(mask, axis=-1, keepdims=True)
