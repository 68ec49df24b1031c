"""The Vision Transformer (Dosovitskiy et al. 2021) on the shared attention modules.

Variants are strings ``'<size>/<patch>'`` (``'Ti/16'``, ``'S/16'``, ``'B/16'``,
``'L/16'``, ``'H/14'``, ``'g/14'``, ``'G/14'``, any patch size such as ``'S/4'``), or ``'custom'`` with
explicit ``width``, ``depth``, ``num_heads``, ``mlp_dim`` and ``patch_size``.
Heads: ``cls`` (class token), ``gap`` (global average pooling), ``map``
(attention pooling with a learned probe). The forward pass returns
``(logits, intermediates)``; intermediates hold the pre-logits features and, when
asked, the attention weights of every layer.

Numerics that differ between published code bases are options, so that a loaded
checkpoint computes what its own code computes: ``activation`` (``'gelu'``, the tanh
approximation of the ViT and big_vision code; ``'gelu_exact'``, erf), ``layernorm_epsilon``
(of every LayerNorm), ``pre_logits`` (a Dense + tanh of that size before the head, as the
ImageNet-21k ViT checkpoints have; 0 for none) and ``sincos2d_layout`` (``'rows_cols'``, ours, or
``'big_vision'``: ``[sin(x w), cos(x w), sin(y w), cos(y w)]``, ``w_i = 10000^(-i/(D/4-1))``;
``attention.positional``). Each is handed to the modules that use it when they are built.
``scan_layers`` and ``remat`` (``attention.layers``) scan the encoder over depth and
rematerialise its blocks, as big_vision's ``scan`` and ``remat_policy``. ``attention_kernel``
(``'auto'``, ``'fused'``, ``'explicit'``; ``attention.multi_head``) chooses between the fused
attention call (cuDNN's kernel on a GPU) and the explicit einsums; ``'auto'`` takes cuDNN's kernel
where cuDNN takes the inputs, the einsums elsewhere. ``attention_pad_multiple`` (0: off) pads the
fused call's tokens to a multiple of it, with the padded keys masked, so that cuDNN takes them: JAX's
cuDNN path refuses to train on an odd length such as B/16's 197 tokens at 224x224.

The architectures of timm's and Hugging Face's ViTs are options too, each off by default:
``reg_tokens`` (learned register tokens after the class token, left out of the pooling; DINOv2),
``layer_scale`` (initial value of a learned scale on each residual branch; DeiT III, DINOv2),
``norm_pre`` (a LayerNorm after the position embedding, before the blocks; CLIP), ``fc_norm``
(the final LayerNorm after the pooling instead of before it), ``patch_bias`` (False: a patch
embedding without bias; CLIP) and ``activation='quick_gelu'`` (CLIP). Pooling (``gap``, ``map``)
reads the patch tokens only, never the prefix tokens.

``distill_token`` (DeiT, Touvron et al. 2021) adds a learned token after the class token (or as the
only prefix token, with ``gap`` or ``map``) whose output feeds a head of its own; the returned logits
are the mean of the two heads' (DeiT's evaluation), and the intermediates hold each head's logits
(``class_logits``, ``distill_logits``) for a distillation loss (``vit.distillation``).

``ViTOptions`` are the fields of a config's ``model`` section and the one place their defaults live;
``make_vit`` builds the model from a section (or from options), and ``model_section`` gives a
section back complete.
"""

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx
from flax.nnx.nn.dtypes import promote_dtype

from attention import ACTIVATIONS, DTYPES, BlockOptions, Encoder, Mlp, matmul
from attention.blocks import attention_layer, layer_norm
from attention.layers import REMAT_POLICIES
from attention.multi_head import ATTENTION_KERNELS
from attention.positional import INJECTIONS, POSEMB_KINDS, SINCOS2D_LAYOUTS
from attention.scores import SCORES
from attention.stacks import StackOptions
from trainer.config_sections import from_section, to_section

# name -> (width, depth, mlp_dim, num_heads), as in the ViT and DeiT papers.
VARIANTS = {
  'Ti': (192, 12, 768, 3),
  'S': (384, 12, 1536, 6),
  'B': (768, 12, 3072, 12),
  'L': (1024, 24, 4096, 16),
  'H': (1280, 32, 5120, 16),
  'g': (1408, 40, 6144, 16),  # big_vision's larger variants (Zhai et al. 2022)
  'G': (1664, 48, 8192, 16),
}
POOLS = ('cls', 'gap', 'map')


def decode_variant(variant: str) -> dict[str, int]:
  """``'S/16'`` -> ``{'width': 384, 'depth': 12, 'mlp_dim': 1536, 'num_heads': 6, 'patch_size': 16}``."""
  size, _, patch = variant.partition('/')
  if size not in VARIANTS or not patch.isdigit() or int(patch) < 1:
    raise ValueError(
      f"Unknown ViT variant {variant!r}; use '<size>/<patch>' with size one of "
      f"{', '.join(VARIANTS)} (e.g. 'S/16', 'Ti/4'), or 'custom'."
    )
  width, depth, mlp_dim, num_heads = VARIANTS[size]
  return dict(width=width, depth=depth, mlp_dim=mlp_dim, num_heads=num_heads, patch_size=int(patch))


@dataclasses.dataclass(frozen=True)
class ViTOptions:
  """The fields of a ViT's ``model`` section, with their defaults (the module docstring says what each
  does). A named ``variant`` (``'S/16'``) decides the width, depth, heads, MLP and patch size
  (``with_variant``); ``'custom'`` takes them from these fields."""

  variant: str = 'custom'
  width: int = 192
  depth: int = 6
  num_heads: int = 3
  mlp_dim: int = 384
  patch_size: int | tuple[int, int] = 4
  pool: Literal[POOLS] = 'cls'
  posemb: Literal[POSEMB_KINDS] = 'learn1d'
  posemb_injection: Literal[INJECTIONS] = 'stem'
  score: Literal[SCORES] = 'scaled_dot'
  dropout: float = 0.0
  attention_dropout: float = 0.0
  drop_path: float = 0.0
  head_zero_init: bool = True
  activation: Literal[ACTIVATIONS] = 'gelu'
  layernorm_epsilon: float = 1e-6
  pre_logits: int = 0
  sincos2d_layout: Literal[SINCOS2D_LAYOUTS] = 'rows_cols'
  reg_tokens: int = 0
  layer_scale: float = 0.0
  norm_pre: bool = False
  fc_norm: bool = False
  patch_bias: bool = True
  distill_token: bool = False
  scan_layers: bool = False
  remat: Literal[tuple(REMAT_POLICIES)] = 'none'
  attention_kernel: Literal[tuple(ATTENTION_KERNELS)] = 'auto'
  attention_pad_multiple: int = 0
  dtype: Literal[tuple(DTYPES)] = 'float32'

  def __post_init__(self):
    if self.variant != 'custom':
      decode_variant(self.variant)
    if self.reg_tokens < 0:
      raise ValueError(f'reg_tokens must be >= 0, got {self.reg_tokens}.')

  def with_variant(self) -> 'ViTOptions':
    """These options with a named variant's width, depth, heads, MLP and patch size in their fields."""
    return self if self.variant == 'custom' else dataclasses.replace(self, **decode_variant(self.variant))

  def block(self) -> BlockOptions:
    """What every encoder block is built with."""
    return BlockOptions.of(self)

  def stack(self) -> StackOptions:
    """What the encoder is built with (the sizes of a named variant in the fields: ``with_variant``)."""
    return StackOptions.of(
      self,
      features=self.width,
      mlp_features=self.mlp_dim,
      block=self.block(),
      drop_path_rate=self.drop_path,
      input_norm=self.norm_pre,
      final_norm=not self.fc_norm,
    )


def model_options(section) -> ViTOptions:
  """The ``ViTOptions`` of a ``model`` section (``ConfigDict``, ``dict`` or options): its fields over the
  defaults; ``ConfigError`` naming an unknown or ill-typed field."""
  return section if isinstance(section, ViTOptions) else from_section(ViTOptions, section, 'model')


def model_section(section) -> ml_collections.ConfigDict:
  """A ``model`` section with every field: the defaults with ``section``'s values over them."""
  return to_section(model_options(section))


class PatchEmbedding(nnx.Module):
  """Cuts images into non-overlapping patches and projects each to ``width`` features.

  The parameters are those of a convolution whose stride is its window: ``kernel``
  ``[patch_h, patch_w, channels, width]`` (LeCun-normal) and ``bias`` ``[width]`` (zeros),
  drawn as ``nnx.Conv`` draws them. It is computed as one matmul of the cut-out patches
  with the reshaped kernel, which gives the convolution's numbers (the patches do not
  overlap, so nothing is duplicated) while XLA:CPU computes the kernel's gradient much
  faster for a matmul than for a strided convolution.
  """

  def __init__(
    self,
    channels: int,
    width: int,
    patch: tuple[int, int],
    *,
    dtype=None,
    use_bias: bool = True,
    param_dtype=jnp.float32,
    rngs: nnx.Rngs,
  ):
    self.patch = tuple(patch)
    self.dtype = dtype
    kernel_init, bias_init = nnx.initializers.lecun_normal(), nnx.initializers.zeros
    self.kernel = nnx.Param(kernel_init(rngs.params(), (*self.patch, channels, width), param_dtype))
    self.bias = nnx.Param(bias_init(rngs.params(), (width,), param_dtype)) if use_bias else None

  def __call__(self, images: jax.Array) -> jax.Array:
    """``[batch, H, W, C]`` -> ``[batch, tokens, width]``, tokens in row-major grid order."""
    (patch_h, patch_w), (batch, height, image_width, channels) = self.patch, images.shape
    grid_h, grid_w = height // patch_h, image_width // patch_w
    patches = images.reshape(batch, grid_h, patch_h, grid_w, patch_w, channels)
    patches = patches.transpose(0, 1, 3, 2, 4, 5).reshape(
      batch, grid_h * grid_w, patch_h * patch_w * channels
    )
    kernel = self.kernel[...].reshape(patch_h * patch_w * channels, -1)  # [ph, pw, C, width]: the same order
    bias = None if self.bias is None else self.bias[...]
    patches, kernel, bias = promote_dtype((patches, kernel, bias), dtype=self.dtype)
    return matmul.dense(patches, kernel, bias)


class AttentionPoolingHead(nnx.Module):
  """A learned probe token attends over all tokens, followed by a residual MLP (big_vision's MAP).
  ``options`` give its activation, LayerNorm epsilon and dtype; it has no dropout."""

  def __init__(self, width: int, num_heads: int, mlp_dim: int, options: BlockOptions, *, rngs: nnx.Rngs):
    self.probe = nnx.Param(nnx.initializers.xavier_uniform()(rngs.params(), (1, 1, width)))
    self.attention = attention_layer(num_heads, width, options, cross_attention=True, rngs=rngs)
    self.norm = layer_norm(width, options, rngs=rngs)
    self.mlp = Mlp(width, mlp_dim, options, rngs=rngs)

  def __call__(self, tokens, *, return_weights: bool = False):
    probe = jnp.broadcast_to(self.probe[...].astype(tokens.dtype), (tokens.shape[0], 1, tokens.shape[-1]))
    pooled, weights = self.attention(probe, tokens, return_weights=return_weights)
    pooled = pooled + self.mlp(self.norm(pooled))
    return pooled[:, 0], weights


class VisionTransformer(nnx.Module):
  """The ViT ``options`` describe, for ``num_classes`` classes of images ``image_shape`` ``(H, W, C)``."""

  def __init__(
    self, options: ViTOptions, *, num_classes: int, image_shape: tuple[int, int, int], rngs: nnx.Rngs
  ):
    options = options.with_variant()
    block = options.block()
    width, pool = options.width, options.pool
    height, image_width, channels = image_shape
    patch_size = options.patch_size
    patch = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
    if height % patch[0] or image_width % patch[1]:
      raise ValueError(
        f'Image size {height}x{image_width} is not divisible by the patch size {patch[0]}x{patch[1]}.'
      )
    self.grid = (height // patch[0], image_width // patch[1])
    self.pool = pool
    self.compute_dtype = block.dtype
    self.patch_embedding = PatchEmbedding(
      channels, width, patch, dtype=block.dtype, use_bias=options.patch_bias, rngs=rngs
    )
    # The prefix tokens, in order: class token, distillation token, register tokens.
    self.num_prefix = (1 if pool == 'cls' else 0) + (1 if options.distill_token else 0) + options.reg_tokens
    # An optional part the options leave out is None.
    self.class_token = nnx.Param(jnp.zeros((1, 1, width))) if pool == 'cls' else None
    self.distill_index = 1 if pool == 'cls' else 0
    # DeiT's initialisation of the distillation token; a zero token would start as the class token's twin
    distill_init, register_init = nnx.initializers.truncated_normal(0.02), nnx.initializers.normal(1e-6)
    self.distill_token = (
      nnx.Param(distill_init(rngs.params(), (1, 1, width))) if options.distill_token else None
    )
    self.register_tokens = (
      nnx.Param(register_init(rngs.params(), (1, options.reg_tokens, width))) if options.reg_tokens else None
    )
    self.encoder = Encoder(options.stack(), grid=self.grid, num_prefix_tokens=self.num_prefix, rngs=rngs)
    if pool == 'map':  # big_vision's head: no dropout, a dot-product score
      head = BlockOptions(
        activation=block.activation, layernorm_epsilon=block.layernorm_epsilon, dtype=block.dtype
      )
      self.pooling = AttentionPoolingHead(width, options.num_heads, options.mlp_dim, head, rngs=rngs)
    self.fc_norm = layer_norm(width, block, rngs=rngs) if options.fc_norm else None
    self.pre_logits = nnx.Linear(width, options.pre_logits, rngs=rngs) if options.pre_logits else None
    features = options.pre_logits or width
    head_init = nnx.initializers.zeros if options.head_zero_init else nnx.initializers.lecun_normal()
    self.head = nnx.Linear(features, num_classes, kernel_init=head_init, rngs=rngs)
    self.distill_head = (
      nnx.Linear(features, num_classes, kernel_init=head_init, rngs=rngs) if options.distill_token else None
    )

  def __call__(
    self,
    images: jax.Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
  ) -> tuple[jax.Array, dict]:
    """``images`` ``[batch, H, W, C]`` -> float32 logits ``[batch, classes]`` and intermediates."""
    tokens = self.patch_embedding(images)
    tokens_of = (self.class_token, self.distill_token, self.register_tokens)
    prefix = [token for token in tokens_of if token is not None]
    if prefix:
      batch, width = tokens.shape[0], tokens.shape[-1]
      prefix = [jnp.broadcast_to(p[...].astype(tokens.dtype), (batch, p.shape[1], width)) for p in prefix]
      tokens = jnp.concatenate([*prefix, tokens], axis=1)
    encoded, intermediates = self.encoder(
      tokens, deterministic=deterministic, rngs=rngs, return_weights=return_weights
    )
    patch_tokens = encoded[:, self.num_prefix :] if self.num_prefix else encoded
    if self.pool == 'cls':
      features = encoded[:, 0]
    elif self.pool == 'gap':
      features = jnp.mean(patch_tokens, axis=1)
    else:
      features, pool_weights = self.pooling(patch_tokens, return_weights=return_weights)
      if return_weights:
        intermediates['pool_attention_weights'] = pool_weights
    features = self._pre_logits(features)
    intermediates['pre_logits'] = features
    intermediates['grid'] = self.grid
    logits = self.head(features).astype(jnp.float32)
    if self.distill_head is not None:
      distill_logits = self.distill_head(self._pre_logits(encoded[:, self.distill_index]))
      intermediates['class_logits'] = logits
      intermediates['distill_logits'] = distill_logits.astype(jnp.float32)
      logits = (logits + intermediates['distill_logits']) / 2
    return logits, intermediates

  def _pre_logits(self, features: jax.Array) -> jax.Array:
    """The pooled features through ``fc_norm`` and the ``pre_logits`` layer, where the model has them."""
    if self.fc_norm is not None:
      features = self.fc_norm(features)
    return jnp.tanh(self.pre_logits(features)) if self.pre_logits is not None else features


def make_vit(
  section, *, num_classes: int, image_shape: tuple[int, int, int], rngs: nnx.Rngs
) -> VisionTransformer:
  """The ViT a ``config.model`` section describes (a ``ConfigDict`` or ``dict`` whose missing fields take
  their ``ViTOptions`` defaults, or ``ViTOptions``), for ``num_classes`` classes of images ``image_shape``
  ``(H, W, C)``."""
  return VisionTransformer(
    model_options(section), num_classes=num_classes, image_shape=image_shape, rngs=rngs
  )
