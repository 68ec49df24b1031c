"""Image sources: turn each supported data source into uint8 image arrays and labels.

Every loader first checks its inputs (paths, files, folder layout, data set name) and
raises a one-line error naming the missing or bad thing, then decodes. Loaders return an
`InMemoryImages` (every split as uint8 [N, H, W, C] plus int32 labels). TFDS sets are
loaded by `vit.tfds_source`, which also streams the very large ones.

The supported sources and their config fields are documented in `vit.input_pipeline`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gzip
import hashlib
import json
import os
import pathlib
import zlib
from collections.abc import Sequence

import ml_collections
import numpy as np
from absl import logging
from PIL import Image

from pipelines.fetch_hint import fetch_hint
from trainer.errors import ConfigError, DataError, MissingFileError

SPLIT_NAMES = ('train', 'validation', 'test')
IMAGE_SUFFIXES = ('.png', '.jpg', '.jpeg')
DECODE_CHUNK_FILES = 1024
_GREY_PIL_MODES = ('1', 'L', 'LA', 'I', 'I;16', 'F')


@dataclasses.dataclass(frozen=True)
class LabelledImages:
  """Images with their class indices."""

  images: np.ndarray  # uint8 [N, H, W, C]
  labels: np.ndarray  # int32 [N]


@dataclasses.dataclass(frozen=True)
class InMemoryImages:
  """All splits of a data set, decoded and held in memory."""

  class_names: list[str]
  splits: dict[str, LabelledImages]

  @property
  def image_shape(self) -> tuple[int, int, int]:
    return tuple(self.splits['train'].images.shape[1:])

  def num_examples(self, split: str) -> int:
    return len(self.splits[split].labels)

  def examples(self, split: str, ids: np.ndarray) -> LabelledImages:
    """Examples `ids` of `split`."""
    data = self.splits[split]
    return LabelledImages(data.images[ids], data.labels[ids])


def resize_images(images: np.ndarray, size: Sequence[int] | None) -> np.ndarray:
  """Resizes uint8 [N, H, W, C] images to size=(H, W) with PIL bilinear filtering."""
  if size is None or tuple(images.shape[1:3]) == tuple(size):
    return images
  return np.stack([_resize_one(image, size) for image in images])


def _resize_one(image: np.ndarray, size: Sequence[int]) -> np.ndarray:
  pil_image = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image)
  resized = np.asarray(pil_image.resize((size[1], size[0]), Image.BILINEAR))
  return resized[..., None] if resized.ndim == 2 else resized


# ----------------------------------------------------------------------------- digits


def load_digits_source(config: ml_collections.ConfigDict) -> InMemoryImages:
  """scikit-learn's bundled 8x8 digits, split 1,437/360 stratified with a fixed seed."""
  from sklearn import datasets, model_selection

  digits = datasets.load_digits()
  images = np.round(digits.images * (255 / 16)).astype(np.uint8)[..., None]
  labels = digits.target.astype(np.int32)
  train_ids, test_ids = model_selection.train_test_split(
    np.arange(len(labels)), test_size=360, stratify=labels, random_state=0
  )
  splits = {}
  for split, ids in (('train', np.sort(train_ids)), ('test', np.sort(test_ids))):
    splits[split] = LabelledImages(resize_images(images[ids], config.image_size), labels[ids])
  return InMemoryImages([str(digit) for digit in range(10)], splits)


# -------------------------------------------------------------------------------- idx

_IDX_FILE_STEMS = {
  'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
  'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}
_IDX_UNSIGNED_BYTE = 0x08


def load_idx_source(config: ml_collections.ConfigDict) -> InMemoryImages:
  """MNIST-style IDX files (optionally gzipped) in one folder; 't10k' is the test split."""
  root = _required_path(config, 'idx')
  if not root.is_dir():
    raise MissingFileError(f'IDX folder {root} does not exist{fetch_hint(root)}')
  files = {
    split: tuple(_find_idx_file(root, stem) for stem in stems) for split, stems in _IDX_FILE_STEMS.items()
  }
  splits = {}
  for split, (image_file, label_file) in files.items():
    images = read_idx(image_file, expected_ndim=3)
    labels = read_idx(label_file, expected_ndim=1)
    if len(images) != len(labels):
      raise DataError(f'{image_file} has {len(images)} images but {label_file} has {len(labels)} labels')
    images = resize_images(images[..., None], config.image_size)
    splits[split] = LabelledImages(images, labels.astype(np.int32))
  num_classes = max(int(data.labels.max(initial=0)) for data in splits.values()) + 1
  return InMemoryImages([str(label) for label in range(num_classes)], splits)


def _find_idx_file(root: pathlib.Path, stem: str) -> pathlib.Path:
  for candidate in (root / stem, root / f'{stem}.gz'):
    if candidate.is_file():
      return candidate
  raise MissingFileError(f'IDX file {root / stem}[.gz] not found{fetch_hint(root)}')


def read_idx(path: pathlib.Path, *, expected_ndim: int) -> np.ndarray:
  """Reads an unsigned-byte IDX file: magic 00 00 08 <ndim>, big-endian int32 dims, data."""
  try:
    with (gzip.open if path.suffix == '.gz' else open)(path, 'rb') as file:
      data = file.read()
  except (OSError, EOFError, zlib.error) as error:
    raise DataError(f'cannot read IDX file {path}: {error}') from None
  if len(data) < 4 or data[0] != 0 or data[1] != 0:
    raise DataError(f'{path} is not an IDX file (bad magic number 0x{data[:4].hex()})')
  if data[2] != _IDX_UNSIGNED_BYTE:
    raise DataError(f'{path}: IDX data type 0x{data[2]:02x} is not supported (only 0x08)')
  if data[3] != expected_ndim:
    raise DataError(f'{path}: IDX file has {data[3]} dimensions, expected {expected_ndim}')
  header_size = 4 + 4 * expected_ndim
  if len(data) < header_size:
    raise DataError(f'{path}: IDX header is truncated')
  dims = tuple(int(d) for d in np.frombuffer(data, '>u4', count=expected_ndim, offset=4))
  if len(data) - header_size != int(np.prod(dims)):
    raise DataError(
      f'{path}: IDX header promises {dims} = {int(np.prod(dims))} bytes '
      f'but the file holds {len(data) - header_size}'
    )
  return np.frombuffer(data, np.uint8, offset=header_size).reshape(dims)


# ----------------------------------------------------------------------------- folder


@dataclasses.dataclass(frozen=True)
class _FolderSplit:
  files: list[str]
  labels: np.ndarray


def load_folder_source(config: ml_collections.ConfigDict) -> InMemoryImages:
  """Images in root/<split>/<class>/*.{png,jpg,jpeg}; classes are the sorted train folders."""
  root = _required_path(config, 'folder')
  class_names, listings = _list_image_folder(root)
  first_image = decode_image(listings['train'].files[0], mode=None, size=config.image_size)
  mode = 'L' if first_image.mode in _GREY_PIL_MODES else 'RGB'
  image_size = tuple(config.image_size) if config.image_size else first_image.size[::-1]
  shape = (*image_size, 1 if mode == 'L' else 3)
  splits = {
    split: LabelledImages(
      _cached_decode(listing, shape, mode, config.image_size, config.cache_dir, split),
      listing.labels,
    )
    for split, listing in listings.items()
  }
  return InMemoryImages(class_names, splits)


def _sorted_entries(folder: pathlib.Path, directories: bool) -> list[str]:
  with os.scandir(folder) as entries:
    return sorted(entry.name for entry in entries if entry.is_dir() == directories)


def _list_image_folder(root: pathlib.Path) -> tuple[list[str], dict[str, _FolderSplit]]:
  if not root.is_dir():
    raise MissingFileError(f'image folder {root} does not exist{fetch_hint(root)}')
  if not (root / 'train').is_dir():
    raise MissingFileError(
      f'split folder {root / "train"} is missing (expected {root}/<split>/<class>/*.png){fetch_hint(root)}'
    )
  class_names = _sorted_entries(root / 'train', directories=True)
  if not class_names:
    raise DataError(f'no class folders in {root / "train"}')
  listings = {}
  for split in (name for name in SPLIT_NAMES if (root / name).is_dir()):
    files, labels = [], []
    for class_name in _sorted_entries(root / split, directories=True):
      class_dir = root / split / class_name
      if class_name not in class_names:
        raise DataError(f'class folder {class_dir} is not one of the train classes')
      class_files = [
        os.path.join(class_dir, name)
        for name in _sorted_entries(class_dir, directories=False)
        if name.lower().endswith(IMAGE_SUFFIXES)
      ]
      if not class_files:
        raise DataError(f'class folder {class_dir} has no .png/.jpg/.jpeg images')
      files += class_files
      labels += [class_names.index(class_name)] * len(class_files)
    if not files:
      raise DataError(f'no class folders in {root / split}')
    listings[split] = _FolderSplit(files, np.asarray(labels, np.int32))
  return class_names, listings


def decode_image(path: str, mode: str | None, size: Sequence[int] | None) -> Image.Image:
  try:
    with Image.open(path) as image:
      image = image.convert(mode) if mode else image.copy()
  except (OSError, ValueError, Image.DecompressionBombError) as error:
    raise DataError(f'cannot read image {path}: {error}') from None
  return image.resize((size[1], size[0]), Image.BILINEAR) if size else image


def read_image_pixels(image: str | os.PathLike | np.ndarray, shape: Sequence[int]) -> np.ndarray:
  """One image (a file, or a uint8 array [H, W] or [H, W, C]) as a data set of ``shape`` (H, W, C) holds
  its images: uint8 [H, W, C], decoded and resized as the folder source decodes its files
  (``decode_image``: PIL, converted to grey or RGB, bilinear resize; arrays as ``resize_images``)."""
  height, width, channels = shape
  mode = 'L' if channels == 1 else 'RGB'
  if isinstance(image, np.ndarray):
    if (
      image.dtype != np.uint8
      or image.ndim not in (2, 3)
      or (image.ndim == 3 and image.shape[-1] not in (1, 3, 4))
    ):
      raise DataError(
        f'an image array must be uint8 [H, W] or [H, W, C] with 1, 3 or 4 channels, got {image.dtype} {image.shape}'
      )
    pil_image = Image.fromarray(image[..., 0] if image.ndim == 3 and image.shape[-1] == 1 else image).convert(
      mode
    )
    if pil_image.size != (width, height):
      pil_image = pil_image.resize((width, height), Image.BILINEAR)
  else:
    pil_image = decode_image(os.fspath(image), mode, (height, width))
  return np.asarray(pil_image).reshape(height, width, channels)


def _decode_folder_split(
  files: list[str], shape: tuple[int, ...], mode: str, size: Sequence[int] | None
) -> np.ndarray:
  """Decodes files into uint8 [N, *shape], a chunk of files per thread task.

  Threads gain little (PIL parses headers in Python, under the GIL), but worker
  processes would re-import the caller's main module, which unguarded scripts and
  notebooks do not survive; set data.cache_dir to decode a folder only once.
  """
  images = np.empty((len(files), *shape), np.uint8)

  def decode_chunk(start: int) -> None:
    chunk = files[start : start + DECODE_CHUNK_FILES]
    images[start : start + len(chunk)] = _decode_files(chunk, shape, mode, size)

  with concurrent.futures.ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
    tasks = [pool.submit(decode_chunk, start) for start in range(0, len(files), DECODE_CHUNK_FILES)]
    try:
      for task in tasks:
        task.result()
    except BaseException:
      pool.shutdown(cancel_futures=True)  # stop at the first bad image
      raise
  return images


def _decode_files(
  files: list[str], shape: tuple[int, ...], mode: str, size: Sequence[int] | None
) -> np.ndarray:
  images = np.empty((len(files), *shape), np.uint8)
  for index, path in enumerate(files):
    pixels = np.asarray(decode_image(path, mode, size))
    if pixels.size != images[index].size:
      raise DataError(
        f'image {path} does not have the shape {shape} of the first train image; '
        'set data.image_size to resize all images'
      )
    images[index] = pixels.reshape(shape)
  return images


def _cached_decode(
  listing: _FolderSplit,
  shape: tuple[int, ...],
  mode: str,
  size: Sequence[int] | None,
  cache_dir: str | None,
  split: str,
) -> np.ndarray:
  """Decodes a split, reusing a .npy in cache_dir made from the very same files.

  The cache is written whole or not at all (a temporary file renamed); one that cannot be read
  back as the split's array (cut short by a full disk, a copy or an older writer) is decoded
  again and replaced, with a warning naming it."""
  if not cache_dir:
    return _decode_folder_split(listing.files, shape, mode, size)
  stats = [os.stat(path) for path in listing.files]
  fingerprint = json.dumps(
    [
      [os.path.abspath(path) for path in listing.files],
      shape,
      mode,
      [(stat.st_size, stat.st_mtime_ns) for stat in stats],
    ]
  )
  digest = hashlib.sha256(fingerprint.encode()).hexdigest()[:20]
  cache_file = pathlib.Path(cache_dir) / f'folder-{split}-{digest}.npy'
  if cache_file.is_file():
    cached = _read_cache(cache_file, (len(listing.files), *shape))
    if cached is not None:
      return cached
  images = _decode_folder_split(listing.files, shape, mode, size)
  cache_file.parent.mkdir(parents=True, exist_ok=True)
  _remove_abandoned_writes(cache_file)
  partial_file = cache_file.with_suffix(f'.{os.getpid()}.partial')
  with open(partial_file, 'wb') as file:
    np.save(file, images)
  os.replace(partial_file, cache_file)
  return images


def _read_cache(cache_file: pathlib.Path, shape: tuple[int, ...]) -> np.ndarray | None:
  """The cached uint8 array of ``shape``, or None (with a warning) when the file is not that."""
  try:
    cached = np.load(cache_file, allow_pickle=False)
  except (OSError, ValueError, EOFError) as error:
    problem = str(error).split('\n')[0]
  else:
    if cached.shape == shape and cached.dtype == np.uint8:
      return cached
    problem = f'it holds {cached.dtype} {cached.shape}, not uint8 {shape}'
  logging.warning(
    'The decoded-image cache %s is damaged (%s); decoding the images again.', cache_file, problem
  )
  return None


def _remove_abandoned_writes(cache_file: pathlib.Path) -> None:
  """Deletes the temporary files of this cache that processes which no longer run left behind."""
  for partial in cache_file.parent.glob(f'{cache_file.stem}.*.partial'):
    pid = partial.suffixes[-2].lstrip('.')
    try:
      os.kill(int(pid), 0)
    except ProcessLookupError:
      partial.unlink(missing_ok=True)
    except (ValueError, PermissionError):
      pass


def _required_path(config: ml_collections.ConfigDict, source: str) -> pathlib.Path:
  if not config.path:
    raise ConfigError(f'data.path must be set for source {source!r}')
  return pathlib.Path(config.path).expanduser()
