"""Greedy and beam-search decoding with the key/value cache, batched and compiled.

Every search runs inside one ``lax.while_loop`` over target positions and stops as soon
as every sentence is done. A sentence may have at most ``source length +
max_extra_length`` tokens before its EOS (and never more than the model's positions
allow): at that position EOS is forced. Outputs are token ids ``[batch, out_length]``
without BOS, ending with EOS and padded with 0 after it.

Beam search keeps ``beam_size`` live hypotheses per sentence; of the ``2 * beam_size``
best extensions, the non-EOS ones refill the beam and EOS ones among the first
``beam_size`` are finished (as in fairseq, so beam size 1 is exactly greedy search).
Finished hypotheses are ranked by log-probability / ((5 + length) / 6)^alpha (GNMT;
length counts the EOS). A sentence is done when no live hypothesis can beat its best
finished one any more (even at its length limit, where the penalty favours it most), or
when it has ``beam_size`` finished hypotheses (fairseq's early stop: waiting for the bound
alone decodes most sentences nearly to their length limit). A done sentence's result is
frozen, so it does not depend on the other sentences of its batch.

``greedy_search(use_cache=False)`` and ``beam_search(use_cache=False)`` rerun the whole decoder
over the growing prefix at every step: they are the references that the cached searches
must equal, and the baselines of ``benchmarks/decode_speed.py``.
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from seq2seq.model import Transformer
from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID

NEG_INF = -1.0e9  # finite, so that sums and differences of impossible scores stay finite


def output_length(model: Transformer, source_length: int, max_extra_length: int) -> int:
  """Positions in the output buffer: room for ``source + extra`` tokens and the EOS."""
  return min(source_length + max_extra_length, model.max_length - 1) + 1


def _eos_positions(src_ids: jax.Array, max_extra_length: int, out_length: int) -> jax.Array:
  """``[batch]``: the output position where each sentence must end."""
  source_lengths = jnp.sum(src_ids != PAD_ID, axis=1)
  return jnp.minimum(source_lengths + max_extra_length, out_length - 1)


def length_penalty(length: jax.Array, alpha: float) -> jax.Array:
  """GNMT's ((5 + length) / 6)^alpha."""
  return ((5.0 + length) / 6.0) ** alpha


def _never_special(logits: jax.Array, bos_id: int) -> jax.Array:
  """Logits ``[..., vocab]`` with padding and BOS ruled out as next tokens (a decoder that
  met padding in its own prefix would mask it, so cached and uncached decoding would differ)."""
  vocab = jnp.arange(logits.shape[-1])
  return jnp.where((vocab == PAD_ID) | (vocab == bos_id), NEG_INF, logits)


def greedy_search(
  model: Transformer,
  src_ids: jax.Array,
  *,
  max_extra_length: int = 50,
  eos_id: int | None = EOS_ID,
  bos_id: int = BOS_ID,
  use_cache: bool = True,
) -> jax.Array:
  """The most likely token at each step.

  ``use_cache=False`` reruns the decoder over the whole output buffer at each step instead of
  reading the key/value cache (the same result, slowly: the reference and the baseline of
  ``benchmarks/decode_speed.py``). ``eos_id=None`` never stops early (for timing: every sentence
  runs to the full output length).
  """
  batch_size = src_ids.shape[0]
  out_length = output_length(model, src_ids.shape[1], max_extra_length)
  eos_at = _eos_positions(src_ids, max_extra_length, out_length)
  encoded = model.encode(src_ids)
  cache = model.init_decode_cache(encoded, out_length) if use_cache else None

  def next_token_logits(step, tokens, cache):
    """``[batch, vocab]`` logits of each sentence's next token, and the new cache."""
    if use_cache:
      last = jnp.where(
        step == 0, bos_id, jax.lax.dynamic_index_in_dim(tokens, step - 1, axis=1, keepdims=False)
      )
      logits, cache = model.decode_step(last[:, None], cache, src_ids != PAD_ID)
      return logits[:, 0], cache
    tgt_in = jnp.concatenate([jnp.full((batch_size, 1), bos_id, jnp.int32), tokens[:, :-1]], axis=1)
    logits, _ = model.decode(encoded, src_ids, tgt_in)
    return jax.lax.dynamic_index_in_dim(logits, step, axis=1, keepdims=False), cache

  def not_done(state):
    step, _, finished, _ = state
    return (step < out_length) & ~jnp.all(finished)

  def next_token(state):
    step, tokens, finished, cache = state
    logits, cache = next_token_logits(step, tokens, cache)
    token = jnp.argmax(_never_special(logits, bos_id), axis=-1).astype(jnp.int32)
    if eos_id is not None:
      token = jnp.where(step >= eos_at, eos_id, token)
    token = jnp.where(finished, PAD_ID, token)
    tokens = tokens.at[:, step].set(token)
    if eos_id is not None:
      finished = finished | (token == eos_id)
    return step + 1, tokens, finished, cache

  state = (
    jnp.zeros((), jnp.int32),
    jnp.zeros((batch_size, out_length), jnp.int32),
    jnp.zeros((batch_size,), bool),
    cache,
  )
  return jax.lax.while_loop(not_done, next_token, state)[1]


def _gather_beams(x: jax.Array, beams: jax.Array) -> jax.Array:
  """``x`` ``[batch, beam, ...]``, ``beams`` ``[batch, k]`` -> ``[batch, k, ...]``."""
  return jax.vmap(lambda row, index: row[index])(x, beams)


def _reorder_self_attention_cache(cache: list[dict], beams: jax.Array, beam_size: int) -> list[dict]:
  """Each sentence's live hypotheses take the self-attention keys and values of the beams they
  extend; the cross-attention cache is the same for every beam of a sentence and stays."""

  def reorder(x):
    if x.ndim == 0:  # the shared write index
      return x
    per_sentence = x.reshape(-1, beam_size, *x.shape[1:])
    return _gather_beams(per_sentence, beams).reshape(x.shape)

  return [dict(layer, self=jax.tree.map(reorder, layer['self'])) for layer in cache]


def beam_search(
  model: Transformer,
  src_ids: jax.Array,
  *,
  beam_size: int = 4,
  alpha: float = 0.6,
  max_extra_length: int = 50,
  eos_id: int | None = EOS_ID,
  bos_id: int = BOS_ID,
  use_cache: bool = True,
) -> tuple[jax.Array, jax.Array]:
  """The best finished hypothesis per sentence ``[batch, out_length]`` and its score ``[batch]``.

  ``use_cache=False`` reruns the decoder over every hypothesis's whole prefix at each step
  instead of reading the key/value cache (the same result, slowly: the reference and the
  baseline of ``benchmarks/decode_speed.py``). ``eos_id=None`` never ends a hypothesis (for
  timing: every sentence fills the output buffer) and returns the best live one.
  """
  batch_size = src_ids.shape[0]
  k = beam_size
  out_length = output_length(model, src_ids.shape[1], max_extra_length)
  eos_at = _eos_positions(src_ids, max_extra_length, out_length)
  best_possible_penalty = length_penalty(eos_at + 1.0, alpha)
  src_per_beam = jnp.repeat(src_ids, k, axis=0)
  src_mask = src_per_beam != PAD_ID
  encoded_per_beam = jnp.repeat(model.encode(src_ids), k, axis=0)
  cache = model.init_decode_cache(encoded_per_beam, out_length) if use_cache else None

  def next_token_logits(step, alive, cache):
    """``[batch * k, vocab]`` logits of each live hypothesis's next token, and the new cache."""
    if use_cache:
      last = jnp.where(
        step == 0, bos_id, jax.lax.dynamic_index_in_dim(alive, step - 1, axis=2, keepdims=False)
      )
      logits, cache = model.decode_step(last.reshape(batch_size * k, 1), cache, src_mask)
      return logits[:, 0], cache
    prefixes = alive.reshape(batch_size * k, out_length)
    tgt_in = jnp.concatenate([jnp.full((batch_size * k, 1), bos_id, jnp.int32), prefixes[:, :-1]], axis=1)
    logits, _ = model.decode(encoded_per_beam, src_per_beam, tgt_in)
    return jax.lax.dynamic_index_in_dim(logits, step, axis=1, keepdims=False), cache

  def not_done(state):
    step, done = state[0], state[5]
    return (step < out_length) & ~jnp.all(done)

  def extend(state):
    step, alive, alive_logp, finished, finished_scores, done, cache = state
    logits, cache = next_token_logits(step, alive, cache)
    logp = jax.nn.log_softmax(_never_special(logits, bos_id)).reshape(batch_size, k, -1)
    vocab_size = logp.shape[-1]
    if eos_id is not None:
      only_eos = (jnp.arange(vocab_size) == eos_id)[None, None, :]
      logp = jnp.where((step >= eos_at)[:, None, None] & ~only_eos, NEG_INF, logp)
    candidates = (alive_logp[:, :, None] + logp).reshape(batch_size, k * vocab_size)
    top_logp, top_index = jax.lax.top_k(candidates, 2 * k)
    top_beam, top_token = top_index // vocab_size, (top_index % vocab_size).astype(jnp.int32)
    top_seqs = _gather_beams(alive, top_beam).at[:, :, step].set(top_token)
    is_eos = (top_token == eos_id) if eos_id is not None else jnp.zeros_like(top_token, bool)

    # Live beam: the k best extensions that do not end here.
    live_logp, live_pick = jax.lax.top_k(jnp.where(is_eos, NEG_INF, top_logp), k)
    alive = _gather_beams(top_seqs, live_pick)
    if use_cache:
      cache = _reorder_self_attention_cache(cache, _gather_beams(top_beam, live_pick), k)

    # Finished: EOS among the k best extensions joins the k best finished so far, until the
    # sentence is done (so its result does not depend on how long other sentences run).
    new_scores = jnp.where(
      is_eos[:, :k] & (top_logp[:, :k] > NEG_INF / 2) & ~done[:, None],
      top_logp[:, :k] / length_penalty(step + 1.0, alpha),
      NEG_INF,
    )
    merged_scores = jnp.concatenate([finished_scores, new_scores], axis=1)
    merged_seqs = jnp.concatenate([finished, top_seqs[:, :k]], axis=1)
    finished_scores, finished_pick = jax.lax.top_k(merged_scores, k)
    finished = _gather_beams(merged_seqs, finished_pick)
    best_possible = live_logp[:, 0] / best_possible_penalty
    done = (
      done
      | (finished_scores[:, -1] > NEG_INF / 2)
      | (finished_scores[:, 0] > best_possible)
      | (live_logp[:, 0] <= NEG_INF / 2)
    )
    return step + 1, alive, live_logp, finished, finished_scores, done, cache

  alive_logp = jnp.tile(jnp.asarray([0.0] + [NEG_INF] * (k - 1), jnp.float32), (batch_size, 1))
  empty = jnp.zeros((batch_size, k, out_length), jnp.int32)
  state = (
    jnp.zeros((), jnp.int32),
    empty,
    alive_logp,
    empty,
    jnp.full((batch_size, k), NEG_INF, jnp.float32),
    jnp.zeros((batch_size,), bool),
    cache,
  )
  _, alive, alive_logp, finished, finished_scores, _, _ = jax.lax.while_loop(not_done, extend, state)
  if eos_id is None:
    return alive[:, 0], alive_logp[:, 0] / length_penalty(out_length, alpha)
  return finished[:, 0], finished_scores[:, 0]


@functools.partial(jax.jit, static_argnames=('graphdef', 'beam_size', 'alpha', 'max_extra_length'))
def _compiled_translate(graphdef, state, src_ids, *, beam_size, alpha, max_extra_length):
  model = nnx.merge(graphdef, state)
  if beam_size == 1:
    return greedy_search(model, src_ids, max_extra_length=max_extra_length)
  return beam_search(model, src_ids, beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length)[0]


def translate(
  model: Transformer,
  src_ids: jax.Array,
  *,
  beam_size: int = 1,
  alpha: float = 0.6,
  max_extra_length: int = 50,
) -> jax.Array:
  """Compiled search: greedy when ``beam_size`` is 1, else beam search. Compiled once per
  model structure, settings and source shape."""
  if beam_size < 1:
    raise ValueError(f'beam_size must be at least 1, got {beam_size}.')
  graphdef, state = nnx.split(model)
  return _compiled_translate(
    graphdef, state, src_ids, beam_size=beam_size, alpha=float(alpha), max_extra_length=max_extra_length
  )
