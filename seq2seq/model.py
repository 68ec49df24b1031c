"""The encoder-decoder Transformer (Vaswani et al. 2017) on the shared attention modules.

Variants are strings: ``'tiny'`` and ``'small'`` (CPU-sized), ``'base'`` and ``'big'``
(the paper's two models), or ``'custom'`` with explicit ``features``, ``encoder_layers``,
``decoder_layers``, ``num_heads`` and ``mlp_features``. Both stacks are the shared ones of
``attention.stacks``. Our defaults normalise before each sublayer (``norm_placement='pre'``,
more stable, no learning-rate care) with a GELU MLP (``activation='gelu'``); the paper's
recipe is ``norm_placement='post'`` (``x = LN(x + sublayer(x))``, no final LayerNorm) and
``activation='relu'``. ``use_bias=False`` drops the biases of the attention projections (as
in the Flax WMT example). ``scan_layers`` and ``remat`` (``attention.layers``) scan both stacks
over depth and rematerialise their blocks; decoding runs the layers one by one either way.
``attention_kernel`` chooses the fused attention call or the explicit einsums, as in the ViT.
Token embeddings are scaled by sqrt(features); the source and
target may share one embedding table (``share_embeddings``, which needs one vocabulary),
and the output projection may reuse the target embedding (``tie_output``). Any 1-D
positional encoding of ``attention.positional`` serves both stacks.

Token id ``PAD_ID`` (0) is padding everywhere, and it comes after a sequence's tokens: source keys
from a sequence's length on are masked, and the decoder's self-attention is causal and masks padded
keys (given to the fused attention as sequence lengths and ``is_causal``). Packed rows (several pairs
one after another, ``seq2seq.packing``) come with ``Packing``: segment ids keep every attention
(encoder, decoder, cross) inside its pair, and positions that restart at each pair index the
additive position tables, so each pair is computed as it would be alone. The forward pass returns
``(logits, intermediates)``; the intermediates hold the attention weights of every layer
(``cross_attention_weights``: ``[batch, heads, target, source]`` per decoder layer) when
asked. ``encode``, ``init_decode_cache`` and ``decode_step`` serve incremental decoding
(``seq2seq.decoding``).
"""

import dataclasses
import math
from typing import Literal

import flax
import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from attention import (
  ACTIVATIONS,
  DTYPES,
  NORM_PLACEMENTS,
  BlockOptions,
  Decoder,
  Encoder,
  Mask,
  segment_mask,
  sequence_lengths,
)
from attention.layers import REMAT_POLICIES
from attention.multi_head import ATTENTION_KERNELS
from attention.positional import INJECTIONS, POSEMB_KINDS
from attention.scores import SCORES
from attention.stacks import StackOptions
from seq2seq.tokenizer import PAD_ID
from trainer.config_sections import from_section, to_section

# name -> (features, encoder_layers, decoder_layers, num_heads, mlp_features)
VARIANTS = {
  'tiny': (64, 2, 2, 4, 256),
  'small': (256, 3, 3, 4, 1024),
  'base': (512, 6, 6, 8, 2048),
  'big': (1024, 6, 6, 16, 4096),
}


def decode_variant(variant: str) -> dict[str, int]:
  """``'base'`` -> ``{'features': 512, 'encoder_layers': 6, ...}``."""
  if variant not in VARIANTS:
    raise ValueError(
      f'Unknown Transformer variant {variant!r}; allowed values: {", ".join(VARIANTS)}, custom.'
    )
  features, encoder_layers, decoder_layers, num_heads, mlp_features = VARIANTS[variant]
  return dict(
    features=features,
    encoder_layers=encoder_layers,
    decoder_layers=decoder_layers,
    num_heads=num_heads,
    mlp_features=mlp_features,
  )


@dataclasses.dataclass(frozen=True)
class TransformerOptions:
  """The fields of a Transformer translator's ``model`` section, with their defaults (the module
  docstring says what each does). A named ``variant`` decides the width, layer counts, heads and MLP
  (``with_variant``); ``'custom'`` takes them from these fields."""

  variant: Literal[(*VARIANTS, 'custom')] = 'small'
  features: int = 256
  encoder_layers: int = 3
  decoder_layers: int = 3
  num_heads: int = 4
  mlp_features: int = 1024
  share_embeddings: bool = False
  tie_output: bool = True
  posemb: Literal[POSEMB_KINDS] = 'sincos1d'
  posemb_injection: Literal[INJECTIONS] = 'stem'
  max_length: int = 256
  score: Literal[SCORES] = 'scaled_dot'
  dropout: float = 0.1
  attention_dropout: float = 0.0
  dtype: Literal[tuple(DTYPES)] = 'float32'
  activation: Literal[ACTIVATIONS] = 'gelu'
  norm_placement: Literal[NORM_PLACEMENTS] = 'pre'
  use_bias: bool = True
  scan_layers: bool = False
  remat: Literal[tuple(REMAT_POLICIES)] = 'none'
  attention_kernel: Literal[tuple(ATTENTION_KERNELS)] = 'auto'

  def __post_init__(self):
    if self.variant != 'custom':
      decode_variant(self.variant)

  def with_variant(self) -> 'TransformerOptions':
    """These options with a named variant's sizes in their fields."""
    return self if self.variant == 'custom' else dataclasses.replace(self, **decode_variant(self.variant))

  def block(self) -> BlockOptions:
    """What every encoder and decoder block is built with."""
    return BlockOptions.of(self)

  def stack(self, depth: int) -> StackOptions:
    """What the encoder or the decoder (of ``depth`` layers) is built with."""
    return StackOptions.of(self, depth=depth, block=self.block())


def model_options(section) -> TransformerOptions:
  """The ``TransformerOptions`` of a ``model`` section (``ConfigDict``, ``dict`` or options): its fields
  over the defaults; ``ConfigError`` naming an unknown or ill-typed field."""
  if isinstance(section, TransformerOptions):
    return section
  return from_section(TransformerOptions, section, 'model')


def model_section(section) -> ml_collections.ConfigDict:
  """A ``model`` section with every field: the defaults with ``section``'s values over them."""
  return to_section(model_options(section))


def _padding(valid: jax.Array) -> Mask:
  """Keys masked from each sequence's length on: padding comes after the tokens, so the fused
  attention is given lengths, not a dense mask."""
  return Mask(key_lengths=sequence_lengths(valid))


# A packed batch's keys beyond ``src``, ``tgt_in`` and ``tgt_out``, in ``Packing``'s field order.
PACKING_KEYS = ('src_segments', 'tgt_segments', 'src_positions', 'tgt_positions')


@flax.struct.dataclass
class Packing:
  """What packed rows add to a batch, each ``[batch, source]`` or ``[batch, target]`` int32:
  segment ids (1, 2, ... per pair, 0 on padding) and positions (0, 1, ... from each pair's start)."""

  src_segments: jax.Array
  tgt_segments: jax.Array
  src_positions: jax.Array
  tgt_positions: jax.Array

  @classmethod
  def from_batch(cls, batch) -> 'Packing | None':
    """The packing arrays of a batch, or ``None`` if its rows hold one pair each."""
    if 'src_segments' not in batch:
      return None
    return cls(*(batch[name] for name in PACKING_KEYS))


class Transformer(nnx.Module):
  """The Transformer ``options`` describe, between vocabularies of the given sizes."""

  def __init__(
    self, options: TransformerOptions, *, source_vocab_size: int, target_vocab_size: int, rngs: nnx.Rngs
  ):
    if options.share_embeddings and source_vocab_size != target_vocab_size:
      raise ValueError(
        f'share_embeddings needs one vocabulary, but the source has {source_vocab_size} '
        f'tokens and the target {target_vocab_size}.'
      )
    options = options.with_variant()
    block = options.block()
    features = options.features
    self.features = features
    self.max_length = options.max_length
    self.compute_dtype = block.dtype
    embedding_init = nnx.initializers.normal(stddev=features**-0.5)

    def embedding(vocab_size):
      return nnx.Embed(vocab_size, features, dtype=block.dtype, embedding_init=embedding_init, rngs=rngs)

    self.source_embedding = embedding(source_vocab_size)
    # One module under two names: NNX keeps a single table, updated by both uses.
    self.target_embedding = (
      self.source_embedding if options.share_embeddings else embedding(target_vocab_size)
    )
    self.encoder = Encoder(options.stack(options.encoder_layers), max_length=options.max_length, rngs=rngs)
    self.decoder = Decoder(options.stack(options.decoder_layers), max_length=options.max_length, rngs=rngs)
    self.tie_output = options.tie_output
    if not options.tie_output:
      self.output_projection = nnx.Linear(features, target_vocab_size, dtype=block.dtype, rngs=rngs)

  def _embed(self, embedding: nnx.Embed, ids: jax.Array) -> jax.Array:
    return embedding(ids) * jnp.asarray(math.sqrt(self.features), self.compute_dtype)

  def _logits(self, x: jax.Array) -> jax.Array:
    logits = self.target_embedding.attend(x) if self.tie_output else self.output_projection(x)
    return logits.astype(jnp.float32)

  def _check_length(self, length: int, what: str) -> None:
    if length > self.max_length:
      raise ValueError(
        f'{what} has {length} tokens; the model was built for at most {self.max_length} (model.max_length).'
      )

  def encode(
    self,
    src_ids: jax.Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
    return_intermediates: bool = False,
    packing: Packing | None = None,
  ):
    """``src_ids`` ``[batch, source]`` -> the encoder output ``[batch, source, features]``.

    With ``return_intermediates``, also the encoder's intermediates (attention weights when
    ``return_weights``).
    """
    self._check_length(src_ids.shape[1], 'The source')
    if packing is None:
      mask, positions = _padding(src_ids != PAD_ID), None
    else:
      mask = Mask(dense=segment_mask(packing.src_segments, packing.src_segments))
      positions = packing.src_positions
    encoded, intermediates = self.encoder(
      self._embed(self.source_embedding, src_ids),
      mask=mask,
      positions=positions,
      deterministic=deterministic,
      rngs=rngs,
      return_weights=return_weights,
    )
    return (encoded, intermediates) if return_intermediates else encoded

  def decode(
    self,
    encoded: jax.Array,
    src_ids: jax.Array,
    tgt_in_ids: jax.Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
    packing: Packing | None = None,
  ) -> tuple[jax.Array, dict]:
    """Teacher-forced decoder pass: float32 logits ``[batch, target, vocab]`` and intermediates."""
    self._check_length(tgt_in_ids.shape[1], 'The target')
    if packing is None:
      target_mask, cross_mask = _padding(tgt_in_ids != PAD_ID), _padding(src_ids != PAD_ID)
      positions = None
    else:
      target_mask = Mask(dense=segment_mask(packing.tgt_segments, packing.tgt_segments))
      cross_mask = Mask(dense=segment_mask(packing.tgt_segments, packing.src_segments))
      positions = packing.tgt_positions
    x, weights = self.decoder(
      self._embed(self.target_embedding, tgt_in_ids),
      encoded,
      target_mask=target_mask,
      cross_mask=cross_mask,
      positions=positions,
      deterministic=deterministic,
      rngs=rngs,
      return_weights=return_weights,
    )
    intermediates = {'decoder_output': x}
    if return_weights:
      intermediates['decoder_self_attention_weights'] = weights['self_attention_weights']
      intermediates['cross_attention_weights'] = weights['cross_attention_weights']
    return self._logits(x), intermediates

  def __call__(
    self,
    src_ids: jax.Array,
    tgt_in_ids: jax.Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
    packing: Packing | None = None,
  ) -> tuple[jax.Array, dict]:
    """``src_ids`` ``[batch, source]``, ``tgt_in_ids`` ``[batch, target]`` (BOS + target) ->
    float32 logits ``[batch, target, vocab]`` predicting target + EOS, and intermediates.
    ``packing``: the rows are packed (see the module docstring)."""
    encoded, encoder_intermediates = self.encode(
      src_ids,
      deterministic=deterministic,
      rngs=rngs,
      return_weights=return_weights,
      return_intermediates=True,
      packing=packing,
    )
    logits, intermediates = self.decode(
      encoded,
      src_ids,
      tgt_in_ids,
      deterministic=deterministic,
      rngs=rngs,
      return_weights=return_weights,
      packing=packing,
    )
    intermediates['encoded'] = encoded
    if return_weights:
      intermediates['encoder_attention_weights'] = encoder_intermediates['attention_weights']
    return logits, intermediates

  # Incremental decoding -------------------------------------------------------

  def init_decode_cache(self, encoded: jax.Array, max_length: int) -> list[dict]:
    """Per decoder layer: an empty self-attention cache for ``max_length`` target positions and
    the cross-attention keys and values of ``encoded``, computed once."""
    self._check_length(max_length, 'The decoding cache')
    return self.decoder.init_cache(encoded, max_length)

  def decode_step(
    self, tokens: jax.Array, cache: list[dict], src_mask: jax.Array
  ) -> tuple[jax.Array, list[dict]]:
    """``tokens`` ``[batch, step_len]`` at the cache's position -> logits ``[batch, step_len, vocab]``
    and the updated cache. ``src_mask`` ``[batch, source]`` is True at real source tokens; the
    encoder output itself is already in the cache."""
    cross_mask = _padding(src_mask)
    x, cache = self.decoder.decode_step(
      self._embed(self.target_embedding, tokens), cache, cross_mask=cross_mask
    )
    return self._logits(x), cache
