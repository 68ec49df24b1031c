"""A predictor for timm and Hugging Face ViT weights, with no workdir: ``load_predictor('vit-folder')``.

The model is our ViT with the options the file decides (``vit.weights.sources``), at the size the source's
preprocessing crops to (a position table of another grid is resampled, bicubic, as the sources do at
run time); the classes are the file's label names; each image is prepared as the source's own code
prepares it (``WeightsPreparation``: PIL resize of the shortest side or to a fixed size, centre crop,
``(x / 255 - mean) / std``). A file without a head predicts no classes; its ``features`` (the
pooled pre-logits embedding) and attention pictures work all the same.

  predictor = load_predictor('dinov2-small')
  predictor.features(['cat.jpg'])          # float32 [1, 384]
  predictor.explain('cat.jpg', 'cat_attention.png')
"""

import dataclasses
import os
import pathlib

import ml_collections
import numpy as np
from flax import nnx
from PIL import Image

from attention.resample import SOURCE_RESAMPLE
from trainer.errors import DataError, InputError
from trainer.predictor import Predictor
from vit.input_pipeline import ImagePreparation, ImageShapes
from vit.model import make_vit
from vit.prediction import ImagePrediction
from vit.task import ImageClassification
from vit.weights import checkpoint_npz, sources

_RESAMPLE = {'bicubic': Image.BICUBIC, 'bilinear': Image.BILINEAR}


@dataclasses.dataclass(frozen=True)
class WeightsPreparation(ImagePreparation):
  """``ImagePreparation`` that reads an image as the weights' source prepares it (``sources.Preprocessing``)."""

  preprocessing: sources.Preprocessing | None = None

  def read_image(self, image) -> np.ndarray:
    return prepare_pixels(image, self.preprocessing, self.image_shape[-1])


def prepare_pixels(image, preprocessing: sources.Preprocessing, channels: int = 3) -> np.ndarray:
  """One image file or uint8 array -> uint8 ``[H, W, channels]`` (grey for one channel, else RGB): resized and centre-cropped as ``preprocessing`` says.

  ``shortest``: the shorter side to ``size[0]``, the longer ``int(size * long / short)`` (torchvision's
  and transformers' rule); ``exact``: to ``size``. The crop's corner is ``round((H - h) / 2)``
  (torchvision's ``center_crop``), or ``(H - h) // 2`` as transformers' processors place it
  (``crop_corner``).
  """
  mode = 'L' if channels == 1 else 'RGB'
  if isinstance(image, np.ndarray):
    if image.dtype != np.uint8 or image.ndim not in (2, 3):
      raise DataError(f'an image array must be uint8 [H, W] or [H, W, C], got {image.dtype} {image.shape}')
    pil = Image.fromarray(image[..., 0] if image.ndim == 3 and image.shape[-1] == 1 else image).convert(mode)
  else:
    try:
      with Image.open(os.fspath(image)) as opened:
        pil = opened.convert(mode)
    except (OSError, ValueError, Image.DecompressionBombError) as error:
      raise DataError(f'cannot read image {image}: {error}') from None
  width, height = pil.size
  resample = _RESAMPLE[preprocessing.interpolation]
  if preprocessing.resize == 'shortest':
    side = preprocessing.size[0]
    if width <= height:
      new = (side, int(side * height / width))
    else:
      new = (int(side * width / height), side)
  else:
    new = (preprocessing.size[1], preprocessing.size[0])
  if new != pil.size:
    pil = pil.resize(new, resample)
  if preprocessing.crop:
    crop_h, crop_w = preprocessing.crop
    if preprocessing.crop_corner == 'floor':
      top, left = (new[1] - crop_h) // 2, (new[0] - crop_w) // 2
    else:
      top, left = int(round((new[1] - crop_h) / 2.0)), int(round((new[0] - crop_w) / 2.0))
    pil = pil.crop((left, top, left + crop_w, top + crop_h))
  return np.asarray(pil, np.uint8).reshape(pil.size[1], pil.size[0], channels)


class WeightsClassification(ImageClassification):
  """The ViT task over a file's weights: no data; its predictions are ``WeightsPrediction``'s."""

  # A distilled DeiT's distillation token: kept out of ``config.model``, where the ViT task asks for a
  # teacher to train it (nothing is trained here), and given to the model built.
  distill_token = False

  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    return make_vit(
      dict(self.config.model, distill_token=self.distill_token),
      num_classes=self.sizes.num_classes,
      image_shape=self.sizes.image_shape,
      rngs=rngs,
    )


class WeightsPrediction(ImagePrediction):
  """The ViT's predictions over a file's weights; predicting classes needs the file's head."""

  def __init__(self, shapes: ImageShapes, class_names: list[str], *, has_head: bool, title: str):
    super().__init__(shapes, class_names)
    self.has_head = has_head
    self.title = title  # the file's name and kind: a workdir's 'step N' means nothing here

  def predict(self, model, inputs, options):
    """Classes, as the ViT task gives them; none for weights without a head."""
    if not self.has_head:
      return [{'classes': []} for _ in inputs]
    return super().predict(model, inputs, options)

  def present(self, name, prediction):
    if not self.has_head:
      return (
        f'{name}: no classes (these weights have no classification head; --features writes the embeddings)'
      )
    return super().present(name, prediction)

  def logits(self, model, inputs, options):
    if not self.has_head:
      raise InputError('these weights have no classification head, so no logits; ask for features.')
    return super().logits(model, inputs, options)

  def explain(self, model, item, prediction, path, title):
    title = self.title or title
    if self.has_head:
      return super().explain(model, item, prediction, path, title)
    from vit import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    return pictures.plot_attention_maps(model, self.prepare(item[None]), '', title, path)


def build_model(source: sources.Weights, *, dtype: str = 'float32', report_to=None) -> nnx.Module:
  """The ViT a read source describes, with its arrays: the options the file decides, at the size its
  preprocessing crops to (a position table of another grid resampled as the source's library
  resamples it, ``attention.resample.SOURCE_RESAMPLE``), with a distilled DeiT's two heads. ``load_predictor`` and a distillation teacher
  (``vit.distillation``) build their models here; ``report_to``: a name to print adaptations under."""
  prep = source.preprocessing
  model = make_vit(
    dict(source.model, dtype=dtype),
    num_classes=max(source.num_classes, 1),
    image_shape=(*prep.image_size, source.channels),
    rngs=nnx.Rngs(0),
  )
  report = checkpoint_npz.canonical_to_model(
    model, source.canonical, resample_method=SOURCE_RESAMPLE[source.source]
  )
  adapted = [item for item in report.adapted if not item.startswith('head:')]
  if adapted and report_to is not None:
    print(f'{report_to}: {"; ".join(adapted)}', flush=True)
  return model


def load_predictor(path, arch: str = '') -> Predictor:
  """A ``trainer.predictor.Predictor`` over a timm or transformers folder or a bare timm file (with
  ``arch``); ``trainer.predictor.load_predictor(path)`` comes here for such a path."""
  source = sources.read_weights(path, arch)
  prep = source.preprocessing
  image_shape = (*prep.image_size, source.channels)
  config = ml_collections.ConfigDict(
    dict(
      task='vit.weights.predictor:WeightsClassification',
      model=dict(source.model, distill_token=False),
      data=dict(image_size=tuple(prep.image_size)),
      eval_batch_size=32,
    )
  )
  preparation = WeightsPreparation(image_shape, prep.mean, prep.std, prep)
  shapes = ImageShapes(max(source.num_classes, 1), image_shape, preparation)
  task = WeightsClassification(config, shapes)
  task.distill_token = bool(source.model.get('distill_token'))
  task.prediction = WeightsPrediction(
    shapes,
    shapes.class_names,
    has_head=source.num_classes > 0,
    title=f'{pathlib.Path(path).name} ({source.source} weights)',
  )
  model = build_model(source, report_to=path)
  names = source.class_names or ([str(i) for i in range(source.num_classes)] if source.num_classes else None)
  return Predictor(pathlib.Path(path), task, model, 0, names)
