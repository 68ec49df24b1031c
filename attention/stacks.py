"""The encoder and decoder stacks: blocks behind a positional encoding, with a final LayerNorm.

A stack is built from one ``StackOptions`` (its sizes, the ``BlockOptions`` every block shares, the
positional encoding, stochastic depth, the norms, scanning and remat) and from where its tokens lie
(a patch ``grid`` or a ``max_length``, and the number of prefix tokens).
Both stacks begin with the same stem: the positional encoding is added to the tokens
and dropout is applied to the sum (as in Vaswani et al., the ViT and big_vision), so the
positional part is dropped too. ``posemb`` and ``posemb_injection`` are the option strings
of ``attention.positional``; the stack builds one ``PositionalEncoding``, adds its tables
and relative biases layer by layer and hands its ``rotary`` (RoPE) down to the attention
layers. With ``norm_placement='post'`` every block already ends in a LayerNorm, so the
stack adds no final one. Stochastic depth grows linearly from 0 at the first block to
``drop_path_rate`` at the last. Only the drop-path rate, the rotary encoding and the decoder's
``encoder_features`` are each layer's own. The encoder may
normalise the tokens once more after the stem (``input_norm``: CLIP's ``ln_pre``) and leave out its
final LayerNorm (``final_norm=False``: a model that normalises after pooling instead). ``scan_layers`` and ``remat`` choose how the blocks are kept
and run (``attention.layers``): a list run layer by layer, or one stacked block scanned over
depth, each block optionally rematerialised; the numbers are the same.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from attention.blocks import BlockOptions, DecoderBlock, EncoderBlock, layer_norm
from attention.layers import check_remat, keep_blocks, layer_inputs, layer_of, layer_options, run_layers
from attention.masks import Mask, combine_masks
from attention.positional import PositionalEncoding


@dataclasses.dataclass(frozen=True)
class StackOptions:
  """What a stack is built with, besides where its tokens lie. ``input_norm`` and ``final_norm`` are
  the encoder's (the decoder ends in a LayerNorm when its blocks are pre-norm)."""

  features: int
  depth: int
  num_heads: int
  mlp_features: int
  block: BlockOptions = BlockOptions()
  posemb: str = 'sincos1d'
  posemb_injection: str = 'stem'
  sincos2d_layout: str = 'rows_cols'
  drop_path_rate: float = 0.0
  input_norm: bool = False
  final_norm: bool = True
  scan_layers: bool = False
  remat: str = 'none'

  @classmethod
  def of(cls, options, **fields) -> 'StackOptions':
    """The stack options a model's options hold: each field of ``options`` named as one of these,
    with ``fields`` (what a model names otherwise, or decides) over them."""
    named = {f.name: getattr(options, f.name) for f in dataclasses.fields(cls) if hasattr(options, f.name)}
    return cls(**{**named, **fields})


class _Stack(nnx.Module):
  """What both stacks share: the positional encoding, the stem, the blocks and the final LayerNorm."""

  def _build_common(self, options: StackOptions, block_class, rngs, *, block_args: dict, **tokens):
    """The blocks are ``block_class``'s, each also given ``block_args``; ``tokens``: where the tokens
    lie (``max_length``, ``grid``, ``num_prefix_tokens``)."""
    self.positional = PositionalEncoding(
      options.posemb,
      options.posemb_injection,
      dim=options.features,
      num_heads=options.num_heads,
      num_layers=options.depth,
      sincos2d_layout=options.sincos2d_layout,
      param_dtype=options.block.param_dtype,
      rngs=rngs,
      **tokens,
    )
    self.dropout = nnx.Dropout(options.block.dropout)
    self.depth = options.depth
    self.scan_layers, self.remat = options.scan_layers, check_remat(options.remat)
    self.compute_dtype = options.block.dtype
    rate = options.drop_path_rate
    self.drop_path_rates = tuple(rate * i / max(self.depth - 1, 1) for i in range(self.depth))

    def make_block(rate):
      return block_class(
        options.features,
        options.num_heads,
        options.mlp_features,
        options.block,
        drop_path_rate=rate,
        rotary=self.positional.rotary,
        rngs=rngs,
        **block_args,
      )

    self.blocks = keep_blocks(make_block, self.drop_path_rates, self.scan_layers)

  def _per_layer(self, q_len, k_len, *, deterministic, rngs):
    """Each layer's inputs: position table, attention bias and, scanned, drop-path rate and dropout key."""
    per_layer = [  # the stem adds layer 0's table
      dict(
        table=self.positional.table_before(layer) if layer else None,
        bias=self.positional.attention_bias(layer, q_len, k_len),
      )
      for layer in range(self.depth)
    ]
    return layer_inputs(
      per_layer,
      self.drop_path_rates,
      scan_layers=self.scan_layers,
      remat=self.remat,
      deterministic=deterministic,
      rngs=rngs,
    )

  def _layer_options(self, inputs, *, deterministic, rngs, return_weights):
    return dict(layer_options(inputs, deterministic=deterministic, rngs=rngs), return_weights=return_weights)

  def _stem(self, x, *, positions, deterministic, rngs):
    """The first layer's positional encoding, then dropout on the sum."""
    x = self.positional.add_table(x, self.positional.table_before(0), positions)
    return self.dropout(x, deterministic=deterministic, rngs=rngs)

  def _finish(self, x):
    return x if self.norm is None else self.norm(x)


class Encoder(_Stack):
  """A stack of encoder blocks as ``options`` say. Give ``grid`` for patch grids, ``max_length`` for
  sequences."""

  def __init__(
    self,
    options: StackOptions,
    *,
    max_length: int | None = None,
    grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 0,
    rngs: nnx.Rngs,
  ):
    block = options.block
    self._build_common(
      options,
      EncoderBlock,
      rngs,
      block_args={},
      max_length=max_length,
      grid=grid,
      num_prefix_tokens=num_prefix_tokens,
    )
    self.final_norm = options.final_norm and block.norm_placement == 'pre'
    self.norm = layer_norm(options.features, block, rngs=rngs) if self.final_norm else None
    self.norm_pre = layer_norm(options.features, block, rngs=rngs) if options.input_norm else None

  def __call__(
    self,
    x,
    *,
    mask=None,
    positions=None,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
  ):
    """``x``: ``[batch, length, features]`` tokens (prefix tokens first); ``positions``
    (``[batch, length]``, packed rows: restarting at each sequence) index the additive tables,
    which otherwise take ``0 .. length-1``. Relative biases and RoPE depend on offsets only,
    so a packed sequence whose positions run on from its row's start gets the same ones.

    Returns the encoded tokens and intermediates: ``attention_weights`` (a list per
    layer, when ``return_weights``) and ``pre_norm`` (the output of the last block, before
    the final LayerNorm if there is one).
    """
    x = self._stem(x, positions=positions, deterministic=deterministic, rngs=rngs)
    if self.norm_pre is not None:
      x = self.norm_pre(x)
    per_layer = self._per_layer(x.shape[1], x.shape[1], deterministic=deterministic, rngs=rngs)

    def call(block, x, inputs):
      options = self._layer_options(
        inputs, deterministic=deterministic, rngs=rngs, return_weights=return_weights
      )
      x = self.positional.add_table(x, inputs['table'], positions)
      return block(x, mask=mask, bias=inputs['bias'], **options)

    x, all_weights = run_layers(self.blocks, x, per_layer, call, remat=self.remat, dtype=self.compute_dtype)
    intermediates = {'pre_norm': x}
    if return_weights:
      intermediates['attention_weights'] = all_weights
    return self._finish(x), intermediates


class Decoder(_Stack):
  """A stack of causal decoder blocks as ``options`` say, attending to an encoder output of
  ``encoder_features`` (default: ``options.features``); 1-D sequences only."""

  def __init__(
    self,
    options: StackOptions,
    *,
    max_length: int,
    encoder_features: int | None = None,
    rngs: nnx.Rngs,
  ):
    block = options.block
    self._build_common(
      options, DecoderBlock, rngs, block_args=dict(encoder_features=encoder_features), max_length=max_length
    )
    self.norm = layer_norm(options.features, block, rngs=rngs) if block.norm_placement == 'pre' else None

  def __call__(
    self,
    x,
    encoded,
    *,
    target_mask=None,
    cross_mask=None,
    positions=None,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
  ):
    """Teacher-forced pass over all target positions ``x`` (``[batch, target, features]``).

    ``target_mask`` (e.g. padded target keys, or a packed row's segments) is combined with the
    causal mask; ``positions`` as in ``Encoder``.
    Returns the output and intermediates: ``self_attention_weights`` and
    ``cross_attention_weights`` (lists per layer, when ``return_weights``).
    """
    length = x.shape[1]
    self_mask = combine_masks(Mask(causal=True), target_mask)
    x = self._stem(x, positions=positions, deterministic=deterministic, rngs=rngs)
    per_layer = self._per_layer(length, length, deterministic=deterministic, rngs=rngs)

    def call(block, x, inputs):
      options = self._layer_options(
        inputs, deterministic=deterministic, rngs=rngs, return_weights=return_weights
      )
      x = self.positional.add_table(x, inputs['table'], positions)
      return block(
        x, encoded, self_mask=self_mask, cross_mask=cross_mask, self_bias=inputs['bias'], **options
      )

    x, weights = run_layers(self.blocks, x, per_layer, call, remat=self.remat, dtype=self.compute_dtype)
    intermediates = {}
    if return_weights:
      intermediates = {
        'self_attention_weights': [layer['self'] for layer in weights],
        'cross_attention_weights': [layer['cross'] for layer in weights],
      }
    return self._finish(x), intermediates

  def init_cache(self, encoded: jax.Array, max_length: int) -> list[dict]:
    """Per layer: an empty self-attention cache and the keys and values of ``encoded``.

    Decoding runs the layers one by one, scanned stacks too (each layer a slice of the stack).
    """
    return [layer_of(self.blocks, layer).init_cache(encoded, max_length) for layer in range(self.depth)]

  def decode_step(self, x, cache: list[dict], *, cross_mask=None):
    """The new tokens ``x`` (``[batch, step_len, features]``) at the cache's position."""
    index = cache[0]['self']['index']
    max_length = cache[0]['self']['key'].shape[1]
    positions = index + jnp.arange(x.shape[1])
    new_cache = []
    for layer in range(self.depth):
      block = layer_of(self.blocks, layer)
      x = self.positional.add_table(x, self.positional.table_before(layer), positions)
      bias = self.positional.attention_bias(layer, x.shape[1], max_length, q_offset=index)
      x, layer_cache = block.decode_step(x, cache[layer], cross_mask=cross_mask, self_bias=bias)
      new_cache.append(layer_cache)
    return self._finish(x), new_cache
