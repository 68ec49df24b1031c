"""Integrity records: the size and SHA-256 of every file of a checkpoint, checked before restoring it.

The record is ``integrity.json`` in the step directory. Checksums of the files rather
than of the arrays, because then
- a damaged checkpoint is found before anything is read into device memory, and without
  the model: finding the latest intact step needs only the directory;
- the record does not depend on the mesh: the files are the same whichever devices wrote
  them and whichever devices restore them;
- it covers every file orbax wrote (array data, the tensorstore manifests, metadata).
``trainer/io/checkpoints.py`` writes the record from orbax's post-finalisation callback: on the
primary process, after every process has written its files and before orbax renames the
temporary directory into place, so a checkpoint and its record appear together. A step
directory without a record therefore comes from older code or was tampered with; it is
never trusted. One file cannot have a checksum: orbax adds the commit time to the step's
``_CHECKPOINT_METADATA`` after publishing it; the record requires it to exist and be JSON.
The price is reading each checkpoint back once when it is saved (in orbax's background
thread) and once when it is restored.

In an object store (a ``gs://`` workdir) nothing is read back: the record holds each
object's size and the checksum the store computed when it received it (MD5, or CRC32C
for objects that have no MD5), taken from one listing, and the check lists the step again
and compares. Orbax publishes a step there by writing its ``commit_success.txt`` last
(after the record); a step without it is incomplete.
"""

import hashlib
import json
import os
import pathlib
from collections.abc import Sequence

from trainer.io import storage

RECORD_NAME = 'integrity.json'
_FORMAT = 1
_CHUNK = 1 << 20
_REWRITTEN_AFTER_RECORD = ('_CHECKPOINT_METADATA',)
_COMMIT_MARKER = 'commit_success.txt'  # orbax's, in an object store


def _sha256(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with open(path, 'rb') as file:
    while chunk := file.read(_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()


def _files(directory: pathlib.Path) -> list[str]:
  return sorted(
    str(path.relative_to(directory))
    for path in directory.rglob('*')
    if path.is_file() and path.name != RECORD_NAME
  )


def _stored_objects(directory) -> dict[str, tuple[int, str]]:
  """``{name: (size, checksum)}`` of the objects under ``directory``, from one listing."""
  fs, root = storage.filesystem(directory)
  objects = {}
  for name, info in fs.find(root, detail=True).items():
    relative = name[len(root.rstrip('/')) + 1 :]
    if relative and info.get('type') != 'directory':
      checksum = f'md5:{info["md5Hash"]}' if info.get('md5Hash') else f'crc32c:{info.get("crc32c")}'
      objects[relative] = (int(info['size']), checksum)
  return objects


def _write_remote_record(directory: storage.Path) -> None:
  files = {
    name: [None, None] if name in _REWRITTEN_AFTER_RECORD else list(entry)
    for name, entry in _stored_objects(directory).items()
    if name != RECORD_NAME and name != _COMMIT_MARKER
  }
  storage.write_text(
    directory / RECORD_NAME,
    json.dumps({'format': _FORMAT, 'files': files}, indent=1, sort_keys=True) + '\n',
  )


def write_record(directory: storage.Path) -> None:
  """Writes the record of every file now under ``directory`` (atomically: a temporary file renamed)."""
  if storage.is_remote(directory):
    _write_remote_record(directory)
    return
  files = {
    name: [None, None]
    if name in _REWRITTEN_AFTER_RECORD
    else [(directory / name).stat().st_size, _sha256(directory / name)]
    for name in _files(directory)
  }
  text = json.dumps({'format': _FORMAT, 'files': files}, indent=1, sort_keys=True) + '\n'
  temporary = directory / (RECORD_NAME + '.tmp')
  with open(temporary, 'w') as file:
    file.write(text)
    file.flush()
    os.fsync(file.fileno())
  os.replace(temporary, directory / RECORD_NAME)


def check(directory: storage.Path, items: Sequence[str] | None = None) -> str | None:
  """``None`` if every recorded file is there with its size and checksum, else what is wrong (a phrase).

  With ``items``, only the files of those orbax items (subdirectories) and the step's own
  files are checked: evaluation reads no optimizer state, not even to check it.
  """
  try:
    record = json.loads((directory / RECORD_NAME).read_text())
    files = record['files']
    if record.get('format') != _FORMAT or not isinstance(files, dict) or not files:
      return f'its {RECORD_NAME} is not a record this code reads'
  except FileNotFoundError:
    return f'it has no {RECORD_NAME} (not written by this code)'
  except (OSError, ValueError, KeyError, TypeError):
    return f'its {RECORD_NAME} is unreadable'
  if items is not None:
    for item in items:
      if not any(name.startswith(item + '/') for name in files):
        return f'it has no {item}'
    files = {
      name: entry for name, entry in files.items() if name.split('/', 1)[0] in items or '/' not in name
    }
  if storage.is_remote(directory):
    return _check_remote(directory, files)
  for name, (size, digest) in sorted(files.items()):
    path = directory / name
    if not path.is_file():
      return f'{name} is missing'
    if size is None:
      try:
        json.loads(path.read_text())
      except (OSError, ValueError):
        return f'{name} is not JSON'
      continue
    actual = path.stat().st_size
    if actual != size:
      return f'{name} has {actual} bytes, {size} when saved'
    if _sha256(path) != digest:
      return f'{name} differs from its checksum'
  return None


def _check_remote(directory, files: dict) -> str | None:
  stored = _stored_objects(directory)
  if _COMMIT_MARKER not in stored:
    return f'it has no {_COMMIT_MARKER} (orbax did not finish it)'
  for name, (size, digest) in sorted(files.items()):
    if name not in stored:
      return f'{name} is missing'
    if size is None:
      try:
        json.loads((directory / name).read_text())
      except (OSError, ValueError):
        return f'{name} is not JSON'
      continue
    actual, checksum = stored[name]
    if actual != size:
      return f'{name} has {actual} bytes, {size} when saved'
    if checksum != digest:
      return f'{name} differs from its checksum'
  return None
