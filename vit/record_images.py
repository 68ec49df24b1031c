"""Images read from disk record by record: a records folder (``pipelines.records``), for data
sets that do not fit in memory.

Nothing is decoded up front: a batch reads its examples' records (random access), decodes
them with PIL and resizes them to ``data.image_size``; with a random resized crop
(``augment.crop_scale``), the crop window is cut from the stored image before resizing, so
a large stored image loses no detail, and the flip is done while copying the pixels. Images are converted to the channels of the first
train image (grey 'L' or 'RGB'). A record that cannot be read, or whose bytes are not an
image, is an error naming the file and the record.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Sequence

import ml_collections
import numpy as np
from PIL import Image

from pipelines.image_sources import LabelledImages
from pipelines.records import RecordFolder, RecordSplit
from trainer.errors import ConfigError, DataError

_BILINEAR = Image.Resampling.BILINEAR
#: ``crop(row, height, width) -> (left, top, right, bottom)``: where to cut example ``row`` of a batch.
CropBox = Callable[[int, int, int], tuple[int, int, int, int]]


@dataclasses.dataclass(frozen=True)
class RecordImages:
  """An image records folder, decoded batch by batch (see the module docstring)."""

  folder: RecordFolder
  class_names: list[str]
  image_shape: tuple[int, int, int]
  #: examples are decoded batch by batch, so the random resized crop is done while decoding
  decodes_examples = True

  @property
  def split_names(self) -> tuple[str, ...]:
    return tuple(self.folder.splits)

  def num_examples(self, split: str) -> int:
    return len(self.folder.splits[split])

  def examples(
    self, split: str, ids: np.ndarray, crop: CropBox | None = None, flips: np.ndarray | None = None
  ) -> LabelledImages:
    """Examples ``ids`` of ``split``, decoded to uint8 [n, H, W, C]; ``crop`` cuts each before
    resizing, and the rows where ``flips`` is set are mirrored (cheaper here than on the batch)."""
    records = self.folder.splits[split]
    images = np.empty((len(ids), *self.image_shape), np.uint8)
    labels = np.empty(len(ids), np.int32)
    for row, (index, record) in enumerate(zip(ids, records.read(ids))):
      labels[row], encoded = records.image(int(index), record)
      pixels = self._decode(records, int(index), encoded, None if crop is None else row, crop)
      images[row] = pixels[:, ::-1] if flips is not None and flips[row] else pixels
    if labels.size and labels.max() >= len(self.class_names):
      raise DataError(
        f'{records.path}: a record has class {labels.max()}; there are {len(self.class_names)} classes'
      )
    return LabelledImages(images, labels)

  def _decode(self, records: RecordSplit, index: int, encoded: bytes, row: int | None, crop: CropBox | None):
    try:
      with Image.open(io.BytesIO(encoded)) as image:
        box = None if crop is None else crop(row, image.height, image.width)
        return resized_pixels(image, self.image_shape, box)
    except (OSError, ValueError, Image.DecompressionBombError) as error:
      raise DataError(f'{records.path}: record {index} is not a readable image ({error})') from None


def resized_pixels(
  image: Image.Image, shape: tuple[int, int, int], box: tuple[int, int, int, int] | None
) -> np.ndarray:
  """uint8 [H, W, C] of ``image`` (of its window ``box``, if given) resized to ``shape``."""
  height, width, channels = shape
  resized = image.convert('L' if channels == 1 else 'RGB').resize((width, height), _BILINEAR, box=box)
  return np.asarray(resized).reshape(shape)


def load_records_source(config: ml_collections.ConfigDict) -> RecordImages:
  """Opens the records folder ``data.path``; the image shape is ``data.image_size`` and the first
  train image's channels (its size too, when ``image_size`` is not set)."""
  if not config.path:
    raise ConfigError(
      "data.path must be set for source 'records' (a folder made by python -m pipelines.convert)"
    )
  folder = RecordFolder.open(config.path, kind='images')
  train = folder.splits['train']
  if not len(train):
    raise DataError(f'{train.path} holds no records')
  _, first = train.image(0, train.read([0])[0])
  try:
    with Image.open(io.BytesIO(first)) as image:
      channels = 1 if image.mode in ('1', 'L', 'LA', 'I', 'I;16', 'F') else 3
      stored_size = (image.height, image.width)
  except (OSError, ValueError) as error:
    raise DataError(f'{train.path}: record 0 is not a readable image ({error})') from None
  height, width = _image_size(config.image_size, stored_size)
  return RecordImages(folder, list(folder.class_names), (height, width, channels))


def _image_size(image_size: Sequence[int] | None, stored_size: tuple[int, int]) -> tuple[int, int]:
  return tuple(int(side) for side in (image_size or stored_size))
