"""Where metrics go: clu's TensorBoard and logging writers, plus ``metrics.jsonl``.

``metrics.jsonl`` holds one JSON object per logged step (``{"step": ..., "split":
"train" | "eval", ...}``) so scripts and plots need no TensorBoard.
"""

import json
import pathlib
from typing import Any, Mapping

import numpy as np
from clu import metric_writers


class JsonLinesWriter(metric_writers.MetricWriter):
  """A clu writer that appends scalars to ``metrics.jsonl`` (clu has none for JSON)."""

  def __init__(self, path: pathlib.Path, split: str):
    self.path = pathlib.Path(path)
    self.split = split

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    record = {'step': int(step), 'split': self.split}
    record.update({key: float(np.asarray(value)) for key, value in scalars.items()})
    with self.path.open('a') as file:
      file.write(json.dumps(record) + '\n')

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


def make_writers(workdir: pathlib.Path, is_main_process: bool) -> dict[str, metric_writers.MetricWriter]:
  """``{'train': writer, 'eval': writer}``; only the main process writes files."""
  writers = {}
  for split in ('train', 'eval'):
    logdir = pathlib.Path(workdir) / 'tensorboard' / split
    base = metric_writers.create_default_writer(
      str(logdir), just_logging=not is_main_process, asynchronous=False, collection=split
    )
    if is_main_process:
      writers[split] = metric_writers.MultiWriter(
        [base, JsonLinesWriter(pathlib.Path(workdir) / 'metrics.jsonl', split)]
      )
    else:
      writers[split] = base
  return writers


def read_metrics(workdir: pathlib.Path) -> list[dict[str, Any]]:
  path = pathlib.Path(workdir) / 'metrics.jsonl'
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
