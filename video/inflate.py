"""Starting a video model from an image ViT (``vit.model.VisionTransformer``): ViViT section 3.4.

The patch kernel is inflated over the tubelet's frames (``average`` or ``central``, see
``video.model.inflate_kernel``); the class token, the spatial position table, the encoder
blocks, the final LayerNorm and (when the class counts agree) the head are copied. In
``divided`` the image blocks become the spatial sublayers and the temporal sublayers keep their
zero output projection, so a one-frame clip gives the image model's output; in
``factorised_encoder`` they become the spatial encoder; in ``spacetime`` the joint blocks.
Either model may keep its blocks scanned (``model.scan_layers``): the blocks are stacked or
unstacked on the way (``attention.layers.stack_blocks``).
"""

from flax import nnx

from attention.layers import stack_blocks, unstack_blocks
from trainer.errors import ConfigError
from video.model import VideoTransformer, inflate_kernel

_FROM_IMAGE = ('spacetime', 'factorised_encoder', 'divided')


def init_from_image_vit(video: VideoTransformer, image, method: str = 'central') -> None:
  """Overwrites ``video``'s matching parameters with ``image``'s (a ``VisionTransformer``), in place."""
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
  frames = video.tubelet_embedding.tubelet[0]
  image_kernel = image.patch_embedding.kernel[...]
  video.tubelet_embedding.kernel[...] = inflate_kernel(image_kernel, frames, method)
  video.tubelet_embedding.bias[...] = image.patch_embedding.bias[...]
  if video.pool == 'cls':
    video.class_token[...] = image.class_token[...]
  positional = image.encoder.positional
  if video.spatial_posemb in ('learn1d', 'learn2d') and positional.kind == video.spatial_posemb:
    nnx.update(video.spatial_table, nnx.state(positional.tables[0]))
  _copy_blocks(image.encoder.blocks, image.encoder.scan_layers, video.layout.blocks, video.layout.scan_layers)
  nnx.update(video.layout.norm, nnx.state(image.encoder.norm))
  if video.head.kernel.shape == image.head.kernel.shape:
    nnx.update(video.head, nnx.state(image.head))


def _copy_blocks(image_blocks, image_scanned: bool, video_blocks, video_scanned: bool) -> None:
  """The image encoder's block parameters into the video's blocks, each stack unrolled or scanned."""
  tree = {'blocks': nnx.to_pure_dict(nnx.state(image_blocks, nnx.Param))}
  if image_scanned:
    tree = unstack_blocks(tree)
  if video_scanned:
    tree = stack_blocks(tree)
  state = nnx.state(video_blocks, nnx.Param)
  nnx.replace_by_pure_dict(state, tree['blocks'])
  nnx.update(video_blocks, state)
