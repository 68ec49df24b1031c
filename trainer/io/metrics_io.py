"""Where metrics go: TensorBoard event files, ``metrics.jsonl`` and the log.

``metrics.jsonl`` holds one JSON object per logged step (``{"step": ..., "split":
"train" | "eval", ...}``) so scripts and plots need no TensorBoard. The event files are in
``<workdir>/tensorboard/train`` and ``<workdir>/tensorboard/eval``.

The writers are our own rather than ``clu.metric_writers``: importing that package imports
TensorFlow (for its summary writer), which would cost every process that trains seconds of
start-up, and the trainer writes only scalars and texts, which TensorBoard's own record writer and
protobufs (the ``tensorboard`` package, no TensorFlow) write as they are.

In a bucket (a ``gs://`` workdir) objects cannot be appended to: ``metrics.jsonl`` and
the event file are each rewritten whole at every write (they are small).

A full disk or bucket at any of these writes is ``storage.NoSpace`` naming the file.
"""

import io
import json
import os
import socket
import time
from typing import Any, Mapping

import numpy as np
from absl import logging

from trainer.io import storage


class MetricWriter:
  """What the trainer writes each logged step; each method does nothing here, and a writer
  overrides what it writes."""

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    pass

  def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
    pass

  def close(self) -> None:
    pass


class Writers(MetricWriter):
  """Writes to each of ``writers`` in turn."""

  def __init__(self, writers: list[MetricWriter]):
    self.writers = writers

  def write_scalars(self, step, scalars):
    for writer in self.writers:
      writer.write_scalars(step, scalars)

  def write_texts(self, step, texts):
    for writer in self.writers:
      writer.write_texts(step, texts)

  def close(self):
    for writer in self.writers:
      writer.close()


class LoggingWriter(MetricWriter):
  """Logs each step's scalars at INFO (shown with ``--verbose``); every process has one."""

  def __init__(self, split: str):
    self.split = split

  def write_scalars(self, step, scalars):
    values = ', '.join(f'{name}={float(np.asarray(value)):.6g}' for name, value in sorted(scalars.items()))
    logging.info('[%d] %s %s', step, self.split, values)


class JsonLinesWriter(MetricWriter):
  """Appends scalars to ``metrics.jsonl``."""

  def __init__(self, path: storage.Path, split: str):
    self.path = path
    self.split = split

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    record = {'step': int(step), 'split': self.split}
    record.update({key: float(np.asarray(value)) for key, value in scalars.items()})
    line = json.dumps(record) + '\n'
    if storage.is_remote(self.path):
      before = self.path.read_text() if self.path.exists() else ''
      storage.write_text(self.path, before + line)
      return
    try:
      with self.path.open('a') as file:
        file.write(line)
    except OSError as error:
      if storage.is_disk_full(error):
        raise storage.NoSpace(self.path) from error
      raise


class EventsWriter(MetricWriter):
  """TensorBoard scalars and texts in one event file of ``logdir``: on a local disk each write
  appends the new events; in a bucket the buffer holds every event and each write rewrites the file."""

  def __init__(self, logdir: storage.Path):
    from tensorboard.summary.writer import record_writer  # pylint: disable=g-import-not-at-top

    self.logdir = logdir
    self.path = logdir / f'events.out.tfevents.{time.time():.0f}.{socket.gethostname()}.{os.getpid()}'
    self._remote = storage.is_remote(logdir)
    self._buffer = io.BytesIO()
    self._records = record_writer.RecordWriter(self._buffer)
    self._add(file_version='brain.Event:2')
    self._publish()

  def _add(self, summary=None, **fields) -> None:
    from tensorboard.compat.proto import event_pb2  # pylint: disable=g-import-not-at-top

    event = event_pb2.Event(wall_time=time.time(), summary=summary, **fields)
    self._records.write(event.SerializeToString())

  def _publish(self) -> None:
    try:
      if self._remote:
        self.path.write_bytes(self._buffer.getvalue())
        return
      self.logdir.mkdir(parents=True, exist_ok=True)
      with self.path.open('ab') as file:
        file.write(self._buffer.getvalue())
      self._buffer.seek(0)
      self._buffer.truncate()
    except Exception as error:
      if storage.is_disk_full(error):
        raise storage.NoSpace(f'the TensorBoard events in {self.logdir}') from error
      raise

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    from tensorboard.plugins.scalar.summary_v2 import scalar_pb  # pylint: disable=g-import-not-at-top

    for name, value in scalars.items():
      self._add(step=int(step), summary=scalar_pb(name, float(np.asarray(value))))
    self._publish()

  def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
    from tensorboard.plugins.text.summary_v2 import text_pb  # pylint: disable=g-import-not-at-top

    for name, text in texts.items():
      self._add(step=int(step), summary=text_pb(name, text))
    self._publish()


def make_writers(
  workdir: storage.Path, is_main_process: bool, also: Mapping[str, MetricWriter] | None = None
) -> dict[str, MetricWriter]:
  """``{'train': writer, 'eval': writer}``; every process logs, and only the main process writes
  files, and writes to ``also``'s writer of each split too (W&B's, ``trainer.observe.wandb_log``)."""
  writers = {}
  for split in ('train', 'eval'):
    split_writers = [LoggingWriter(split)]
    if is_main_process:
      split_writers += [
        EventsWriter(workdir / 'tensorboard' / split),
        JsonLinesWriter(workdir / 'metrics.jsonl', split),
      ]
      split_writers += [also[split]] if also and split in also else []
    writers[split] = Writers(split_writers)
  return writers


def read_metrics(workdir: str | storage.Path) -> list[dict[str, Any]]:
  """Every record of the workdir's ``metrics.jsonl`` (``[]`` before the first is written)."""
  path = storage.as_path(workdir) / 'metrics.jsonl'
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
