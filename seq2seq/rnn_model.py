"""The RNN encoder-decoder with attention (Bahdanau et al. 2015, Luong et al. 2015) on the shared scores.

The encoder embeds the source and runs a bidirectional GRU (``encoder_cell='gru'``) or LSTM
(``'lstm'``) over it (``nnx.Bidirectional`` of two ``nnx.RNN``, told the source lengths, so
padding never reaches a real token's state); its output at each position is the forward and
backward states side by side, zero at padding. The decoder is a GRU that starts from
``tanh(W backward_state_of_the_first_token)`` (Bahdanau's initial state) and, at each target
step ``t`` (one ``jax.lax.scan`` over the target):

  h_t  = GRU(h_{t-1}, [embedding(y_{t-1}); a_{t-1}])      input feeding (Luong)
  c_t  = sum_s softmax_s(score(h_t, W_k e_s)) e_s         attention over the encoder states e_s
  a_t  = tanh(W_c [c_t; h_t])                             the attentional vector
  p(y_t) = softmax(W_o dropout(a_t))

``attention_score`` is any score of ``attention.scores`` with one head as wide as the decoder:
``additive`` (Bahdanau's v^T tanh(W_q h + W_k e)), ``dot`` (on projected keys: Luong's
``general``), ``scaled_dot``, ``cosine``; or ``none``: the plain encoder-decoder, whose context
is the same vector at every step (the last forward and the first backward encoder state).
Dropout acts on both embeddings and on ``a_t`` before the output layer.
The softmax is ``attention.masks.masked_softmax``, the Transformer's: padding gets zero weight,
and a source of padding only gets zero weights everywhere (a zero context), never uniform ones.

The interface is the Transformer's (``seq2seq.model``): ``__call__`` returns ``(logits,
intermediates)`` (``cross_attention_weights``: one layer ``[batch, 1, target, source]``);
``encode``, ``init_decode_cache`` and ``decode_step`` serve ``seq2seq.decoding``, the decoder
state and the last attentional vector playing the role of the self-attention cache.
"""

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from attention.masks import masked_softmax
from attention.scores import SCORES, AttentionScore
from seq2seq.tokenizer import PAD_ID
from trainer.config_sections import from_section, to_section

ENCODER_CELLS = ('gru', 'lstm')
ATTENTION_SCORES = (*SCORES, 'none')


@dataclasses.dataclass(frozen=True)
class RnnOptions:
  """The fields of an RNN translator's ``model`` section, with their defaults (the sizes of Bahdanau's
  model in the PyTorch tutorial); the module docstring says what each does."""

  architecture: Literal['rnn'] = 'rnn'
  embedding_features: int = 256
  encoder_hidden: int = 512
  decoder_hidden: int = 512
  encoder_cell: Literal[ENCODER_CELLS] = 'gru'
  attention_score: Literal[ATTENTION_SCORES] = 'additive'
  dropout: float = 0.5
  share_embeddings: bool = False
  max_length: int = 256

  def __post_init__(self):
    if min(self.embedding_features, self.encoder_hidden, self.decoder_hidden) < 1:
      raise ValueError(
        'embedding_features, encoder_hidden and decoder_hidden must be at least 1, got '
        f'{self.embedding_features}, {self.encoder_hidden} and {self.decoder_hidden}.'
      )


def model_options(section) -> RnnOptions:
  """The ``RnnOptions`` of a ``model`` section (``ConfigDict``, ``dict`` or options): its fields over
  the defaults; ``ConfigError`` naming an unknown or ill-typed field."""
  return section if isinstance(section, RnnOptions) else from_section(RnnOptions, section, 'model')


def model_section(section) -> ml_collections.ConfigDict:
  """A ``model`` section with every field: the defaults with ``section``'s values over them."""
  return to_section(model_options(section))


class RNNTranslator(nnx.Module):
  """The RNN translator ``options`` describe, between vocabularies of the given sizes."""

  def __init__(self, options: RnnOptions, *, source_vocab_size: int, target_vocab_size: int, rngs: nnx.Rngs):
    if options.share_embeddings and source_vocab_size != target_vocab_size:
      raise ValueError(
        f'share_embeddings needs one vocabulary, but the source has {source_vocab_size} '
        f'tokens and the target {target_vocab_size}.'
      )
    embedding_features, encoder_hidden = options.embedding_features, options.encoder_hidden
    decoder_hidden, encoder_cell = options.decoder_hidden, options.encoder_cell
    self.encoder_cell, self.attention_score = encoder_cell, options.attention_score
    self.encoder_hidden = encoder_hidden
    self.max_length = options.max_length
    self.source_embedding = nnx.Embed(source_vocab_size, embedding_features, rngs=rngs)
    self.target_embedding = (
      self.source_embedding
      if options.share_embeddings
      else nnx.Embed(target_vocab_size, embedding_features, rngs=rngs)
    )

    def direction():
      cell_class = nnx.GRUCell if encoder_cell == 'gru' else nnx.OptimizedLSTMCell
      # rngs=False: the carry is given (zeros), so the RNNs hold no random state.
      return nnx.RNN(cell_class(embedding_features, encoder_hidden, rngs=rngs), rngs=False)

    self.encoder = nnx.Bidirectional(direction(), direction(), rngs=False)
    memory_features = 2 * encoder_hidden
    self.bridge = nnx.Linear(encoder_hidden, decoder_hidden, rngs=rngs)
    self.decoder_cell = nnx.GRUCell(embedding_features + decoder_hidden, decoder_hidden, rngs=rngs)
    if options.attention_score != 'none':
      self.key_projection = nnx.Linear(memory_features, decoder_hidden, use_bias=False, rngs=rngs)
      self.score = AttentionScore(options.attention_score, num_heads=1, head_dim=decoder_hidden, rngs=rngs)
    self.combine = nnx.Linear(memory_features + decoder_hidden, decoder_hidden, rngs=rngs)
    self.output_projection = nnx.Linear(decoder_hidden, target_vocab_size, rngs=rngs)
    self.dropout = nnx.Dropout(options.dropout)

  def _check_length(self, length: int, what: str) -> None:
    if length > self.max_length:
      raise ValueError(
        f'{what} has {length} tokens; the model was built for at most {self.max_length} (model.max_length).'
      )

  def _zero_carry(self, batch_size: int):
    zeros = jnp.zeros((batch_size, self.encoder_hidden), jnp.float32)
    return zeros if self.encoder_cell == 'gru' else (zeros, zeros)

  # Encoder ----------------------------------------------------------------------

  def encode(self, src_ids: jax.Array, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
    """``src_ids`` ``[batch, source]`` -> encoder states ``[batch, source, 2 * encoder_hidden]``
    (forward then backward; zero at padding)."""
    self._check_length(src_ids.shape[1], 'The source')
    mask = src_ids != PAD_ID
    embedded = self.dropout(self.source_embedding(src_ids), deterministic=deterministic, rngs=rngs)
    carry = self._zero_carry(src_ids.shape[0])
    encoded = self.encoder(embedded, initial_carry=(carry, carry), seq_lengths=jnp.sum(mask, axis=1))
    return jnp.where(mask[:, :, None], encoded, 0.0)

  # Decoder ----------------------------------------------------------------------

  def _memory(self, cross: dict, src_mask: jax.Array) -> dict:
    """What every decoder step reads: the encoder states, their prepared keys and the mask."""
    memory = dict(values=cross['values'], mask=src_mask)
    if self.attention_score == 'none':
      values = cross['values']
      last = jnp.maximum(jnp.sum(src_mask, axis=1) - 1, 0)
      last_forward = jnp.take_along_axis(values, last[:, None, None], axis=1)[:, 0, : self.encoder_hidden]
      memory['fixed_context'] = jnp.concatenate([last_forward, values[:, 0, self.encoder_hidden :]], -1)
    else:
      memory['keys'] = cross['keys']
    return memory

  def _attend(self, hidden: jax.Array, memory: dict) -> tuple[jax.Array, jax.Array]:
    """Decoder states ``[batch, hidden]`` -> context ``[batch, memory]`` and weights ``[batch, source]``."""
    if self.attention_score == 'none':
      return memory['fixed_context'], jnp.zeros(memory['mask'].shape, jnp.float32)
    logits = self.score.logits_for_prepared(hidden[:, None, None, :], memory['keys'])[:, 0, 0]
    weights = masked_softmax(logits, memory['mask'])
    context = jnp.einsum('bs,bsm->bm', weights.astype(memory['values'].dtype), memory['values'])
    return context, weights

  def _run_decoder(self, state: dict, embedded: jax.Array, memory: dict):
    """Scans the decoder over ``embedded`` ``[batch, steps, features]`` from ``state``: the new
    state, the attentional vectors ``[batch, steps, hidden]`` and weights ``[batch, steps, source]``."""

    def step(state, embedded_token):
      hidden, _ = self.decoder_cell(state['hidden'], jnp.concatenate([embedded_token, state['feed']], -1))
      context, weights = self._attend(hidden, memory)
      attentional = jnp.tanh(self.combine(jnp.concatenate([context, hidden], -1)))
      return dict(hidden=hidden, feed=attentional), (attentional, weights)

    state, (attentional, weights) = jax.lax.scan(step, state, jnp.swapaxes(embedded, 0, 1))
    return state, jnp.swapaxes(attentional, 0, 1), jnp.swapaxes(weights, 0, 1)

  def _cross(self, encoded: jax.Array) -> dict:
    cross = dict(values=encoded)
    if self.attention_score != 'none':
      cross['keys'] = self.score.prepare_keys(self.key_projection(encoded)[:, :, None, :])
    return cross

  def _initial_state(self, encoded: jax.Array) -> dict:
    hidden = jnp.tanh(self.bridge(encoded[:, 0, self.encoder_hidden :]))
    return dict(hidden=hidden, feed=jnp.zeros_like(hidden))

  def _logits(self, attentional, *, deterministic: bool, rngs: nnx.Rngs | None) -> jax.Array:
    attentional = self.dropout(attentional, deterministic=deterministic, rngs=rngs)
    return self.output_projection(attentional).astype(jnp.float32)

  def decode(
    self,
    encoded: jax.Array,
    src_ids: jax.Array,
    tgt_in_ids: jax.Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
  ) -> tuple[jax.Array, dict]:
    """Teacher-forced decoder pass: float32 logits ``[batch, target, vocab]`` and intermediates."""
    self._check_length(tgt_in_ids.shape[1], 'The target')
    embedded = self.dropout(self.target_embedding(tgt_in_ids), deterministic=deterministic, rngs=rngs)
    memory = self._memory(self._cross(encoded), src_ids != PAD_ID)
    _, attentional, weights = self._run_decoder(self._initial_state(encoded), embedded, memory)
    intermediates = {'decoder_output': attentional}
    if return_weights:
      intermediates['cross_attention_weights'] = [weights[:, None]]
    return self._logits(attentional, deterministic=deterministic, rngs=rngs), intermediates

  def __call__(
    self,
    src_ids: jax.Array,
    tgt_in_ids: jax.Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
  ) -> tuple[jax.Array, dict]:
    """``src_ids`` ``[batch, source]``, ``tgt_in_ids`` ``[batch, target]`` (BOS + target) ->
    float32 logits ``[batch, target, vocab]`` predicting target + EOS, and intermediates."""
    encoded = self.encode(src_ids, deterministic=deterministic, rngs=rngs)
    logits, intermediates = self.decode(
      encoded, src_ids, tgt_in_ids, deterministic=deterministic, rngs=rngs, return_weights=return_weights
    )
    intermediates['encoded'] = encoded
    return logits, intermediates

  # Incremental decoding -------------------------------------------------------

  def init_decode_cache(self, encoded: jax.Array, max_length: int) -> list[dict]:
    """One layer: the decoder's initial state (``self``, reordered with the beams) and the
    encoder states with their prepared keys (``cross``, computed once)."""
    self._check_length(max_length, 'The decoding cache')
    return [dict(self=self._initial_state(encoded), cross=self._cross(encoded))]

  def decode_step(
    self, tokens: jax.Array, cache: list[dict], src_mask: jax.Array
  ) -> tuple[jax.Array, list[dict]]:
    """``tokens`` ``[batch, step_len]`` after the cache's state -> logits ``[batch, step_len, vocab]``
    and the updated cache. ``src_mask`` ``[batch, source]`` is True at real source tokens."""
    (layer,) = cache
    memory = self._memory(layer['cross'], src_mask)
    state, attentional, _ = self._run_decoder(layer['self'], self.target_embedding(tokens), memory)
    return self._logits(attentional, deterministic=True, rngs=None), [dict(layer, self=state)]
