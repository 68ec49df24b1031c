"""The ViT's opener of paths that are not workdirs (``trainer.predictor.path_openers``): timm and
Hugging Face transformers ViT folders and ``.safetensors`` files, read by ``vit.weights.predictor``."""

from vit.weights import sources


def opens(path) -> bool:
  """A timm or transformers folder, a ``.safetensors`` file, or a pickle (refused there in one line)."""
  return sources.is_weights_path(path)


def open_predictor(path, arch: str = ''):
  from vit.weights.predictor import load_predictor  # pylint: disable=g-import-not-at-top  (JAX, Flax)

  return load_predictor(path, arch)
