"""The video classifier: tubelet embedding, space-time positions, one of four attention layouts, a head.

A clip ``[batch, T, H, W, C]`` is cut into tubelets of ``t x p x p`` pixels (one matmul, as the
ViT's patch embedding), giving ``T/t`` time steps of ``(H/p) x (W/p)`` patches. Positions:
``spatial_posemb`` (an additive 2-D option of ``attention.positional``: ``none``, ``learn1d``,
``learn2d``, ``sincos1d``, ``sincos2d``; or ``learn3d``, one learned table over every time step
and patch, which needs ``temporal_posemb='none'``) and ``temporal_posemb`` (``none``, ``learn1d``,
``sincos1d``, ``relative``: a bias in every temporal attention). Additive tables are added to
the tubelet tokens (the temporal one, in ``factorised_encoder``, to the frame features before
the temporal encoder, as in ViViT). Heads: ``cls`` or ``gap`` as in the ViT. The layouts are in
``video.layouts``; the forward pass returns ``(logits, intermediates)``. ``scan_layers`` and
``remat`` (``attention.layers``) scan every stack of blocks over depth and rematerialise its
blocks, as in the ViT; ``STACKS`` names the stacks for ``stack_blocks`` / ``unstack_blocks``.
``attention_kernel`` chooses the fused attention call or the explicit einsums, as in the ViT.
``VideoOptions`` are the fields of a config's ``model`` section and the one place their defaults live;
``make_video_model`` builds the model from a section (or from options), and ``model_section`` gives
a section back complete.
"""

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx
from flax.nnx.nn.dtypes import promote_dtype

from attention import DTYPES, BlockOptions
from attention.layers import REMAT_POLICIES
from attention.multi_head import ATTENTION_KERNELS
from attention.positional import KINDS, Tokens, kinds
from attention.scores import SCORES
from trainer.config_sections import from_section, to_section
from trainer.errors import ConfigError
from video import layouts

# the additive kinds of ``attention.positional`` and ``learn3d``; in time, the 1-D additive and bias kinds
SPATIAL_POSEMBS = ('none', *kinds(adds_table=True), 'learn3d')
TEMPORAL_POSEMBS = (
  'none',
  *kinds(adds_table=True, needs_grid=False),
  *kinds(biases_attention=True, needs_grid=False),
)
POOLS = ('cls', 'gap')
STACKS = layouts.STACKS
_LAYOUT_CLASSES = {
  'spacetime': layouts.SpaceTime,
  'factorised_encoder': layouts.FactorisedEncoder,
  'divided': layouts.Divided,
  'factorised_dot_product': layouts.FactorisedDotProduct,
}


def token_grid(clip_shape, tubelet) -> tuple[int, int, int]:
  """``(time steps, patch rows, patch columns)`` of a ``(T, H, W, C)`` clip; ``ConfigError`` if not divisible."""
  frames, height, width, _ = clip_shape
  t, p_h, p_w = tubelet
  if frames % t or height % p_h or width % p_w:
    raise ConfigError(
      f'clip shape (T, H, W) = {(frames, height, width)} is not divisible by the tubelet (t, p, p) = {tuple(tubelet)}'
    )
  return frames // t, height // p_h, width // p_w


@dataclasses.dataclass(frozen=True)
class VideoOptions:
  """The fields of a video model's ``model`` section, with their defaults (the module docstring and
  ``video.layouts`` say what each does)."""

  attention: Literal[layouts.LAYOUTS] = 'divided'
  width: int = 64
  depth: int = 4
  temporal_depth: int = 2
  num_heads: int = 4
  mlp_dim: int = 128
  tubelet: tuple[int, int, int] = (1, 8, 8)
  spatial_posemb: Literal[SPATIAL_POSEMBS] = 'learn1d'
  temporal_posemb: Literal[TEMPORAL_POSEMBS] = 'learn1d'
  pool: Literal[POOLS] = 'cls'
  score: Literal[SCORES] = 'scaled_dot'
  dropout: float = 0.0
  attention_dropout: float = 0.0
  drop_path: float = 0.0
  head_zero_init: bool = True
  dtype: Literal[tuple(DTYPES)] = 'float32'
  scan_layers: bool = False
  remat: Literal[tuple(REMAT_POLICIES)] = 'none'
  attention_kernel: Literal[tuple(ATTENTION_KERNELS)] = 'auto'

  def __post_init__(self):
    if self.spatial_posemb == 'learn3d' and self.temporal_posemb != 'none':
      raise ConfigError(
        "model.spatial_posemb 'learn3d' already encodes time; temporal_posemb must be 'none', "
        f'got {self.temporal_posemb!r}'
      )

  def block(self) -> BlockOptions:
    """What every block of every layout is built with."""
    return BlockOptions.of(self)


def model_options(section) -> VideoOptions:
  """The ``VideoOptions`` of a ``model`` section (``ConfigDict``, ``dict`` or options): its fields over
  the defaults; ``ConfigError`` naming an unknown or ill-typed field."""
  return section if isinstance(section, VideoOptions) else from_section(VideoOptions, section, 'model')


def model_section(section) -> ml_collections.ConfigDict:
  """A ``model`` section with every field: the defaults with ``section``'s values over them."""
  return to_section(model_options(section))


class TubeletEmbedding(nnx.Module):
  """Cuts clips into non-overlapping ``t x p_h x p_w`` tubelets and projects each to ``width``.

  ``kernel`` ``[t, p_h, p_w, C, width]`` (LeCun-normal) and ``bias`` ``[width]`` are those of a 3-D
  convolution whose stride is its window, computed as one matmul (see ``vit.model.PatchEmbedding``).
  """

  def __init__(self, channels: int, width: int, tubelet, *, dtype=None, rngs: nnx.Rngs):
    self.tubelet = tuple(tubelet)
    self.dtype = dtype
    self.kernel = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (*self.tubelet, channels, width)))
    self.bias = nnx.Param(jnp.zeros((width,)))

  def __call__(self, clips: jax.Array) -> jax.Array:
    """``[batch, T, H, W, C]`` -> ``[batch, T/t, patches, width]``, patches in row-major order."""
    (t, p_h, p_w), (batch, frames, height, width, channels) = self.tubelet, clips.shape
    steps, rows, columns = frames // t, height // p_h, width // p_w
    tubelets = clips.reshape(batch, steps, t, rows, p_h, columns, p_w, channels)
    tubelets = tubelets.transpose(0, 1, 3, 5, 2, 4, 6, 7).reshape(batch, steps, rows * columns, -1)
    kernel = self.kernel[...].reshape(-1, self.kernel.shape[-1])  # [t, p_h, p_w, C]: the same order
    tubelets, kernel, bias = promote_dtype((tubelets, kernel, self.bias[...]), dtype=self.dtype)
    return jnp.matmul(tubelets, kernel) + bias


def inflate_kernel(image_kernel: jax.Array, frames: int, method: str) -> jax.Array:
  """An image patch kernel ``[p, p, C, D]`` as a tubelet kernel ``[frames, p, p, C, D]`` (ViViT 3.4).

  ``average``: the image kernel / frames at every frame (a static clip embeds as its image);
  ``central``: the image kernel at frame ``frames // 2``, zeros elsewhere.
  """
  if method == 'average':
    return jnp.repeat(image_kernel[None] / frames, frames, axis=0)
  if method == 'central':
    return jnp.zeros((frames, *image_kernel.shape), image_kernel.dtype).at[frames // 2].set(image_kernel)
  raise ValueError(f'unknown inflation {method!r}; allowed values: average, central')


class VideoTransformer(nnx.Module):
  """The video model ``options`` describe, for ``num_classes`` classes of clips ``clip_shape``
  ``(T, H, W, C)``."""

  def __init__(self, options: VideoOptions, *, num_classes: int, clip_shape, rngs: nnx.Rngs):
    self.grid = token_grid(clip_shape, options.tubelet)
    steps, rows, columns = self.grid
    block = options.block()
    width = options.width
    self.attention, self.pool = options.attention, options.pool
    self.spatial_posemb, self.temporal_posemb = options.spatial_posemb, options.temporal_posemb
    self.tubelet_embedding = TubeletEmbedding(
      clip_shape[-1], width, options.tubelet, dtype=block.dtype, rngs=rngs
    )
    self.class_token = nnx.Param(jnp.zeros((1, 1, width))) if options.pool == 'cls' else None
    spatial, temporal = options.spatial_posemb, options.temporal_posemb
    spacetime = Tokens(dim=width, length=steps * rows * columns)
    self.spacetime_table = KINDS['learn1d'](spacetime, rngs=rngs) if spatial == 'learn3d' else None
    space = Tokens(dim=width, length=rows * columns, grid=(rows, columns))
    additive = spatial != 'learn3d' and KINDS[spatial].adds_table
    self.spatial_table = KINDS[spatial](space, rngs=rngs) if additive else None
    time = Tokens(dim=width, length=steps)
    self.temporal_table = KINDS[temporal](time, rngs=rngs) if KINDS[temporal].adds_table else None
    self.dropout = nnx.Dropout(options.dropout)
    self.layout = _LAYOUT_CLASSES[options.attention](options, block, num_frames=steps, rngs=rngs)
    head_init = nnx.initializers.zeros if options.head_zero_init else nnx.initializers.lecun_normal()
    self.head = nnx.Linear(width, num_classes, kernel_init=head_init, rngs=rngs)

  def embed(self, clips: jax.Array) -> jax.Array:
    """Tubelet tokens ``[batch, time, space, width]`` with the additive positions added."""
    tokens = self.tubelet_embedding(clips)
    if self.spacetime_table is not None:
      tokens = tokens + self.spacetime_table().reshape(tokens.shape[1:]).astype(tokens.dtype)
    if self.spatial_table is not None:
      tokens = tokens + self.spatial_table()[None, None].astype(tokens.dtype)
    if self.temporal_table is not None and self.attention != 'factorised_encoder':
      tokens = tokens + self.temporal_table()[None, :, None].astype(tokens.dtype)
    return tokens

  def __call__(
    self,
    clips: jax.Array,
    *,
    deterministic: bool = True,
    rngs: nnx.Rngs | None = None,
    return_weights: bool = False,
  ) -> tuple[jax.Array, dict]:
    """``clips`` ``[batch, T, H, W, C]`` -> float32 logits ``[batch, classes]`` and intermediates.

    Intermediates: ``pre_logits``, ``grid`` (time steps, patch rows, patch columns) and, when
    ``return_weights``, ``attention_weights`` (a dict per layer keyed by the attended axes, see
    ``video.layouts.AXES`` for their dimensions).
    """
    tokens = self.dropout(self.embed(clips), deterministic=deterministic, rngs=rngs)
    class_token = None if self.class_token is None else self.class_token[...].astype(tokens.dtype)
    options = dict(deterministic=deterministic, rngs=rngs, return_weights=return_weights)
    if self.attention == 'factorised_encoder' and self.temporal_table is not None:
      options['time_table'] = self.temporal_table()
    features, weights = self.layout(tokens, class_token, **options)
    intermediates = {'pre_logits': features, 'grid': self.grid}
    if return_weights:
      intermediates['attention_weights'] = weights
    return self.head(features).astype(jnp.float32), intermediates


def make_video_model(section, *, num_classes: int, clip_shape, rngs: nnx.Rngs) -> VideoTransformer:
  """The ``VideoTransformer`` a ``config.model`` section describes (a ``ConfigDict`` or ``dict`` whose
  missing fields take their ``VideoOptions`` defaults, or ``VideoOptions``), for ``num_classes``
  classes of clips ``clip_shape`` ``(T, H, W, C)``."""
  return VideoTransformer(
    model_options(section), num_classes=num_classes, clip_shape=tuple(clip_shape), rngs=rngs
  )
