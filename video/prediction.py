"""The video classifier's predictions on a user's clips (``VideoClassification.prediction``): ``.npy``
clips, video files or folders of frames, read and normalised as evaluation reads its clips."""

import os

import numpy as np

from trainer.errors import DataError, InputError
from video.input_pipeline import ClipShapes
from vit.classification import ClassPrediction


class ClipPrediction(ClassPrediction):
  """Classes and attention pictures of clips of ``shapes.clip_shape``."""

  def __init__(self, shapes: ClipShapes, class_names: list[str]):
    super().__init__(shapes.clip_shape, class_names)
    self.preparation = shapes.preparation

  def read_input(self, item):
    """A clip (``.npy`` file or array ``[T, H, W, C]`` of the model's shape, a video file or a folder of
    frames) as the data set holds its clips (``ClipPreparation.read_clip``)."""
    if not isinstance(item, np.ndarray) and not os.path.exists(item):
      raise InputError(
        f'{item}: no such file or folder; this workdir classifies clips (.npy, videos such as .mp4, '
        'or folders of frames).'
      )
    if self.preparation is None:
      raise InputError('this task was built without its data and its normalisation: it cannot predict.')
    try:
      return self.preparation.read_clip(item)
    except DataError as error:
      raise InputError(str(error)) from None

  def prepare(self, inputs):
    return self.preparation.prepare_clips(inputs)

  def explain(self, model, item, prediction, path, title):
    from video import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    best = prediction['classes'][0]
    caption = f'predicted\n{best["name"]}\n({100 * best["probability"]:.1f}%)'
    return pictures.plot_clip_attention(model, self.prepare(item[None]), caption, title, path)
