"""Starting a video model from an image ViT (``vit.model.VisionTransformer``): ViViT section 3.4.

The patch kernel is inflated over the tubelet's frames (``average`` or ``central``, see
``video.model.inflate_kernel``); the class token, the spatial position table, the encoder
blocks, the final LayerNorm and (when the class counts agree) the head are copied. In
``divided`` the image blocks become the spatial sublayers and the temporal sublayers keep their
zero output projection, so a one-frame clip gives the image model's output; in
``factorised_encoder`` they become the spatial encoder; in ``spacetime`` the joint blocks.
Either model may keep its blocks scanned (``model.scan_layers``): the blocks are stacked or
unstacked on the way (``attention.layers.stack_blocks``).

The image model may come from timm or Hugging Face weights (``image_vit_from_weights``). Its layer
scale is folded into the output projections it scales (exact), a patch embedding without bias gives a
zero bias (exact); register tokens, a distillation token, ``norm_pre`` and ``fc_norm`` have no place in
the video model and are refused in one line. The video blocks compute the tanh GELU with LayerNorm epsilon 1e-6: an image
model with another activation or epsilon still initialises them, and ``init_from_image_vit`` returns
a note saying so (the one-frame clip then gives the image output only approximately).
"""

import numpy as np
from flax import nnx

from attention.blocks import LAYERNORM_EPSILON
from attention.layers import layer_of, stack_blocks, unstack_blocks
from attention.positional import KINDS
from trainer.errors import ConfigError
from video.model import VideoTransformer, inflate_kernel

_FROM_IMAGE = ('spacetime', 'factorised_encoder', 'divided')


def image_vit_from_weights(path, arch: str = '', *, num_classes: int = 1):
  """The image ``VisionTransformer`` of a timm or transformers folder, or a bare timm file with ``arch``."""
  from vit.model import make_vit  # pylint: disable=g-import-not-at-top
  from vit.weights import checkpoint_npz, sources  # pylint: disable=g-import-not-at-top

  source = sources.read_weights(path, arch)
  image_shape = (*source.image_size, source.channels)
  model = make_vit(
    source.model, num_classes=max(source.num_classes, num_classes), image_shape=image_shape, rngs=nnx.Rngs(0)
  )
  checkpoint_npz.canonical_to_model(model, source.canonical)
  return model


def _differences(video: VideoTransformer, image) -> list[str]:
  """What of ``image`` the video model computes otherwise (for the note); raises for what it cannot hold."""
  parts = {
    'register_tokens': image.register_tokens,
    'distill_token': image.distill_token,
    'fc_norm': image.fc_norm,
    'norm_pre': image.encoder.norm_pre,
  }
  extras = [name for name, part in parts.items() if part is not None]
  if extras:
    raise ConfigError(f'the image model has {", ".join(extras)}, which the video model has no place for')
  block = layer_of(image.encoder.blocks, 0)
  notes = []
  if block.mlp.activation != 'gelu':
    notes.append(f"activation {block.mlp.activation!r} (the video model's: 'gelu', tanh)")
  if block.norm1.epsilon != LAYERNORM_EPSILON:
    notes.append(f"LayerNorm epsilon {block.norm1.epsilon} (the video model's: {LAYERNORM_EPSILON})")
  return notes


def init_from_image_vit(video: VideoTransformer, image, method: str = 'central') -> list[str]:
  """Overwrites ``video``'s matching parameters with ``image``'s (a ``VisionTransformer``), in place;
  returns what the video model computes otherwise (activation, epsilon), for a note."""
  if video.attention not in _FROM_IMAGE:
    raise ConfigError(
      f'model.attention {video.attention!r} has no image-model counterpart; allowed values: {", ".join(_FROM_IMAGE)}'
    )
  if video.layout.depth != image.encoder.depth:
    raise ConfigError(
      f'model.depth {video.layout.depth} differs from the image model depth {image.encoder.depth}'
    )
  if video.pool != image.pool:
    raise ConfigError(f'model.pool {video.pool!r} differs from the image model pool {image.pool!r}')
  notes = _differences(video, image)
  frames = video.tubelet_embedding.tubelet[0]
  image_kernel = image.patch_embedding.kernel[...]
  video.tubelet_embedding.kernel[...] = inflate_kernel(image_kernel, frames, method)
  bias = image.patch_embedding.bias
  video.tubelet_embedding.bias[...] = bias[...] if bias is not None else np.zeros(image_kernel.shape[-1])
  if video.class_token is not None:
    video.class_token[...] = image.class_token[...]
  positional = image.encoder.positional
  if (
    video.spatial_table is not None
    and KINDS[video.spatial_posemb].learned
    and positional.kind == video.spatial_posemb
  ):
    nnx.update(video.spatial_table, nnx.state(positional.tables[0]))
  _copy_blocks(image.encoder.blocks, image.encoder.scan_layers, video.layout.blocks, video.layout.scan_layers)
  nnx.update(video.layout.norm, nnx.state(image.encoder.norm))
  if video.head.kernel.shape == image.head.kernel.shape:
    nnx.update(video.head, nnx.state(image.head))
  return notes


def _copy_blocks(image_blocks, image_scanned: bool, video_blocks, video_scanned: bool) -> None:
  """The image encoder's block parameters into the video's blocks, each stack unrolled or scanned."""
  tree = {'blocks': nnx.to_pure_dict(nnx.state(image_blocks, nnx.Param))}
  if image_scanned:
    tree = unstack_blocks(tree)
  for layer in tree['blocks'].values():
    _fold_layer_scale(layer)
  if video_scanned:
    tree = stack_blocks(tree)
  state = nnx.state(video_blocks, nnx.Param)
  nnx.replace_by_pure_dict(state, tree['blocks'])
  nnx.update(video_blocks, state)


def _fold_layer_scale(layer: dict) -> None:
  """A block's ``ls1`` and ``ls2`` multiplied into the attention output and second MLP layer they scale."""
  if 'ls1' not in layer:
    return
  ls1, ls2 = layer.pop('ls1'), layer.pop('ls2')
  out, fc2 = layer['attention']['out'], layer['mlp']['fc2']
  out['kernel'], out['bias'] = out['kernel'] * ls1, out['bias'] * ls1
  fc2['kernel'], fc2['bias'] = fc2['kernel'] * ls2, fc2['bias'] * ls2
