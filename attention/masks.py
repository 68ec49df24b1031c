"""Attention masks and the masked softmax.

A mask is a boolean array broadcastable to ``[batch, heads, q_len, k_len]``
(``True`` means "this query may attend to this key"), or a ``Mask``: the same mask described
by what it is (causal, padding after each sequence's length, a dense rest), which the fused
kernel is told instead of shown (cuDNN's fast paths take ``is_causal`` and sequence lengths,
not a dense mask). Packed rows, several sequences one after another, are masked by
``segment_mask`` (a dense part). A query row whose keys are all masked gets all-zero weights
(and so a zero output), never NaN.
"""

import flax
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class Mask:
  """A mask by its structure; ``as_array`` is the boolean array it stands for.

  ``causal``: query ``i`` sees keys ``0 .. i`` (queries and keys both start at position 0).
  ``key_lengths`` / ``query_lengths`` (``[batch]`` int32): keys / queries at positions from the
  length on are padding (padding after the sequence, as the translator's batches have it).
  ``dense``: a boolean array for whatever else masks, or ``None``.
  """

  key_lengths: jax.Array | None = None
  query_lengths: jax.Array | None = None
  dense: jax.Array | None = None
  causal: bool = flax.struct.field(pytree_node=False, default=False)

  def as_array(self, q_len: int, k_len: int) -> jax.Array | None:
    """The boolean mask ``[batch or 1, 1 or heads, q_len, k_len]``, or ``None`` if nothing is masked."""
    parts = [self.dense]
    if self.causal:
      parts.append(causal_mask(q_len, k_len))
    if self.key_lengths is not None:
      parts.append((jnp.arange(k_len) < self.key_lengths[:, None])[:, None, None, :])
    if self.query_lengths is not None:
      parts.append((jnp.arange(q_len) < self.query_lengths[:, None])[:, None, :, None])
    return combine_masks(*parts)

  def rows_with_any_key(self, q_len: int, k_len: int) -> jax.Array | None:
    """``[batch or 1, 1, q_len, 1]``: whether each query row sees at least one key, or ``None`` (all do).

    Read from the structure where it says it (a causal row always sees key 0), without
    building the dense mask.
    """
    if self.dense is not None:
      return has_any_key(self.as_array(q_len, k_len))
    rows = None
    if self.key_lengths is not None:
      rows = jnp.broadcast_to(
        (self.key_lengths > 0)[:, None, None, None], (len(self.key_lengths), 1, q_len, 1)
      )
    if self.query_lengths is not None:
      queries = (jnp.arange(q_len) < self.query_lengths[:, None])[:, None, :, None]
      rows = queries if rows is None else rows & queries
    return rows


def sequence_lengths(valid: jax.Array) -> jax.Array:
  """``[batch]`` int32 lengths from ``[batch, length]`` validity whose padding comes after the sequence."""
  return jnp.sum(valid.astype(jnp.int32), axis=-1)


def padding_mask(query_valid: jax.Array | None, key_valid: jax.Array) -> jax.Array:
  """Mask from per-token validity: ``key_valid`` is ``[batch, k_len]`` (bool or 0/1).

  With ``query_valid`` (``[batch, q_len]``), padded queries attend to nothing.
  Returns ``[batch, 1, 1 or q_len, k_len]``.
  """
  mask = key_valid.astype(bool)[:, None, None, :]
  if query_valid is not None:
    mask = mask & query_valid.astype(bool)[:, None, :, None]
  return mask


def segment_mask(query_segments: jax.Array, key_segments: jax.Array) -> jax.Array:
  """``[batch, 1, q_len, k_len]`` for packed rows: a query sees the keys of its own segment.

  ``query_segments`` ``[batch, q_len]`` and ``key_segments`` ``[batch, k_len]`` number the
  sequences of a row 1, 2, ... and its padding 0; padding keys are seen by no query, and padding
  queries see nothing.
  """
  same = query_segments[:, :, None] == key_segments[:, None, :]
  return (same & (key_segments[:, None, :] > 0))[:, None]


def causal_mask(length: int, k_length: int | None = None, q_offset: int | jax.Array = 0) -> jax.Array:
  """``[1, 1, length, k_length]``: query ``q_offset + i`` sees keys ``0 .. q_offset + i``."""
  k_length = length if k_length is None else k_length
  q_pos = q_offset + jnp.arange(length)[:, None]
  k_pos = jnp.arange(k_length)[None, :]
  return (k_pos <= q_pos)[None, None]


def combine_masks(*masks):
  """Logical AND of the masks that are not ``None`` (``None`` if all are).

  Boolean arrays give a boolean array; if any is a ``Mask``, the result is a ``Mask`` (arrays
  join its ``dense`` part, lengths their minimum, ``causal`` if any is).
  """
  present = [m for m in masks if m is not None]
  if not present:
    return None
  if any(isinstance(m, Mask) for m in present):
    return _combine_structured(present)
  combined = present[0].astype(bool)
  for m in present[1:]:
    combined = combined & m.astype(bool)
  return combined


def pad_mask(mask, batch: int, k_len: int, pad_q: int, pad_k: int) -> Mask:
  """``mask`` (``None``, boolean or ``Mask``) for queries and keys padded by ``pad_q`` and ``pad_k``
  positions after the ``k_len`` keys: the padded keys are cut by a key length, a dense part is padded
  with ``False``; padded queries see what the key length lets them (their rows are thrown away)."""
  structured = mask if isinstance(mask, Mask) else Mask(dense=mask)
  dense = structured.dense
  if dense is not None:
    dense = jnp.asarray(dense, bool)
    dense = dense.reshape((1,) * (4 - dense.ndim) + dense.shape)
    widths = [
      (0, 0),
      (0, 0),
      (0, pad_q if dense.shape[2] > 1 else 0),
      (0, pad_k if dense.shape[3] > 1 else 0),
    ]
    dense = jnp.pad(dense, widths, constant_values=False)
  keys = jnp.full((batch,), k_len, jnp.int32)
  if structured.key_lengths is not None:
    keys = jnp.minimum(keys, structured.key_lengths.astype(jnp.int32))
  return Mask(key_lengths=keys, query_lengths=structured.query_lengths, dense=dense, causal=structured.causal)


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


def _combine_structured(masks) -> Mask:
  structured = [m if isinstance(m, Mask) else Mask(dense=m) for m in masks]

  def joined(name, join):
    values = [getattr(m, name) for m in structured if getattr(m, name) is not None]
    if not values:
      return None
    result = values[0]
    for value in values[1:]:
      result = join(result, value)
    return result

  return Mask(
    key_lengths=joined('key_lengths', jnp.minimum),
    query_lengths=joined('query_lengths', jnp.minimum),
    dense=joined('dense', lambda a, b: a.astype(bool) & b.astype(bool)),
    causal=any(m.causal for m in structured),
  )
