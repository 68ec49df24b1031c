"""The ViT's predictions on a user's images (``ImageClassification.prediction``): image files, folders
of them or uint8 arrays, read and normalised as evaluation reads its examples."""

import os
import pathlib

import numpy as np

from pipelines.image_sources import IMAGE_SUFFIXES
from trainer.errors import DataError, InputError
from trainer.predictor import batched, compiled_features
from vit.classification import ClassPrediction
from vit.input_pipeline import ImageShapes


class ImagePrediction(ClassPrediction):
  """Classes, features and attention pictures of images of ``shapes.image_shape``."""

  def __init__(self, shapes: ImageShapes, class_names: list[str]):
    super().__init__(shapes.image_shape, class_names)
    self.preparation = shapes.preparation

  def input_names(self, argument):
    """A folder names its image files (all levels down, in sorted order); anything else itself."""
    if not os.path.isdir(argument):
      return [argument]
    found = sorted(
      os.path.join(folder, name)
      for folder, _, names in os.walk(argument)
      for name in names
      if name.lower().endswith(IMAGE_SUFFIXES)
    )
    return found or [argument]

  def read_input(self, item):
    """An image file (PNG or JPEG, any size and channels) or uint8 array, as the data set holds its
    images (``ImagePreparation.read_image``): uint8 ``[H, W, C]`` at the model's size."""
    what = 'this workdir classifies images (PNG or JPEG files, folders of them, or uint8 arrays)'
    if self.preparation is None:
      raise InputError('this task was built without its data and its normalisation: it cannot predict.')
    if not isinstance(item, np.ndarray):
      if not os.path.exists(item):
        raise InputError(f'{item}: no such file; {what}.')
      if os.path.isdir(item):
        raise InputError(f'{item}: a folder without .png, .jpg or .jpeg images; {what}.')
    try:
      return self.preparation.read_image(item)
    except DataError as error:
      raise InputError(f'{error}; {what}.') from None

  def prepare(self, inputs):
    return self.preparation.prepare_images(inputs)

  def features(self, model, inputs, options):
    """The pooled pre-logits embedding (``intermediates['pre_logits']``) of each image: float32 ``[n, D]``."""
    return batched(compiled_features(model), inputs, options.batch_size, self.input_shape, self.prepare)

  def explain(self, model, item, prediction, path: pathlib.Path, title):
    from vit import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    best = prediction['classes'][0]
    caption = f'predicted {best["name"]} ({100 * best["probability"]:.1f}%)'
    return pictures.plot_attention_maps(model, self.prepare(item[None]), caption, title, path)
