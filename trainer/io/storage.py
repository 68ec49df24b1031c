"""Where a workdir lives: a local folder, or a prefix in an object store (``gs://bucket/run``).

Local workdirs are ``pathlib.Path`` and keep the POSIX tools (an OS file lock, renames,
``fsync``). A workdir given as a URL is an ``etils.epath.Path``, the path type orbax
itself uses; its files are objects, which appear whole when written and cannot be
appended to, so writers that append rewrite the object instead (``write_text``).

A path enters the code once, as a string where a user gives it (a command line's flag, a config
value, a public entry function's argument): ``as_path`` makes it a path object (``Path``) there, and
everything inside takes and passes that object.

A full disk or a bucket over its quota is recognised by ``is_disk_full`` at any write:
an ``OSError`` with ``ENOSPC`` or ``EDQUOT``, or an error (or its cause) whose text says
so (TensorStore, TensorFlow and the cloud clients report it in their own exception types).
"""

import errno
import os
import pathlib

from etils import epath
from etils.epath import gpath as epath_gpath

from trainer.errors import UserError

_URL_SCHEMES = ('gs://', 's3://')
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXTS = ('No space left', 'Disk quota exceeded', 'quota exceeded', 'Quota exceeded')


Path = pathlib.Path | epath.Path  # a local path, or a URL's


class NoSpace(UserError, OSError):
  """A write found the disk or the bucket full; the message names what was being written."""

  def __init__(self, where):
    super().__init__(f'no space left while writing {where}')


def is_remote(path) -> bool:
  return str(path).startswith(_URL_SCHEMES)


def as_path(path: str | Path) -> Path:
  """``path`` as a path object: ``epath.Path`` for a URL, ``pathlib.Path`` otherwise."""
  if isinstance(path, epath.Path) or is_remote(path):
    _use_fsspec_for_urls()
    return epath.Path(path)
  return pathlib.Path(path)


def _use_fsspec_for_urls() -> None:
  """Unless the user chose otherwise (``EPATH_USE_TF``), every URL of this process goes through fsspec.

  With TensorFlow installed, epath sends ``gs://`` through TensorFlow's GCS client; gcsfs is the
  client the bucket tests exercise (and can be pointed at an emulator). epath makes that choice
  once per process, at the first use of any of its paths (a local one too: orbax's checkpoints,
  TensorFlow Datasets) and caches it, so setting the variable after that first use changes
  nothing: a cached choice of TensorFlow that the variable now refuses is dropped here.
  """
  os.environ.setdefault('EPATH_USE_TF', 'false')
  choice = getattr(epath_gpath, '_is_tf_installed', None)  # etils' cached check
  refused = os.environ['EPATH_USE_TF'].lower() in ('false', 'no', 'f', '0')
  if refused and hasattr(choice, 'cache_clear') and choice():
    choice.cache_clear()


def absolute(path: Path) -> Path:
  return path if is_remote(path) else path.absolute()


def write_text(path: Path, text: str) -> None:
  """Writes ``text`` (UTF-8) to ``path`` whole or not at all (``write_bytes``)."""
  write_bytes(path, text.encode('utf-8'))


def write_bytes(path: Path, data: bytes) -> None:
  """Writes ``data`` to ``path`` whole or not at all: a renamed temporary file, or one object.

  A local folder is made first where missing (an object store has no folders). A full disk or
  bucket is ``NoSpace`` naming ``path``.
  """
  try:
    if is_remote(path):
      path.write_bytes(data)
      return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix('.tmp')
    temporary.write_bytes(data)
    temporary.replace(path)
  except Exception as error:
    if is_disk_full(error):
      raise NoSpace(path) from error
    raise


def filesystem(path):
  """The fsspec file system of a URL (``gcsfs`` for ``gs://``) and the path in it."""
  import fsspec  # pylint: disable=g-import-not-at-top

  return fsspec.core.url_to_fs(str(path))


def is_disk_full(error: BaseException | None) -> bool:
  """Whether ``error``, or an error it was raised from, says the disk or the bucket is full."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, NoSpace) or (isinstance(error, OSError) and error.errno in _FULL_ERRNOS):
      return True
    if any(text in str(error) for text in _FULL_TEXTS):
      return True
    error = error.__cause__ or error.__context__
  return False
