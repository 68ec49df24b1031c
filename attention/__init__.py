"""Shared Flax NNX attention modules: scores, masks, multi-head attention, positional
encodings, resampling, Transformer blocks and stacks, used by both the ViT and the translator."""

from attention.blocks import (
  ACTIVATIONS,
  NORM_PLACEMENTS,
  BlockOptions,
  DecoderBlock,
  DropPath,
  EncoderBlock,
  Mlp,
  layer_norm,
)
from attention.dtypes import DTYPES, resolve_dtype
from attention.masks import (
  Mask,
  causal_mask,
  combine_masks,
  masked_softmax,
  padding_mask,
  segment_mask,
  sequence_lengths,
)
from attention.multi_head import MultiHeadAttention
from attention.positional import (
  ADDITIVE_KINDS,
  INJECTIONS,
  POSEMB_KINDS,
  PositionalEncoding,
  Rotary,
  check_posemb,
  combination_exists,
  sincos_1d_table,
  sincos_2d_table,
)
from attention.resample import RESAMPLE_METHODS, resample_axis_table, resample_grid_table
from attention.scores import MIN_COSINE_TEMPERATURE, SCORES, AttentionScore
from attention.stacks import Decoder, Encoder
