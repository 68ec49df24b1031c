"""TensorFlow Datasets image sets, read offline: random access, in memory, or streamed.

Nothing is ever downloaded. A data set that is not prepared in `data_dir` fails at once
with a FileNotFoundError naming the data set, the directory searched and the command that
prepares it. Examples must have an 'image' and a 'label' feature; only the splits 'train',
'validation' and 'test' are used.

Sets prepared as ArrayRecord (`tfds build NAME --file_format array_record`) are read with
random access through `tfds.data_source` (`TfdsRandomAccess`, chosen by `data.random_access`,
None = whenever the set is prepared that way): nothing is loaded up front, each batch
decodes only its examples, and the in-memory determinism contract holds in full (exact
resume, two processes = one), however big the set. TensorFlow does not read these.

Sets prepared as TFRecord (tfds's default) are read with tf.data. Small ones (cifar10, mnist, ...) are decoded once into uint8 numpy arrays, so everything
after loading is numpy. A set whose train split would exceed 4 GiB as uint8 (imagenet2012)
is streamed with tf.data instead (`TfdsStream`), which weakens the determinism contract:
- each process reads its own even share of the train split (not a slice of a global
  batch), shuffled with a buffer seeded by (seed, start_step, process_index); an
  uninterrupted run is reproducible, but resuming at start_step starts a fresh shuffle
  rather than replaying the batches an uninterrupted run would have seen;
- augmentation randomness is still drawn per (seed, step) for the global batch and sliced;
- mixup pairs rows within each process's batch.
Evaluation keeps the in-memory contract: every process reads the whole split in order and
takes its slice of each global batch.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import ml_collections
import numpy as np
from PIL import Image

from pipelines.image_sources import SPLIT_NAMES, InMemoryImages, LabelledImages
from trainer.errors import ConfigError, DataError
from trainer.io.tfds_import import import_tensorflow_on_cpu, import_tfds_on_cpu, prepared_builder
from vit.record_images import CropBox, resized_pixels

_STREAM_ABOVE_BYTES = 4 * 2**30
_LOAD_BATCH_SIZE = 1024
_STREAM_SHUFFLE_BUFFER = 4096


def load_tfds_source(config: ml_collections.ConfigDict) -> TfdsRandomAccess | InMemoryImages | TfdsStream:
  """Opens TFDS data set `config.name` from `config.data_dir`: random access, loaded or streamed."""
  builder = prepared_builder(config, 'cifar10', ' (sets like imagenet2012 also need --manual_dir)')
  features = builder.info.features
  if 'image' not in features or 'label' not in features:
    raise DataError(
      f"tfds data set {config.name!r} needs 'image' and 'label' features, it has {sorted(features)}"
    )
  # Mocked data sets (tfds.testing.mock_data) carry no split metadata.
  split_sizes = {
    name: split.num_examples for name, split in builder.info.splits.items() if name in SPLIT_NAMES
  } or {'train': 0, 'test': 0}
  if 'train' not in split_sizes:
    raise DataError(f"tfds data set {config.name!r} has no 'train' split")

  stored_height, stored_width, channels = features['image'].shape
  height, width = config.image_size or (stored_height, stored_width)
  if height is None or width is None:
    raise ConfigError(f'tfds data set {config.name!r} has images of varying size; set data.image_size')
  resize_to = None if (height, width) == (stored_height, stored_width) else (height, width)
  class_names = list(features['label'].names)

  random_access = config.random_access
  if random_access is None:
    random_access = str(builder.info.file_format).lower().endswith('array_record')
  if random_access:
    return _random_access(builder, config, class_names, (height, width, channels), split_sizes)
  streaming = config.streaming
  if streaming is None:
    streaming = split_sizes['train'] * height * width * channels > _STREAM_ABOVE_BYTES
  if streaming:
    return TfdsStream(builder, class_names, (height, width, channels), split_sizes, resize_to)
  return InMemoryImages(class_names, {split: _load_split(builder, split, resize_to) for split in split_sizes})


def _random_access(builder, config, class_names, image_shape, split_sizes) -> TfdsRandomAccess:
  try:
    sources = {split: builder.as_data_source(split=split) for split in split_sizes}
  except Exception as error:  # tfds raises several kinds when the ArrayRecord files are absent
    raise DataError(
      f'tfds data set {config.name!r} cannot be read with random access ({error}); it needs ArrayRecord '
      f'files: prepare it with `tfds build {config.name} --data_dir {builder.data_dir_root} '
      '--file_format array_record`, or set data.random_access=False to read its TFRecords with tf.data'
    ) from None
  return TfdsRandomAccess(config.name, class_names, image_shape, sources)


@dataclasses.dataclass(frozen=True)
class TfdsRandomAccess:
  """A TFDS set read example by example from its ArrayRecord files (see the module docstring)."""

  name: str
  class_names: list[str]
  image_shape: tuple[int, int, int]
  sources: dict[str, Any]  # split -> tfds data source
  #: examples are decoded batch by batch, so the random resized crop is done while decoding
  decodes_examples = True

  @property
  def split_names(self) -> tuple[str, ...]:
    return tuple(self.sources)

  def num_examples(self, split: str) -> int:
    return len(self.sources[split])

  def examples(
    self, split: str, ids: np.ndarray, crop: CropBox | None = None, flips: np.ndarray | None = None
  ) -> LabelledImages:
    """Examples ``ids`` of ``split`` as uint8 [n, H, W, C]; ``crop`` and ``flips`` as for records folders."""
    images = np.empty((len(ids), *self.image_shape), np.uint8)
    labels = np.empty(len(ids), np.int32)
    for row, index in enumerate(ids):
      try:
        example = self.sources[split][int(index)]
      except Exception as error:
        raise DataError(
          f'tfds data set {self.name!r} split {split!r}: cannot read example {index}: {error}'
        ) from None
      pixels = np.asarray(example['image'])
      image = Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
      box = None if crop is None else crop(row, image.height, image.width)
      resized = resized_pixels(image, self.image_shape, box)
      images[row] = resized[:, ::-1] if flips is not None and flips[row] else resized
      labels[row] = example['label']
    return LabelledImages(images, labels)


def _decode_example(example: dict[str, Any], resize_to: tuple[int, int] | None) -> tuple:
  tf = import_tensorflow_on_cpu()
  image = example['image']
  if resize_to is not None:
    image = tf.image.resize(image, resize_to, antialias=True)
    image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
  return image, tf.cast(example['label'], tf.int32)


def _decoded_batches(
  dataset: Any,
  batch_size: int,
  resize_to: tuple[int, int] | None,
  shuffle_seed: int | None = None,
) -> Iterator[LabelledImages]:
  """Batches of (resized) uint8 images; with a shuffle_seed, shuffled and no short last one."""
  tfds = import_tfds_on_cpu()
  tf = import_tensorflow_on_cpu()
  dataset = dataset.map(
    functools.partial(_decode_example, resize_to=resize_to),
    num_parallel_calls=tf.data.AUTOTUNE,
  )
  if shuffle_seed is not None:  # after resizing, so the buffer holds small images
    dataset = dataset.shuffle(_STREAM_SHUFFLE_BUFFER, seed=shuffle_seed)
  dataset = dataset.batch(batch_size, drop_remainder=shuffle_seed is not None).prefetch(2)
  for images, labels in tfds.as_numpy(dataset):
    yield LabelledImages(images, labels)


def _load_split(builder: Any, split: str, resize_to: tuple[int, int] | None) -> LabelledImages:
  dataset = builder.as_dataset(split=split, shuffle_files=False)
  batches = list(_decoded_batches(dataset, _LOAD_BATCH_SIZE, resize_to))
  if not batches:
    raise DataError(f'tfds data set {builder.name!r} split {split!r} is empty')
  return LabelledImages(
    np.concatenate([batch.images for batch in batches]),
    np.concatenate([batch.labels for batch in batches]),
  )


@dataclasses.dataclass(frozen=True)
class TfdsStream:
  """A TFDS data set read from disk batch by batch (see the module docstring)."""

  builder: Any
  class_names: list[str]
  image_shape: tuple[int, int, int]
  split_sizes: dict[str, int]
  resize_to: tuple[int, int] | None

  def num_examples(self, split: str) -> int:
    return self.split_sizes[split]

  def train_batches(
    self,
    batch_size: int,
    *,
    seed: int,
    start_step: int,
    process_index: int,
    process_count: int,
  ) -> Iterator[LabelledImages]:
    """Endless shuffled batches of `batch_size` (per process) from this process's share."""
    tfds = import_tfds_on_cpu()
    shuffle_seed = int(np.random.SeedSequence([seed, start_step, process_index]).generate_state(1)[0])
    dataset = self.builder.as_dataset(
      split=tfds.even_splits('train', n=process_count)[process_index],
      shuffle_files=True,
      read_config=tfds.ReadConfig(shuffle_seed=shuffle_seed),
    )
    return _decoded_batches(dataset.repeat(), batch_size, self.resize_to, shuffle_seed)

  def eval_batches(self, split: str, batch_size: int) -> Iterator[LabelledImages]:
    """Consecutive global batches of `split` in order; the last one may be short."""
    dataset = self.builder.as_dataset(split=split, shuffle_files=False)
    return _decoded_batches(dataset, batch_size, self.resize_to)
