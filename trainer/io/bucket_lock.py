"""One training process per workdir in a bucket: a lock object created only if it does not exist.

An object store has no file locks, and nothing lets a lock go when its holder dies. So:
- ``acquire`` creates ``<workdir>/train.lock`` with the precondition "no object of that
  name" (``if_generation_match=0``): of two processes only one can succeed. The object
  says who holds it (pid, host) and when it was last renewed.
- The holder renews the object every ``renew_seconds`` (a background thread), each time
  only if it is still the object it wrote (``if_generation_match=<its generation>``).
- A lock not renewed for ``stale_seconds`` belongs to a process that died: the next
  process takes it over, again by a precondition on the stale object's generation (so of
  two processes taking over, one wins), with a warning naming the old holder.
- ``release`` deletes the object if it is still ours.
Only the ``gs://`` store is supported (``google-cloud-storage``, which honours
``STORAGE_EMULATOR_HOST``).
"""

import datetime
import json
import os
import socket
import threading
import time

from absl import logging

from trainer.errors import WorkdirError

LOCK_FILE = 'train.lock'
RENEW_SECONDS = 60.0
STALE_SECONDS = 600.0


def _client():
  from google.cloud import storage as gcs  # pylint: disable=g-import-not-at-top

  if os.environ.get('STORAGE_EMULATOR_HOST'):
    from google.auth.credentials import AnonymousCredentials  # pylint: disable=g-import-not-at-top

    return gcs.Client(project='emulator', credentials=AnonymousCredentials())
  return gcs.Client()


def _describe(holder: dict) -> str:
  return f'pid {holder.get("pid")} on host {holder.get("host")}' if holder else 'another process'


class BucketLock:
  """``acquire()`` takes the workdir or raises ``WorkdirError`` at once; ``release()`` gives it back."""

  def __init__(
    self, workdir: str, renew_seconds: float = RENEW_SECONDS, stale_seconds: float = STALE_SECONDS
  ):
    scheme, _, rest = str(workdir).rstrip('/').partition('://')
    if scheme != 'gs':
      raise WorkdirError(f'workdir {workdir}: only gs:// buckets can hold a training lock.')
    self.workdir = str(workdir).rstrip('/')
    self.bucket_name, _, prefix = rest.partition('/')
    self.name = f'{prefix}/{LOCK_FILE}' if prefix else LOCK_FILE
    self.renew_seconds, self.stale_seconds = renew_seconds, stale_seconds
    self._generation = None
    self._stop = threading.Event()
    self._thread = None
    self._blob = _client().bucket(self.bucket_name).blob(self.name)

  def _holder_text(self) -> str:
    return json.dumps({'pid': os.getpid(), 'host': socket.gethostname(), 'renewed': time.time()}) + '\n'

  def _write(self, if_generation_match: int) -> bool:
    """Writes our holder record if the object's generation is still ``if_generation_match``."""
    from google.api_core import exceptions  # pylint: disable=g-import-not-at-top

    try:
      self._blob.upload_from_string(self._holder_text(), if_generation_match=if_generation_match)
    except exceptions.PreconditionFailed:
      return False
    self._generation = self._blob.generation
    return True

  def _current(self) -> tuple[int, dict, float] | None:
    """``(generation, holder, seconds since renewed)`` of the lock object, ``None`` if there is none."""
    from google.api_core import exceptions  # pylint: disable=g-import-not-at-top

    blob = self._blob.bucket.get_blob(self.name)
    if blob is None:
      return None
    try:
      text = blob.download_as_text()
    except exceptions.NotFound:
      return None
    try:
      holder = json.loads(text)
    except ValueError:
      holder = {}
    updated = blob.updated or datetime.datetime.now(datetime.timezone.utc)
    age = (datetime.datetime.now(datetime.timezone.utc) - updated).total_seconds()
    return blob.generation, holder if isinstance(holder, dict) else {}, age

  def acquire(self) -> None:
    if not self._write(if_generation_match=0):
      current = self._current()
      if current is None:  # released in between
        if not self._write(if_generation_match=0):
          raise WorkdirError(f'{self.workdir} is being trained by another process; use another --workdir.')
      else:
        generation, holder, age = current
        if age < self.stale_seconds:
          raise WorkdirError(
            f'{self.workdir} is being trained by {_describe(holder)} (lock renewed {age:.0f}s ago); '
            f'wait for it to finish or stop it, or use another --workdir. A lock not renewed for '
            f'{self.stale_seconds:.0f}s is taken over.'
          )
        if not self._write(if_generation_match=generation):
          raise WorkdirError(f'{self.workdir} was just taken over by another process; use another --workdir.')
        logging.warning(
          'Took over the lock on %s from %s (not renewed for %.0fs).', self.workdir, _describe(holder), age
        )
    self._stop.clear()
    self._thread = threading.Thread(target=self._renew, name='bucket-lock-renewal', daemon=True)
    self._thread.start()

  def _renew(self) -> None:
    while not self._stop.wait(self.renew_seconds):
      try:
        if not self._write(if_generation_match=self._generation):
          logging.error('Lost the lock on %s: another process took it over.', self.workdir)
          return
      except Exception as error:  # pylint: disable=broad-except  (a network error: try again next time)
        logging.warning('Could not renew the lock on %s: %s', self.workdir, error)

  def release(self) -> None:
    if self._thread is None:
      return
    self._stop.set()
    self._thread.join()
    self._thread = None
    try:
      self._blob.delete(if_generation_match=self._generation)
    except Exception as error:  # pylint: disable=broad-except  (taken over, or gone: nothing left to give back)
      logging.warning('Could not delete the lock %s/%s: %s', self.workdir, LOCK_FILE, error)
