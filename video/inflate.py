"""Starting a video model from an image ViT (``vit.model.VisionTransformer``): ViViT section 3.4.

The patch kernel is inflated over the tubelet's frames (``average`` or ``central``, see
``video.model.inflate_kernel``); the class token, the spatial position table, the encoder
blocks, the final LayerNorm and (when the class counts agree) the head are copied. In
``divided`` the image blocks become the spatial sublayers and the temporal sublayers keep their
zero output projection, so a one-frame clip gives the image model's output; in
``factorised_encoder`` they become the spatial encoder; in ``spacetime`` the joint blocks.
"""

from flax import nnx

from trainer.errors import ConfigError
from video.model import VideoTransformer, inflate_kernel

_FROM_IMAGE = ('spacetime', 'factorised_encoder', 'divided')


def init_from_image_vit(video: VideoTransformer, image, method: str = 'central') -> None:
  """Overwrites ``video``'s matching parameters with ``image``'s (a ``VisionTransformer``), in place."""
  if video.attention not in _FROM_IMAGE:
    raise ConfigError(
      f'model.attention {video.attention!r} has no image-model counterpart; allowed values: {", ".join(_FROM_IMAGE)}'
    )
  if len(video.layout.blocks) != len(image.encoder.blocks):
    raise ConfigError(
      f'model.depth {len(video.layout.blocks)} differs from the image model depth {len(image.encoder.blocks)}'
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
  for video_block, image_block in zip(video.layout.blocks, image.encoder.blocks):
    nnx.update(video_block, nnx.state(image_block))
  nnx.update(video.layout.norm, nnx.state(image.encoder.norm))
  if video.head.kernel.shape == image.head.kernel.shape:
    nnx.update(video.head, nnx.state(image.head))
