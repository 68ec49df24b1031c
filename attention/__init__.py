"""Shared Flax NNX attention modules: scores, masks, multi-head attention, positional
encodings, resampling and Transformer blocks, used by both the ViT and the translator."""

from attention.blocks import DecoderBlock, DropPath, Encoder, EncoderBlock, Mlp
from attention.masks import causal_mask, combine_masks, masked_softmax, padding_mask
from attention.multi_head import MultiHeadAttention
from attention.positional import (
                                  ADDITIVE_KINDS,
                                  INJECTIONS,
                                  POSEMB_KINDS,
                                  PositionalEncoding,
                                  check_posemb,
                                  combination_exists,
                                  sincos_1d_table,
                                  sincos_2d_table,
)
from attention.resample import RESAMPLE_METHODS, resample_axis_table, resample_grid_table
from attention.scores import SCORES, AttentionScore
