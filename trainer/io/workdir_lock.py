"""One training process per workdir: an OS lock on ``<workdir>/train.lock`` (a lock object in a bucket).

The lock is ``fcntl.flock`` on the file, so the operating system lets it go when
the holder dies, even by ``kill -9``. The file says who holds it (``pid host``)
for the error the next process prints. A holder that exits cleanly empties the
file; one that died leaves its name there, and the next process takes the lock
over with a warning naming it. In a multi-process run only process 0 locks.
"""

import fcntl
import os
import pathlib
import socket

from absl import logging

from trainer.errors import WorkdirError
from trainer.io import storage

LOCK_FILE = 'train.lock'


def _describe(holder: str) -> str:
  parts = holder.split()
  if len(parts) == 2:
    return f'pid {parts[0]} on host {parts[1]}'
  return 'another process'


def _is_running(pid: str) -> bool | None:
  """Whether ``pid`` runs on this host (None: cannot tell)."""
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, ValueError):
    return None
  return True


class WorkdirLock:
  """``acquire()`` takes the workdir or raises ``WorkdirError`` at once; ``release()`` gives it back."""

  def __init__(self, workdir: str | pathlib.Path):
    self.workdir = pathlib.Path(workdir)
    self.path = self.workdir / LOCK_FILE
    self._file = None

  def acquire(self) -> None:
    file = open(self.path, 'a+b', buffering=0)  # pylint: disable=consider-using-with
    try:
      fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      file.seek(0)
      holder = file.read().decode(errors='replace').strip()
      file.close()
      raise WorkdirError(
        f'{self.workdir} is being trained by {_describe(holder)}; '
        'wait for it to finish or stop it, or use another --workdir.'
      ) from None
    file.seek(0)
    previous = file.read().decode(errors='replace').strip()
    if previous:
      pid, _, host = previous.partition(' ')
      if host == socket.gethostname() and _is_running(pid) is True and int(pid) != os.getpid():
        state = 'still running but not holding the lock'
      else:
        state = 'no longer running'
      logging.warning('Took over the lock on %s from %s (%s).', self.workdir, _describe(previous), state)
    self._file = file
    self._write(f'{os.getpid()} {socket.gethostname()}\n')

  def _write(self, holder: str) -> None:
    """Names the holder; the flock is the lock, so a full disk here is no reason to fail."""
    try:
      self._file.seek(0)
      self._file.truncate()
      self._file.write(holder.encode())
    except OSError as error:
      logging.warning('Could not write %s: %s', self.path, error)

  def release(self) -> None:
    if self._file is None:
      return
    self._write('')
    self._file.close()  # closing lets the flock go
    self._file = None


def make_lock(workdir):
  """The lock for ``workdir``: this OS lock for a folder, a lock object for a ``gs://`` workdir."""
  if storage.is_remote(workdir):
    from trainer.io.bucket_lock import BucketLock  # pylint: disable=g-import-not-at-top

    return BucketLock(str(workdir))
  return WorkdirLock(workdir)
