"""Where metrics go: clu's TensorBoard and logging writers, plus ``metrics.jsonl``.

``metrics.jsonl`` holds one JSON object per logged step (``{"step": ..., "split":
"train" | "eval", ...}``) so scripts and plots need no TensorBoard.

In a bucket (a ``gs://`` workdir) objects cannot be appended to: ``metrics.jsonl`` and
the TensorBoard event file are each rewritten whole at every write (they are small), and
the event file is written here rather than by TensorFlow's writer.

A full disk or bucket at any of these writes is ``storage.NoSpace`` naming the file.
"""

import io
import json
import socket
import time
from typing import Any, Mapping

import numpy as np
from clu import metric_writers

from trainer.io import storage


class ScalarsOnly(metric_writers.MetricWriter):
  """Drops every kind of value but scalars; a writer subclasses it and writes what it overrides."""

  def write_summaries(self, step, values, metadata=None):
    pass

  def write_images(self, step, images):
    pass

  def write_videos(self, step, videos):
    pass

  def write_audios(self, step, audios, *, sample_rate):
    pass

  def write_texts(self, step, texts):
    pass

  def write_histograms(self, step, arrays, num_buckets=None):
    pass

  def write_pointcloud(self, step, point_clouds, *, point_colors=None, configs=None):
    pass

  def write_hparams(self, hparams):
    pass

  def flush(self):
    pass

  def close(self):
    pass


class JsonLinesWriter(ScalarsOnly):
  """A clu writer that appends scalars to ``metrics.jsonl`` (clu has none for JSON)."""

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


class BucketEventsWriter(ScalarsOnly):
  """TensorBoard scalars and texts in one event file in a bucket, rewritten whole at each write."""

  def __init__(self, logdir: storage.Path):
    from tensorboard.summary.writer import record_writer  # pylint: disable=g-import-not-at-top

    self.path = logdir / f'events.out.tfevents.{time.time():.0f}.{socket.gethostname()}'
    self._buffer = io.BytesIO()
    self._records = record_writer.RecordWriter(self._buffer)
    self._add(file_version='brain.Event:2')

  def _add(self, summary=None, **fields) -> None:
    from tensorboard.compat.proto import event_pb2  # pylint: disable=g-import-not-at-top

    event = event_pb2.Event(wall_time=time.time(), **fields)
    if summary is not None:  # TensorFlow's Summary class where TensorFlow is installed: copied as bytes
      event.summary.ParseFromString(summary.SerializeToString())
    self._records.write(event.SerializeToString())

  def _publish(self) -> None:
    try:
      self.path.write_bytes(self._buffer.getvalue())
    except Exception as error:
      if storage.is_disk_full(error):
        raise storage.NoSpace(self.path) from error
      raise

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    from tensorboard.plugins.scalar import summary as scalar_summary  # pylint: disable=g-import-not-at-top

    for name, value in scalars.items():
      self._add(step=int(step), summary=scalar_summary.pb(name, float(np.asarray(value))))
    self._publish()

  def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
    from tensorboard.plugins.text import summary as text_summary  # pylint: disable=g-import-not-at-top

    for name, text in texts.items():
      self._add(step=int(step), summary=text_summary.pb(name, text))
    self._publish()


class _NamingFullDisk(metric_writers.MetricWriter):
  """Passes every call to ``writer``; a full disk there is ``storage.NoSpace`` naming ``where``."""

  def __init__(self, writer: metric_writers.MetricWriter, where: str):
    self._writer, self._where = writer, where

  def _call(self, name: str, *args, **kwargs):
    try:
      return getattr(self._writer, name)(*args, **kwargs)
    except Exception as error:
      if storage.is_disk_full(error) and not isinstance(error, storage.NoSpace):
        raise storage.NoSpace(self._where) from error
      raise

  def write_summaries(self, step, values, metadata=None):
    self._call('write_summaries', step, values, metadata)

  def write_scalars(self, step, scalars):
    self._call('write_scalars', step, scalars)

  def write_images(self, step, images):
    self._call('write_images', step, images)

  def write_videos(self, step, videos):
    self._call('write_videos', step, videos)

  def write_audios(self, step, audios, *, sample_rate):
    self._call('write_audios', step, audios, sample_rate=sample_rate)

  def write_texts(self, step, texts):
    self._call('write_texts', step, texts)

  def write_histograms(self, step, arrays, num_buckets=None):
    self._call('write_histograms', step, arrays, num_buckets)

  def write_hparams(self, hparams):
    self._call('write_hparams', hparams)

  def flush(self):
    self._call('flush')

  def close(self):
    self._call('close')


def _tensorboard_writer(logdir, split: str, is_main_process: bool) -> metric_writers.MetricWriter:
  if is_main_process and storage.is_remote(logdir):
    logging_writer = metric_writers.LoggingWriter(collection=split)
    return metric_writers.MultiWriter([logging_writer, BucketEventsWriter(logdir)])
  base = metric_writers.create_default_writer(
    str(logdir), just_logging=not is_main_process, asynchronous=False, collection=split
  )
  return _NamingFullDisk(base, f'the TensorBoard events in {logdir}')


def make_writers(
  workdir: storage.Path, is_main_process: bool, also: Mapping[str, metric_writers.MetricWriter] | None = None
) -> dict[str, metric_writers.MetricWriter]:
  """``{'train': writer, 'eval': writer}``; only the main process writes files, and writes to ``also``'s
  writer of each split too (W&B's, ``trainer.observe.wandb_log``)."""
  writers = {}
  for split in ('train', 'eval'):
    logdir = workdir / 'tensorboard' / split
    base = _tensorboard_writer(logdir, split, is_main_process)
    if is_main_process:
      extra = [also[split]] if also and split in also else []
      writers[split] = metric_writers.MultiWriter(
        [base, JsonLinesWriter(workdir / 'metrics.jsonl', split), *extra]
      )
    else:
      writers[split] = base
  return writers


def read_metrics(workdir: str | storage.Path) -> list[dict[str, Any]]:
  """Every record of the workdir's ``metrics.jsonl`` (``[]`` before the first is written)."""
  path = storage.as_path(workdir) / 'metrics.jsonl'
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
