"""Video input pipeline: load clips once, then batch, augment (the same way for every frame), normalise.

``load_video_data(config)`` checks ``config.data``, loads the clips (``video.clip_sources``) and
returns a ``VideoData``. Config fields (``default_data_config()`` has all of them):
  source                'moving_digits' (default, no files) | 'folder' | 'tfds'
  digits                moving_digits: 'digits' (scikit-learn's 8x8, embedded) | 'mnist' (IDX in path)
  num_frames            moving_digits, tfds: frames per clip. 8
  frame_size            moving_digits, tfds: frame height = width in pixels. 32
  digit_scale           moving_digits: digits are scaled up by this factor. 2
  speed                 moving_digits: pixels moved per frame. 2
  jitter                moving_digits: largest shift off the centre line across the motion. 4
  clips_per_digit       moving_digits: clips made from each train digit. 4
  test_clips_per_digit  moving_digits: clips made from each test digit. 2
  clip_seed             moving_digits: seed of directions and start positions. 0
  path                  folder (path/<split>/<class>/*.npy) or mnist: the data folder. None
  name, data_dir        tfds: the data set (e.g. 'ucf101') and its prepared TFDS directory. None
  augment.crop_padding  pad every frame by this many pixels (zeros) and crop one window per clip. 0
  augment.flip          flip whole clips horizontally (never for moving digits: it turns left into
                        right). False

Training batches are a pure function of (seed, step): ``make_train_batch(step)`` takes the
examples at positions ``step * batch .. (step + 1) * batch - 1`` of an endless sequence of
per-epoch permutations seeded by (seed, epoch), draws the crop offsets and flips of the whole
global batch from (seed, step), and keeps this process's rows
(``trainer.partitioning.process_rows``), so a resumed run sees what an uninterrupted one would.
Evaluation is one ordered pass, the last batch padded and marked by ``mask``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import ml_collections
import numpy as np

from pipelines.steps import example_ids, step_batches
from trainer.config_sections import to_section
from trainer.errors import ConfigError
from trainer.partitioning import process_rows
from video import clip_sources, config_sections

_LOADERS = {
  'moving_digits': clip_sources.load_moving_digits,
  'folder': clip_sources.load_npy_folder,
  'tfds': clip_sources.load_tfds_videos,
}
_AUGMENT_STREAM = 1  # the augmentation draws' random stream (pipelines.steps orders examples)


def default_data_config() -> ml_collections.ConfigDict:
  """All data config fields with their defaults (``video.config_sections.VideoData``)."""
  return to_section(config_sections.VideoData())


def load_video_data(data_config: ml_collections.ConfigDict) -> VideoData:
  if data_config.augment.crop_padding < 0:
    raise ConfigError(f'data.augment.crop_padding must be >= 0, got {data_config.augment.crop_padding}')
  if data_config.source == 'moving_digits' and data_config.augment.flip:
    raise ConfigError('data.augment.flip must be False for moving_digits: a flip turns left into right')
  clip_set = _LOADERS[data_config.source](data_config)
  train = clip_set.splits['train']
  mean, std = float(train.clips.mean() / 255), float(max(train.clips.std() / 255, 1e-3))
  return VideoData(clip_set, mean, std, data_config.augment.crop_padding, data_config.augment.flip)


@dataclasses.dataclass(frozen=True)
class ClipPreparation:
  """How a clip becomes the model's input, knowing no data set: read at ``clip_shape`` (``read_clip``),
  then normalised (``prepare_clips``). Evaluation batches and predictions both go through it; a workdir
  records its fields (``ClipShapes.to_json``), so predictions need no data."""

  clip_shape: tuple[int, int, int, int]  # (T, H, W, C)
  mean: float  # over all pixels of the train split, in [0, 1] units
  std: float

  def read_clip(self, item) -> np.ndarray:
    """One clip (an array, a ``.npy`` file, a video file or a folder of frames) as the data set holds its clips."""
    return clip_sources.read_clip(item, self.clip_shape)

  def prepare_clips(self, clips: np.ndarray) -> np.ndarray:
    """uint8 clips [n, T, H, W, C] -> the model's float32 input."""
    return (clips.astype(np.float32) * (1 / 255) - self.mean) / self.std


@dataclasses.dataclass(frozen=True)
class ClipShapes:
  """What a clip set gives the model (``trainer.task.DataSizes``): its class count, its clip shape, a
  moving-digit label's parts and how a clip is prepared for it (``None``: not known, so the task
  cannot predict). The data makes one (``VideoData.shapes``); so does a workdir's record of it
  (``from_json``)."""

  num_classes: int
  clip_shape: tuple[int, int, int, int]  # (T, H, W, C)
  label_parts: tuple[tuple[str, int], ...] = ()
  preparation: ClipPreparation | None = None

  @property
  def class_names(self) -> list[str]:
    """The class indices as names: the data set's names are the data's (``VideoData.class_names``)."""
    return [str(index) for index in range(self.num_classes)]

  def to_json(self) -> dict:
    values = {
      'num_classes': self.num_classes,
      'clip_shape': list(self.clip_shape),
      'label_parts': [list(part) for part in self.label_parts],
    }
    if self.preparation is not None:
      values.update(mean=self.preparation.mean, std=self.preparation.std)
    return values

  @classmethod
  def from_json(cls, values: dict, config: ml_collections.ConfigDict) -> ClipShapes:
    """``values['num_classes']``, ``values['clip_shape']`` ``[T, H, W, C]`` (or ``values['channels']``
    with ``config.data.num_frames`` and ``frame_size``), ``values['label_parts']`` (a moving-digit
    label's parts, ``[[name, count], ...]``; none if absent) and the normalisation ``values['mean']``
    and ``values['std']`` (without them the task cannot predict)."""
    if values.get('clip_shape'):
      clip_shape = tuple(int(size) for size in values['clip_shape'])
    else:
      data = config.data
      clip_shape = (data.num_frames, data.frame_size, data.frame_size, values['channels'])
    label_parts = tuple((str(name), int(count)) for name, count in values.get('label_parts', ()))
    preparation = None
    if values.get('mean') is not None and values.get('std') is not None:
      preparation = ClipPreparation(clip_shape, float(values['mean']), float(values['std']))
    return cls(int(values['num_classes']), clip_shape, label_parts, preparation)


@dataclasses.dataclass
class VideoData:
  clip_set: clip_sources.ClipSet
  mean: float  # over all pixels of the train split, in [0, 1] units
  std: float
  crop_padding: int = 0
  flip: bool = False

  @property
  def num_classes(self) -> int:
    return len(self.clip_set.class_names)

  @property
  def clip_shape(self) -> tuple[int, int, int, int]:
    return tuple(self.clip_set.splits['train'].clips.shape[1:])

  @property
  def class_names(self) -> list[str]:
    return list(self.clip_set.class_names)

  @property
  def label_parts(self) -> tuple[tuple[str, int], ...]:
    return self.clip_set.label_parts

  @property
  def preparation(self) -> ClipPreparation:
    """How this data set's clips become the model's input (``read_clip``, ``prepare_clips``)."""
    return ClipPreparation(self.clip_shape, self.mean, self.std)

  @property
  def shapes(self) -> ClipShapes:
    """What this clip set gives the model."""
    return ClipShapes(self.num_classes, self.clip_shape, self.label_parts, self.preparation)

  @property
  def num_train(self) -> int:
    return len(self.clip_set.splits['train'].labels)

  @property
  def split_names(self) -> tuple[str, ...]:
    return tuple(self.clip_set.splits)

  def make_train_batch(self, step: int, *, batch_size: int, seed: int, rows: slice) -> dict[str, np.ndarray]:
    """This process's rows of the global training batch at ``step`` (see the module docstring)."""
    train = self.clip_set.splits['train']
    ids = example_ids(seed, step, batch_size, len(train.labels))[rows]
    rng = np.random.default_rng([_AUGMENT_STREAM, seed, step])
    offsets = rng.integers(0, 2 * self.crop_padding + 1, size=(batch_size, 2))[rows]
    flips = (rng.random(batch_size) < 0.5)[rows] if self.flip else np.zeros(len(ids), bool)
    clips = augment_clips(train.clips[ids], offsets, flips, self.crop_padding)
    return {'clip': self.prepare_clips(clips), 'label': train.labels[ids]}

  def train_batches(
    self, *, batch_size: int, seed: int, start_step: int = 0, process_index: int = 0, process_count: int = 1
  ) -> Iterator[dict[str, np.ndarray]]:
    if seed < 0 or start_step < 0:
      raise ValueError(f'seed and start_step must be >= 0, got {seed} and {start_step}')
    rows = process_rows(batch_size, process_index, process_count)
    make = functools.partial(self.make_train_batch, batch_size=batch_size, seed=seed, rows=rows)
    return step_batches(make, start_step=start_step, num_threads=2, prefetch_batches=4)

  def eval_batches(
    self, split: str, *, batch_size: int, process_index: int = 0, process_count: int = 1
  ) -> Iterator[dict[str, np.ndarray]]:
    if split not in self.clip_set.splits:
      raise ConfigError(f'unknown split {split!r}; available: {list(self.clip_set.splits)}')
    data, rows = self.clip_set.splits[split], process_rows(batch_size, process_index, process_count)

    def make_batch(index: int) -> dict[str, np.ndarray]:
      start = index * batch_size
      clips = data.clips[start : start + batch_size][rows]
      size, count = rows.stop - rows.start, len(clips)
      batch = {
        'clip': np.zeros((size, *self.clip_shape), np.float32),
        'label': np.zeros(size, np.int32),
        'mask': np.zeros(size, np.float32),
      }
      batch['clip'][:count] = self.prepare_clips(clips)
      batch['label'][:count] = data.labels[start : start + batch_size][rows]
      batch['mask'][:count] = 1
      return batch

    return step_batches(
      make_batch, stop_step=-(-len(data.labels) // batch_size), num_threads=2, prefetch_batches=4
    )

  def read_clip(self, item) -> np.ndarray:
    """One clip (an array, a ``.npy`` file, a video file or a folder of frames) as this data set holds its clips."""
    return self.preparation.read_clip(item)

  def prepare_clips(self, clips: np.ndarray) -> np.ndarray:
    """uint8 clips [n, T, H, W, C] -> the model's float32 input, exactly as evaluation batches are made."""
    return self.preparation.prepare_clips(clips)


def augment_clips(clips: np.ndarray, offsets: np.ndarray, flips: np.ndarray, padding: int) -> np.ndarray:
  """One crop window (after zero padding) and one flip per clip, the same for all of its frames."""
  if padding:
    padded = np.pad(clips, ((0, 0), (0, 0), (padding, padding), (padding, padding), (0, 0)))
    height, width = clips.shape[2:4]
    clips = np.stack(
      [clip[:, top : top + height, left : left + width] for clip, (top, left) in zip(padded, offsets)]
    )
  if flips.any():
    clips = np.where(flips[:, None, None, None, None], clips[:, :, :, ::-1], clips)
  return clips
