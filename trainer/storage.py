"""Where a workdir lives: a local folder, or a prefix in an object store (``gs://bucket/run``).

Local workdirs are ``pathlib.Path`` and keep the POSIX tools (an OS file lock, renames,
``fsync``). A workdir given as a URL is an ``etils.epath.Path``, the path type orbax
itself uses; its files are objects, which appear whole when written and cannot be
appended to, so writers that append rewrite the object instead (``write_text``).

A full disk or a bucket over its quota is recognised by ``is_disk_full`` at any write:
an ``OSError`` with ``ENOSPC`` or ``EDQUOT``, or an error (or its cause) whose text says
so (TensorStore, TensorFlow and the cloud clients report it in their own exception types).
"""

import errno
import os
import pathlib

from etils import epath

from trainer.errors import UserError

_URL_SCHEMES = ('gs://', 's3://')
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXTS = ('No space left', 'Disk quota exceeded', 'quota exceeded', 'Quota exceeded')


class NoSpace(UserError, OSError):
  """A write found the disk or the bucket full; the message names what was being written."""

  def __init__(self, where):
    super().__init__(f'no space left while writing {where}')


def is_remote(path) -> bool:
  return str(path).startswith(_URL_SCHEMES)


def as_path(path) -> pathlib.Path | epath.Path:
  """``path`` as a path object: ``epath.Path`` for a URL, ``pathlib.Path`` otherwise."""
  if isinstance(path, epath.Path) or is_remote(path):
    # With TensorFlow installed, epath would send gs:// through TensorFlow's GCS client; gcsfs is
    # the client the bucket tests exercise (and can be pointed at an emulator). Unless the user
    # chose otherwise, every gs:// access of this process (orbax's too) goes through gcsfs.
    os.environ.setdefault('EPATH_USE_TF', 'false')
    return epath.Path(path)
  return pathlib.Path(path)


def absolute(path) -> pathlib.Path | epath.Path:
  path = as_path(path)
  return path if is_remote(path) else path.absolute()


def write_text(path, text: str) -> None:
  """Writes ``text`` to ``path`` whole or not at all: a renamed temporary file, or one object.

  A full disk or bucket is ``NoSpace`` naming ``path``.
  """
  path = as_path(path)
  try:
    if is_remote(path):
      path.write_text(text)
      return
    temporary = path.with_suffix('.tmp')
    temporary.write_text(text)
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
