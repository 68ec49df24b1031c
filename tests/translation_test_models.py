"""Tiny translators for model tests: a Transformer of width 8, three padded sources, and decoding a
target one token at a time through a model's cache."""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from seq2seq.architectures import make_translator

VOCAB = 24


def tiny_transformer(posemb='sincos1d', *, source_vocab_size=VOCAB, target_vocab_size=VOCAB, **fields):
  """One encoder and two decoder layers of width 8 with two heads, no dropout; ``fields`` over that."""
  section = dict(
    variant='custom', features=8, encoder_layers=1, decoder_layers=2, num_heads=2, mlp_features=16,
    max_length=40, dropout=0.0, posemb=posemb,
  )  # fmt: skip
  return make_translator(
    {**section, **fields},
    source_vocab_size=source_vocab_size,
    target_vocab_size=target_vocab_size,
    rngs=nnx.Rngs(0),
  )


def sources(seed=0):
  """Three sources of lengths 7, 4 and 2, padded with 0."""
  src = np.random.default_rng(seed).integers(4, VOCAB, size=(3, 7)).astype(np.int32)
  src[1, 4:] = 0
  src[2, 2:] = 0
  return jnp.asarray(src)


def decoded_step_by_step(model, src, tgt_in, cache_length):
  """The logits of ``tgt_in`` fed one token at a time through ``model``'s decoding cache."""
  cache = model.init_decode_cache(model.encode(src), cache_length)
  steps = []
  for position in range(tgt_in.shape[1]):
    logits, cache = model.decode_step(tgt_in[:, position : position + 1], cache, src != 0)
    steps.append(logits)
  return jnp.concatenate(steps, axis=1)
