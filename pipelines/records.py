"""ArrayRecord folders: the disk-backed form of an image or parallel-text data set.

A records folder holds one ArrayRecord file per split and a ``records.json`` that says what
they hold::

  records.json            {"format": "attention-lab-records", "version": 1, "kind": "images",
                           "splits": {"train": {"file": "train.array_record", "records": 50000}, ...},
                           "class_names": ["airplane", ...]}          (images only)
  train.array_record      one record per example
  test.array_record

An image record is the class index as 4 bytes (little-endian uint32) followed by the image
file's bytes as stored (JPEG or PNG, decoded when read). A sentence-pair record is the UTF-8
source sentence's length as 4 bytes (little-endian uint32), the source sentence, then the
target sentence. ``python -m pipelines.convert`` writes such folders.

Reading is random access through grain's ``ArrayRecordDataSource`` (files written with
``group_size:1``, so reading one record decompresses only that record). Every error names
the file, and a record that cannot be read or parsed names the record too.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainer.errors import DataError, MissingFileError

if TYPE_CHECKING:
  import grain  # read only when a records folder is opened: start-ups that read none skip it

FORMAT = 'attention-lab-records'
VERSION = 1
METADATA_FILE = 'records.json'
KINDS = ('images', 'text')
_HEADER = struct.Struct('<I')
WRITER_OPTIONS = 'group_size:1'


def pack_image(label: int, image_bytes: bytes) -> bytes:
  return _HEADER.pack(label) + image_bytes


def pack_pair(source: str, target: str) -> bytes:
  source_bytes = source.encode('utf-8')
  return _HEADER.pack(len(source_bytes)) + source_bytes + target.encode('utf-8')


@dataclasses.dataclass(frozen=True)
class RecordSplit:
  """One split's ArrayRecord file, read record by record."""

  path: pathlib.Path
  size: int
  _source: grain.sources.ArrayRecordDataSource = dataclasses.field(repr=False)

  def __len__(self) -> int:
    return self.size

  def read(self, indices: Sequence[int]) -> list[bytes]:
    """The raw records at ``indices``."""
    indices = [int(index) for index in indices]
    try:
      return list(self._source.__getitems__(indices))
    except Exception:  # the reader's errors are plain RuntimeErrors from C++: find the record
      for index in indices:
        try:
          self._source[index]
        except Exception as error:
          raise DataError(f'{self.path}: cannot read record {index}: {error}') from None
      raise

  def image(self, index: int, record: bytes) -> tuple[int, bytes]:
    """(label, encoded image bytes) of image record ``index``."""
    if len(record) < _HEADER.size:
      raise DataError(f'{self.path}: record {index} is {len(record)} bytes, too short for an image record')
    return _HEADER.unpack_from(record)[0], record[_HEADER.size :]

  def pair(self, index: int, record: bytes) -> tuple[str, str]:
    """(source, target) sentences of sentence-pair record ``index``."""
    try:
      (source_length,) = _HEADER.unpack_from(record)
      if _HEADER.size + source_length > len(record):
        raise ValueError(f'source length {source_length} exceeds the record')
      body = record[_HEADER.size :]
      return body[:source_length].decode('utf-8'), body[source_length:].decode('utf-8')
    except (struct.error, ValueError) as error:  # UnicodeDecodeError is a ValueError
      raise DataError(f'{self.path}: record {index} is not a sentence pair ({error})') from None


@dataclasses.dataclass(frozen=True)
class RecordFolder:
  """A records folder (see the module docstring), checked when opened."""

  path: pathlib.Path
  kind: str
  splits: dict[str, RecordSplit]
  class_names: list[str] | None  # images
  languages: list[str] | None  # text: [source, target]

  @classmethod
  def open(cls, path: str | pathlib.Path, *, kind: str) -> RecordFolder:
    """Opens the folder at ``path`` holding ``kind`` records; a missing or mismatched file fails at once."""
    root = pathlib.Path(path).expanduser()
    metadata_path = root / METADATA_FILE
    if not metadata_path.is_file():
      raise MissingFileError(
        f'{metadata_path} does not exist: make a records folder with '
        f'`python -m pipelines.convert {"image-folder" if kind == "images" else "parallel-text"} ... --out {root}`'
      )
    try:
      metadata = json.loads(metadata_path.read_text())
      if metadata.get('format') != FORMAT or metadata.get('version') != VERSION:
        raise ValueError(f'not a {FORMAT} version {VERSION} file')
      split_entries = dict(metadata['splits'])
      class_names = metadata.get('class_names')
    except (ValueError, KeyError, TypeError) as error:
      raise DataError(f'{metadata_path} is not a records description: {error}') from None
    if metadata.get('kind') != kind:
      raise DataError(f'{root} holds {metadata.get("kind")!r} records, not {kind!r}')
    if kind == 'images' and not class_names:
      raise DataError(f'{metadata_path} lists no class_names')
    splits = {name: _open_split(root, name, entry) for name, entry in split_entries.items()}
    if 'train' not in splits:
      raise DataError(f'{metadata_path} has no train split; it has {sorted(splits)}')
    return cls(root, kind, splits, class_names, metadata.get('languages'))


def _open_split(root: pathlib.Path, name: str, entry: dict) -> RecordSplit:
  path = root / entry['file']
  if not path.is_file():
    raise MissingFileError(f'records file {path} of split {name!r} does not exist')
  import grain  # pylint: disable=g-import-not-at-top

  try:
    source = grain.sources.ArrayRecordDataSource(str(path))
    size = len(source)
  except Exception as error:  # the reader raises RuntimeError or ValueError from C++
    raise DataError(f'{path} is not a readable ArrayRecord file: {error}') from None
  if size != entry['records']:
    raise DataError(f'{path} has {size} records; {root / METADATA_FILE} says {entry["records"]}')
  return RecordSplit(path, size, source)
