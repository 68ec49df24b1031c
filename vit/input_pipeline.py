"""Image-classification input pipeline: load a data set once, then batch, augment, normalise.

`load_image_data(config)` checks the config and the data (raising a one-line error that
names any missing file, folder, split or data set before the long work), loads the images
and returns an `ImageData`, which yields numpy batches for training (endless, shuffled,
augmented) and evaluation (one ordered pass, padded and masked).

Config fields; `default_data_config()` has all of them with these defaults:
  source            'digits' (default) | 'tfds' | 'folder' | 'idx' | 'records':
                    digits: scikit-learn's bundled 8x8 grey digits (1,797 images, nothing to
                      download), split 1,437 train / 360 test, stratified, random_state=0;
                      pixel values 0..16 are scaled to 0..255;
                    tfds: TensorFlow Datasets set `name`, read offline from `data_dir`
                      (see vit.tfds_source, which also covers streaming huge sets);
                    folder: image files path/<split>/<class>/*.{png,jpg,jpeg}, classes
                      are the sorted class folder names of the train split;
                    idx: MNIST-style IDX files in `path` (train-images-idx3-ubyte[.gz],
                      train-labels-idx1-ubyte[.gz], t10k-... for the test split);
                    records: a records folder `path` (pipelines.records, made once by
                      `python -m pipelines.convert image-folder`), read from disk batch by
                      batch: for image sets that do not fit in memory (vit.record_images).
  name              tfds: data set name, e.g. 'cifar10', 'mnist', 'oxford_flowers102'. None.
  data_dir          tfds: TFDS data directory; None = the TFDS default.
  random_access     tfds: read the ArrayRecord files example by example (tfds.data_source);
                    None = when the set was prepared as ArrayRecord. None.
  streaming         tfds, TFRecord files: None = stream with tf.data when the train split would exceed
                    4 GiB as uint8, else load into memory; True/False force it. None.
  path              folder, idx, records: the data folder. None.
  cache_dir         folder: if set, decoded splits are cached there as .npy files keyed
                    by the file list, sizes and times (nothing is written into `path`), each
                    written whole or not at all; a damaged one is decoded again, with a
                    warning naming it. None.
  image_size        (H, W) to resize every image to (bilinear, aspect ratio not kept), or
                    None to keep the stored size (records: the first train image's);
                    needed when images differ in size. None.
  mean, std         per-channel normalisation in [0, 1] pixel units, image =
                    (pixel / 255 - mean) / std; a 1-tuple applies to all channels. None =
                    computed from the train split at load time (not possible for streamed
                    TFDS sets and records folders, which are never read whole).
  prefetch_batches  batches prepared ahead of the consumer (pipelines.steps, grain). 4.
  num_threads       grain threads preparing them. 2.
  augment.crop_padding           pad by this many pixels, then crop a random window of the
                                 original size (0 = off). 0.
  augment.crop_pad_mode          'reflect' or 'constant' (zeros) padding. 'reflect'.
  augment.flip                   random horizontal flips (leave off for digits). False.
  augment.randaugment_layers     RandAugment ops per image (0 = off). 0.
  augment.randaugment_magnitude  0..30, 10 = the usual strength (vit.image_augmentation). 10.
  augment.mixup_alpha            mixup weights ~ Beta(alpha, alpha) per example (0 = off). 0.
  augment.crop_scale             random resized crop: (low, high) area fraction of the window,
                                 e.g. (0.08, 1.0) as Inception and the ViT paper; None = off. None.
  augment.crop_ratio             its (low, high) width / height ratio. (3/4, 4/3).

Splits are 'train' and 'test', plus 'validation' where the source has one.

Determinism: the global training batch at step s depends on (seed, s) alone. Examples
come from epoch-wise permutations seeded by (seed, epoch), read as one endless sequence
(a batch may span two epochs); augmentation randomness is drawn for the whole global
batch from (seed, s) and each process takes rows [p*b/P, (p+1)*b/P). So resuming at
start_step=s replays exactly what an uninterrupted run would see (the checkpoint's step is
the pipeline's whole state), and the processes' slices together are the one-process batch.
Mixup pairs rows across the global batch. This holds for records folders too, which read
only the rows they need. (Streamed TFDS sets weaken it; see vit.tfds_source.)

Execution: batches are made by grain threads ahead of the trainer (pipelines.steps). The
example order and the augmentation draws are our own vectorised numpy, not grain's
per-record shuffle and random maps: per record, those cost more than the whole crop-and-flip
batch (benchmarks/input_pipeline.py has the numbers), and grain's per-record random maps are
keyed by the position in each process's own stream, which would break the rule that two
processes see what one does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import ml_collections
import numpy as np

from pipelines import image_sources
from pipelines.image_sources import InMemoryImages, LabelledImages
from pipelines.steps import repeated_example_ids, step_batches
from trainer.config_sections import to_section
from trainer.errors import ConfigError
from trainer.partitioning import process_rows
from vit import batch_augmentation, config_sections, record_images, tfds_source
from vit.image_augmentation import Augmentation, AugmentationDraw
from vit.record_images import RecordImages

_LOADERS = {
  'digits': image_sources.load_digits_source,
  'tfds': tfds_source.load_tfds_source,
  'folder': image_sources.load_folder_source,
  'idx': image_sources.load_idx_source,
  'records': record_images.load_records_source,
}
_AUGMENT_STREAM = 1  # the augmentation draws' random stream (pipelines.steps orders examples)


def default_data_config() -> ml_collections.ConfigDict:
  """All data config fields with their defaults (``vit.config_sections.ImageData``; see the module docstring)."""
  return to_section(config_sections.ImageData())


def load_image_data(data_config: ml_collections.ConfigDict) -> ImageData:
  """Checks the config and the data, loads it and returns the batch maker."""
  config = config_sections.SECTIONS['data'](data_config)  # complete, its fields and choices checked
  if config.image_size is not None and (len(config.image_size) != 2 or min(config.image_size) < 1):
    raise ConfigError(f'data.image_size must be (height, width), got {config.image_size}')
  if config.prefetch_batches < 1 or config.num_threads < 1:
    raise ConfigError('data.prefetch_batches and data.num_threads must be >= 1')
  augmentation = Augmentation.from_config(config.augment)

  source = _LOADERS[config.source](config)
  if augmentation.repeats > 1 and isinstance(source, tfds_source.TfdsStream):
    raise ConfigError(
      'augment.repeats needs random access to the examples; this tfds set is streamed '
      '(set data.streaming=False, or prepare it as ArrayRecord)'
    )
  height, width, channels = source.image_shape
  if augmentation.crop_padding >= min(height, width):
    raise ConfigError(
      f'augment.crop_padding {augmentation.crop_padding} must be below the image side {min(height, width)}'
    )
  mean, std = _normalisation(config, source, channels)
  return ImageData(
    num_classes=len(source.class_names),
    image_shape=(height, width, channels),
    num_train=source.num_examples('train'),
    class_names=list(source.class_names),
    mean=mean,
    std=std,
    _source=source,
    _augmentation=augmentation,
    _prefetch_batches=config.prefetch_batches,
    _num_threads=config.num_threads,
  )


@dataclasses.dataclass(frozen=True)
class ImagePreparation:
  """How an image becomes the model's input, knowing no data set: read at ``image_shape``
  (``read_image``), then normalised (``prepare_images``). Evaluation batches and predictions both go
  through it; a workdir records its fields (``ImageShapes.to_json``), so predictions
  prepare images exactly as evaluation did without the data."""

  image_shape: tuple[int, int, int]  # (H, W, C) as the model sees it
  mean: tuple[float, ...]  # per channel, in [0, 1] pixel units
  std: tuple[float, ...]

  def read_image(self, image) -> np.ndarray:
    """One image file or uint8 array as the data set holds its images (``image_sources.read_image_pixels``)."""
    return image_sources.read_image_pixels(image, self.image_shape)

  def prepare_images(self, images: np.ndarray) -> np.ndarray:
    """Pixels [n, H, W, C] in 0..255 -> float32 (pixel / 255 - mean) / std; float32
    input is normalised in place."""
    # Per-channel constants tiled along a whole row: numpy is slow on 3-long inner loops.
    width = images.shape[2]
    scale = np.tile(1 / (255 * np.asarray(self.std)), width).astype(np.float32)
    shift = np.tile(-np.asarray(self.mean) / np.asarray(self.std), width).astype(np.float32)
    rows = images.reshape(*images.shape[:2], -1).astype(np.float32, copy=False)
    rows *= scale
    rows += shift
    return rows.reshape(images.shape)


@dataclasses.dataclass(frozen=True)
class ImageShapes:
  """What an image data set gives the model (``trainer.task.DataSizes``): its class count, its image
  shape and how an image is prepared for it (``None``: not known, so the task cannot predict). The
  data makes one (``ImageData.shapes``); so does a workdir's record of it (``from_json``)."""

  num_classes: int
  image_shape: tuple[int, int, int]  # (H, W, C) as the model sees it
  preparation: ImagePreparation | None = None

  @property
  def class_names(self) -> list[str]:
    """The class indices as names: the data set's names are the data's (``ImageData.class_names``)."""
    return [str(index) for index in range(self.num_classes)]

  def to_json(self) -> dict:
    values = {'num_classes': self.num_classes, 'image_shape': list(self.image_shape)}
    if self.preparation is not None:
      values.update(mean=list(self.preparation.mean), std=list(self.preparation.std))
    return values

  @classmethod
  def from_json(cls, values: dict, config: ml_collections.ConfigDict) -> ImageShapes:
    """``values['num_classes']`` and ``values['image_shape']`` ``[H, W, C]`` (or ``values['channels']``
    with ``config.data.image_size``), and the normalisation ``values['mean']`` and ``values['std']``
    (per channel; else the config's ``data.mean`` and ``data.std``, where set)."""
    if values.get('image_shape'):
      image_shape = tuple(int(size) for size in values['image_shape'])
    else:
      image_size = config.data.get('image_size')
      if not image_size or len(image_size) != 2:
        raise ConfigError('data.image_size must be (height, width) to build the task without its data.')
      image_shape = (*image_size, values['channels'])
    mean, std = values.get('mean', config.data.get('mean')), values.get('std', config.data.get('std'))
    preparation = None
    if mean is not None and std is not None:
      mean, std = (
        tuple(float(v) for v in np.broadcast_to(statistic, image_shape[-1:])) for statistic in (mean, std)
      )
      preparation = ImagePreparation(image_shape, mean, std)
    return cls(int(values['num_classes']), image_shape, preparation)


@dataclasses.dataclass
class ImageData:
  """A loaded data set that makes training and evaluation batches (see module docstring)."""

  num_classes: int
  image_shape: tuple[int, int, int]  # (H, W, C) as the model sees it
  num_train: int
  class_names: list[str]
  mean: tuple[float, ...]  # per channel, in [0, 1] pixel units
  std: tuple[float, ...]
  _source: InMemoryImages | RecordImages | tfds_source.TfdsRandomAccess | tfds_source.TfdsStream = (
    dataclasses.field(repr=False)
  )
  _augmentation: Augmentation = dataclasses.field(default_factory=Augmentation, repr=False)
  _prefetch_batches: int = dataclasses.field(default=4, repr=False)
  _num_threads: int = dataclasses.field(default=2, repr=False)

  @property
  def split_names(self) -> tuple[str, ...]:
    if isinstance(self._source, InMemoryImages):
      return tuple(self._source.splits)
    if isinstance(self._source, (RecordImages, tfds_source.TfdsRandomAccess)):
      return self._source.split_names
    return tuple(self._source.split_sizes)

  def num_examples(self, split: str) -> int:
    self._check_split(split)
    return self._source.num_examples(split)

  def train_batches(
    self,
    *,
    batch_size: int,
    seed: int,
    start_step: int = 0,
    process_index: int = 0,
    process_count: int = 1,
  ) -> Iterator[dict[str, np.ndarray]]:
    """Endless batches of this process's rows of the global batch, from start_step on.

    Yields 'image' float32 [b, H, W, C] and 'label' int32 [b], where b = batch_size /
    process_count; with mixup or CutMix also 'mix_label' int32 [b] and 'mix_weight' float32 [b]
    (loss = w * CE(label) + (1 - w) * CE(mix_label)).
    """
    rows = process_rows(batch_size, process_index, process_count)
    if seed < 0 or start_step < 0:
      raise ValueError(f'seed and start_step must be >= 0, got {seed} and {start_step}')
    if isinstance(self._source, tfds_source.TfdsStream):
      streamed = self._source.train_batches(
        rows.stop - rows.start,
        seed=seed,
        start_step=start_step,
        process_index=process_index,
        process_count=process_count,
      )
      # tf.data reads ahead by itself; augmentation is cheap next to its decoding.
      return (
        self._streamed_train_batch(step, examples, batch_size=batch_size, seed=seed, rows=rows)
        for step, examples in enumerate(streamed, start=start_step)
      )
    make_batch = functools.partial(self._train_batch, batch_size=batch_size, seed=seed, rows=rows)
    return step_batches(
      make_batch,
      start_step=start_step,
      num_threads=self._num_threads,
      prefetch_batches=self._prefetch_batches,
    )

  def eval_batches(
    self,
    split: str,
    *,
    batch_size: int,
    process_index: int = 0,
    process_count: int = 1,
    example_ids: np.ndarray | None = None,
  ) -> Iterator[dict[str, np.ndarray]]:
    """One ordered pass over `split` (or over its examples `example_ids`, sorted): this process's
    rows of each global batch.

    The last global batch is padded to full size; 'mask' float32 [b] is 1 for real
    examples and 0 for padding. No augmentation. A streamed TFDS split is read whole, and its
    batches keep only the rows `example_ids` names.
    """
    self._check_split(split)
    rows = process_rows(batch_size, process_index, process_count)
    if isinstance(self._source, tfds_source.TfdsStream):
      streamed = self._source.eval_batches(split, batch_size)
      if example_ids is not None:
        streamed = _rows_named(streamed, np.asarray(example_ids))
      return (self._eval_batch(batch, rows=rows) for batch in streamed)
    chosen = np.arange(self._source.num_examples(split)) if example_ids is None else np.asarray(example_ids)
    size = len(chosen)

    def make_batch(index: int) -> dict[str, np.ndarray]:
      ids = chosen[index * batch_size : (index + 1) * batch_size]
      return self._eval_batch(self._source.examples(split, ids), rows=rows)

    return step_batches(
      make_batch,
      stop_step=-(-size // batch_size),
      num_threads=self._num_threads,
      prefetch_batches=self._prefetch_batches,
    )

  @property
  def preparation(self) -> ImagePreparation:
    """How this data set's images become the model's input (``read_image``, ``prepare_images``)."""
    return ImagePreparation(self.image_shape, self.mean, self.std)

  @property
  def shapes(self) -> ImageShapes:
    """What this data set gives the model."""
    return ImageShapes(self.num_classes, self.image_shape, self.preparation)

  def read_image(self, image) -> np.ndarray:
    """One image file or uint8 array as this data set holds its images."""
    return self.preparation.read_image(image)

  def prepare_images(self, images: np.ndarray) -> np.ndarray:
    """uint8 images [n, H, W, C] as this data set holds them -> the model's float32 input, exactly as
    evaluation batches are made."""
    return self.preparation.prepare_images(images)

  def _check_split(self, split: str) -> None:
    if split not in self.split_names:
      raise ConfigError(f'unknown split {split!r}; available: {list(self.split_names)}')

  def _train_batch(self, step: int, *, batch_size: int, seed: int, rows: slice) -> dict[str, np.ndarray]:
    repeats = self._augmentation.repeats
    ids = repeated_example_ids(seed, step, batch_size, self._source.num_examples('train'), repeats)
    draw = self._augmentation.draw(np.random.default_rng([_AUGMENT_STREAM, seed, step]), batch_size)
    own = np.arange(rows.start, rows.stop)
    partner = None if draw.mix_partner is None else draw.mix_partner[own]
    # Mixup partners may be other processes' rows: augment those here too.
    needed = own if partner is None else np.union1d(own, partner)
    crop_while_decoding = getattr(self._source, 'decodes_examples', False) and draw.crop_areas is not None
    if crop_while_decoding:
      crop = lambda row, height, width: self._augmentation.crop_box(draw, needed[row], height, width)  # noqa: E731
      flips = None if draw.flips is None else draw.flips[needed]
      examples = self._source.examples('train', ids[needed], crop, flips)
    else:
      examples = self._source.examples('train', ids[needed])
    return self._augmented_batch(examples, needed, own, partner, draw, decoded_with_crop=crop_while_decoding)

  def _streamed_train_batch(
    self, step: int, examples: LabelledImages, *, batch_size: int, seed: int, rows: slice
  ) -> dict[str, np.ndarray]:
    draw = self._augmentation.draw(np.random.default_rng([_AUGMENT_STREAM, seed, step]), batch_size)
    own = np.arange(rows.start, rows.stop)
    if draw.mix_partner is not None and len(own) % 2:  # a stream holds this process's rows only
      raise ValueError(f'mixing a streamed set pairs the {len(own)} rows of each process: make it even')
    partner = None if draw.mix_partner is None else own[::-1]
    return self._augmented_batch(examples, own, own, partner, draw)

  def _augmented_batch(
    self,
    examples: LabelledImages,
    positions: np.ndarray,
    own: np.ndarray,
    partner: np.ndarray | None,
    draw: AugmentationDraw,
    *,
    decoded_with_crop: bool = False,
  ) -> dict[str, np.ndarray]:
    """Augments `examples` (global batch rows `positions`, sorted); returns rows `own`."""
    augmentation = self._augmentation
    images = augmentation.apply(examples.images, draw, positions, decoded_with_crop=decoded_with_crop)
    height, width = images.shape[1:3]
    if draw.erase_rows is not None:  # before mixing, as timm; in pixel units (vit.batch_augmentation)
      images = images.astype(np.float32)
      boxes = augmentation.erase_boxes(draw, positions, height, width)
      batch_augmentation.random_erase(images, boxes, draw.erase_seeds[positions], self.mean, self.std)
    if partner is None:  # then positions are exactly the own rows
      return {'image': self.prepare_images(images), 'label': examples.labels}
    # Mixing is affine, so it commutes with the (affine) normalisation: mixed on pixels, then normalised.
    own_at = np.searchsorted(positions, own)
    partner_at = np.searchsorted(positions, partner)
    cut_boxes = augmentation.cutmix_boxes(draw, own, height, width)
    weight = np.array(
      [
        w if box is None else batch_augmentation.box_weight(box, height, width)
        for w, box in zip(draw.mix_weight[own], cut_boxes)
      ],
      np.float32,
    )
    mixed = batch_augmentation.mix(images[own_at], images[partner_at], weight, cut_boxes)
    return {
      'image': self.prepare_images(mixed),
      'label': examples.labels[own_at],
      'mix_label': examples.labels[partner_at],
      'mix_weight': weight,
    }

  def _eval_batch(self, global_batch: LabelledImages, *, rows: slice) -> dict[str, np.ndarray]:
    size = rows.stop - rows.start
    real = slice(rows.start, rows.stop)
    count = len(global_batch.labels[real])
    batch = {
      'image': np.zeros((size, *self.image_shape), np.float32),
      'label': np.zeros(size, np.int32),
      'mask': np.zeros(size, np.float32),
    }
    if count:  # the last global batch may hold no row of this process's slice
      batch['image'][:count] = self.prepare_images(global_batch.images[real])
      batch['label'][:count] = global_batch.labels[real]
      batch['mask'][:count] = 1
    return batch


def _rows_named(batches: Iterator[LabelledImages], example_ids: np.ndarray) -> Iterator[LabelledImages]:
  """The rows of consecutive batches whose position in the split is one of the sorted `example_ids`."""
  start = 0
  for batch in batches:
    end = start + len(batch.labels)
    keep = example_ids[(example_ids >= start) & (example_ids < end)] - start
    start = end
    if len(keep):
      yield LabelledImages(batch.images[keep], batch.labels[keep])


def _normalisation(
  config: ml_collections.ConfigDict,
  source: InMemoryImages | RecordImages | tfds_source.TfdsRandomAccess | tfds_source.TfdsStream,
  channels: int,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
  """Per-channel mean and std in [0, 1] units: from the config, else from the train split."""
  if (config.mean is None) != (config.std is None):
    raise ConfigError('set both data.mean and data.std, or neither')
  if config.mean is not None:
    mean, std = (
      np.broadcast_to(np.asarray(values, np.float64), (channels,)) for values in (config.mean, config.std)
    )
    if min(std) <= 0:
      raise ConfigError(f'data.std must be positive, got {config.std}')
  elif isinstance(source, InMemoryImages):
    mean, std = _channel_statistics(source.splits['train'].images)
  else:
    raise ConfigError(
      f'data.source {config.source!r} is read from disk, never whole: set data.mean and data.std '
      '(per channel in [0, 1] units, e.g. (0.5,) and (0.5,))'
    )
  return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def _channel_statistics(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Exact per-channel mean and std of uint8 images [N, H, W, C], in [0, 1] units."""
  channels = images.shape[-1]
  rows = images.reshape(-1, images.shape[-2] * channels)  # long rows: fast reductions
  squares = np.arange(256, dtype=np.uint64) ** 2
  total = np.zeros(rows.shape[1], np.uint64)
  total_of_squares = np.zeros(rows.shape[1], np.uint64)
  for start in range(0, len(rows), 65536):
    chunk = rows[start : start + 65536]
    total += chunk.sum(axis=0, dtype=np.uint64)
    total_of_squares += squares[chunk].sum(axis=0, dtype=np.uint64)
  count = images.size // channels
  mean = total.reshape(-1, channels).sum(axis=0) / count
  variance = total_of_squares.reshape(-1, channels).sum(axis=0) / count - mean**2
  std = np.maximum(np.sqrt(np.maximum(variance, 0)), 0.255)  # constant images: avoid 0
  return mean / 255, std / 255
