"""Where clips come from: moving digits made in memory, a folder of ``.npy`` clips, a prepared TFDS set.

Every source returns ``LabelledClips`` per split: uint8 clips ``[N, T, H, W, C]`` and int32 labels.

Moving digits (the embedded default, no files needed): each clip shows one digit, scaled up by
``digit_scale`` (nearest neighbour) on a black ``frame_size`` square, moving ``speed`` pixels
per frame in one of four directions (right, left, down, up); the label is
``digit * 4 + direction``. The digits are scikit-learn's 8x8 digits (split 1,437 / 360 as in
``pipelines.image_sources``) or, with ``digits='mnist'``, MNIST's IDX files in ``path``. A train
digit appears in ``clips_per_digit`` clips, a test digit in ``test_clips_per_digit``, with
directions and start positions drawn from ``clip_seed``: along the motion anywhere the whole
path stays inside the frame, across it centred and shifted by up to ``jitter`` pixels.
The frames of a clip in reverse order are the clip of the opposite direction, so a model that
sees the frames as a set cannot tell left from right or up from down.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pathlib
from collections.abc import Callable, Iterable

import ml_collections
import numpy as np

from pipelines import image_sources
from trainer.errors import ConfigError, DataError, MissingFileError
from trainer.io.tfds_import import import_tfds_on_cpu, prepared_builder
from video import video_files

DIRECTIONS = ('right', 'left', 'down', 'up')
_STEPS = {'right': (0, 1), 'left': (0, -1), 'down': (1, 0), 'up': (-1, 0)}  # (dy, dx)
SPLIT_NAMES = ('train', 'validation', 'test')


@dataclasses.dataclass(frozen=True)
class LabelledClips:
  clips: np.ndarray  # uint8 [N, T, H, W, C]
  labels: np.ndarray  # int32 [N]


@dataclasses.dataclass(frozen=True)
class ClipSet:
  class_names: list[str]
  splits: dict[str, LabelledClips]
  #: ((part name, number of values), ...) when a label combines parts, major part first
  label_parts: tuple[tuple[str, int], ...] = ()


def load_moving_digits(config: ml_collections.ConfigDict) -> ClipSet:
  if config.digits == 'digits':
    images = image_sources.load_digits_source(ml_collections.ConfigDict({'image_size': None}))
  else:  # 'mnist'
    images = image_sources.load_idx_source(
      ml_collections.ConfigDict({'path': config.path, 'image_size': None})
    )
  size = images.image_shape[0] * config.digit_scale
  travel = config.speed * (config.num_frames - 1)
  if not 0 <= config.jitter <= (config.frame_size - size) // 2:
    raise ConfigError(
      f'data.jitter must be in [0, {(config.frame_size - size) // 2}] for this frame and digit size, got {config.jitter}'
    )
  if size + travel > config.frame_size:
    raise ConfigError(
      f'data.frame_size {config.frame_size} is too small for a {size}-pixel digit moving '
      f'{travel} pixels (speed {config.speed} x {config.num_frames - 1} frames)'
    )
  splits = {}
  for offset, (split, per_digit) in enumerate(
    (('train', config.clips_per_digit), ('test', config.test_clips_per_digit))
  ):
    digits = images.splits[split]
    rng = np.random.default_rng([config.clip_seed, offset])
    splits[split] = _moving_digit_clips(digits.images, digits.labels, per_digit, config, rng)
  names = [f'{digit}/{direction}' for digit in range(10) for direction in DIRECTIONS]
  return ClipSet(names, splits, label_parts=(('digit', 10), ('direction', len(DIRECTIONS))))


def _moving_digit_clips(images, labels, per_digit, config, rng) -> LabelledClips:
  scale, frames, frame_size, speed = config.digit_scale, config.num_frames, config.frame_size, config.speed
  glyphs = np.repeat(np.repeat(images, scale, axis=1), scale, axis=2)  # [N, size, size, C]
  size, channels = glyphs.shape[1], glyphs.shape[3]
  travel = speed * (frames - 1)
  count = len(labels) * per_digit
  digit_ids = np.repeat(np.arange(len(labels)), per_digit)
  directions = rng.integers(len(DIRECTIONS), size=count)
  # Across the motion: centred, shifted by up to `jitter` pixels either way.
  centre = (frame_size - size) // 2
  starts = centre + rng.integers(-config.jitter, config.jitter + 1, size=(count, 2))
  clips = np.zeros((count, frames, frame_size, frame_size, channels), np.uint8)
  for clip, (digit, direction, start) in enumerate(zip(digit_ids, directions, starts)):
    dy, dx = _STEPS[DIRECTIONS[direction]]
    # Along the motion the path must fit: start where the whole travel stays inside.
    y = start[0] if dy == 0 else rng.integers(0, frame_size - size - travel + 1) + (travel if dy < 0 else 0)
    x = start[1] if dx == 0 else rng.integers(0, frame_size - size - travel + 1) + (travel if dx < 0 else 0)
    for frame in range(frames):
      top, left = y + dy * speed * frame, x + dx * speed * frame
      clips[clip, frame, top : top + size, left : left + size] = glyphs[digit]
  return LabelledClips(clips, (labels[digit_ids] * len(DIRECTIONS) + directions).astype(np.int32))


def load_npy_folder(config: ml_collections.ConfigDict) -> ClipSet:
  """Clips ``path/<split>/<class>/*.npy``, each ``[T, H, W, C]`` uint8; classes from the train split."""
  if not config.path:
    raise ConfigError("data.path must be set for source 'folder'")
  root = pathlib.Path(config.path)
  if not (root / 'train').is_dir():
    raise MissingFileError(f'no train folder: {root / "train"} does not exist')
  class_names = sorted(entry.name for entry in (root / 'train').iterdir() if entry.is_dir())
  if not class_names:
    raise DataError(f'no class folders in {root / "train"}')
  splits = {}
  for split in SPLIT_NAMES:
    if (root / split).is_dir():
      splits[split] = _read_npy_split(root / split, class_names)
  if 'test' not in splits and 'validation' not in splits:
    raise MissingFileError(f'no test or validation folder in {root}')
  return ClipSet(class_names, splits)


def _read_npy_split(folder: pathlib.Path, class_names: list[str]) -> LabelledClips:
  clips, labels = [], []
  for class_dir in sorted(entry for entry in folder.iterdir() if entry.is_dir()):
    if class_dir.name not in class_names:
      raise DataError(f'class folder {class_dir} is not one of the train classes')
    for path in sorted(class_dir.glob('*.npy')):
      clip = np.load(path, allow_pickle=False)
      if clip.dtype != np.uint8 or clip.ndim != 4:
        raise DataError(f'{path}: expected a uint8 [T, H, W, C] array, got {clip.dtype} {list(clip.shape)}')
      if clips and clip.shape != clips[0].shape:
        raise DataError(f'{path}: shape {list(clip.shape)} differs from {list(clips[0].shape)} of the others')
      clips.append(clip)
      labels.append(class_names.index(class_dir.name))
  if not clips:
    raise DataError(f'no .npy clips in {folder}')
  return LabelledClips(np.stack(clips), np.asarray(labels, np.int32))


def read_clip(item: str | np.ndarray, clip_shape: tuple[int, int, int, int]) -> np.ndarray:
  """One clip as a data set of ``clip_shape`` (T, H, W, C) holds it, uint8 ``[T, H, W, C]``: a uint8
  array or ``.npy`` file ``[T, H, W, C]`` (``[T, H, W]`` for one channel) of exactly that shape, or the
  first T frames of a folder of frames (PNG or JPEG, in sorted order) or of a video file (``.mp4``,
  ``.mov``, ``.avi``, ``.mkv``, ``.webm``), as the TFDS source keeps the first frames of its videos;
  frames are read as images of the data set's size (``clip_from_frames``)."""
  steps = clip_shape[0]
  expected = f'uint8 [T, H, W, C] = {list(clip_shape)}'
  if isinstance(item, np.ndarray):
    clip, name = item, 'the array'
  elif pathlib.Path(item).is_dir():
    frames = sorted(
      p for p in pathlib.Path(item).iterdir() if p.suffix.lower() in image_sources.IMAGE_SUFFIXES
    )
    return clip_from_frames(
      frames, clip_shape, lambda count: f'{item}: a folder of {count} frames (.png, .jpg)'
    )
  elif str(item).lower().endswith(video_files.VIDEO_SUFFIXES):
    return clip_from_frames(
      video_files.video_frames(str(item)), clip_shape, lambda count: f'{item}: a video of {count} frames'
    )
  elif str(item).lower().endswith('.npy'):
    try:
      clip, name = np.load(item, allow_pickle=False), str(item)
    except (OSError, ValueError) as error:
      raise DataError(f'{item}: cannot read the .npy clip ({error})') from None
  else:
    what = (
      'one image'
      if str(item).lower().endswith(image_sources.IMAGE_SUFFIXES)
      else 'neither a .npy file, a video file nor a folder'
    )
    raise DataError(
      f'{item}: {what}; a clip is a .npy array {expected}, a video ({", ".join(video_files.VIDEO_SUFFIXES)}) '
      f'or a folder of {steps} frames'
    )
  if clip.ndim == 3 and clip_shape[-1] == 1:
    clip = clip[..., None]
  if clip.dtype != np.uint8 or tuple(clip.shape) != tuple(clip_shape):
    raise DataError(f'{name}: a {clip.dtype} clip of shape {list(clip.shape)}; this model takes {expected}')
  return clip


def clip_from_frames(
  frames: Iterable[str | os.PathLike | np.ndarray],
  clip_shape: tuple[int, int, int, int],
  too_few: Callable[[int], str],
) -> np.ndarray:
  """The first T frames (files or uint8 arrays), each read as an image of the data set's size and
  channels (``image_sources.read_image_pixels``), as uint8 ``[T, H, W, C]``. Fewer than T frames raise
  ``DataError`` starting with ``too_few(count)``, then what the model takes."""
  steps, height, width, channels = clip_shape
  clip = [
    image_sources.read_image_pixels(frame, (height, width, channels))
    for frame in itertools.islice(frames, steps)
  ]
  if len(clip) < steps:
    raise DataError(f'{too_few(len(clip))}; this model takes clips of {steps}')
  return np.stack(clip)


def load_tfds_videos(config: ml_collections.ConfigDict) -> ClipSet:
  """A prepared TFDS video set (``'video'`` and ``'label'`` features) read offline from ``data_dir``.

  The first ``num_frames`` frames of each video are kept (shorter videos are dropped),
  resized to ``frame_size`` squares when the stored size differs.
  """
  builder = prepared_builder(config, 'ucf101')
  features = builder.info.features
  if 'video' not in features or 'label' not in features:
    raise DataError(
      f"tfds data set {config.name!r} needs 'video' and 'label' features, it has {sorted(features)}"
    )
  splits = {
    split: _read_tfds_split(builder, split, config) for split in builder.info.splits if split in SPLIT_NAMES
  }
  return ClipSet(list(features['label'].names), splits)


def _read_tfds_split(builder, split: str, config: ml_collections.ConfigDict) -> LabelledClips:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (only for TFDS sets)

  tfds = import_tfds_on_cpu()
  clips, labels = [], []
  for example in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
    video = example['video']
    if len(video) < config.num_frames:
      continue
    video = video[: config.num_frames]
    if video.shape[1:3] != (config.frame_size, config.frame_size):
      resized = tf.image.resize(video, (config.frame_size, config.frame_size), antialias=True)
      video = np.clip(np.round(resized.numpy()), 0, 255).astype(np.uint8)
    clips.append(video)
    labels.append(example['label'])
  if not clips:
    raise DataError(
      f'tfds data set {builder.name!r} split {split!r} has no video of {config.num_frames} frames'
    )
  return LabelledClips(np.stack(clips), np.asarray(labels, np.int32))
