"""What the explorer shows, without the page: the runs named on the command line, each a workdir's kept
checkpoints or a weights folder, restored once and kept; and a sweep's arms.

A ``Run`` restores a checkpoint the first time it is asked for (``predictor(step)``) and keeps it, so
moving back and forth over a run's checkpoints restores each one once. The model's graph is the same
at every checkpoint, so the compiled functions of ``explore.views`` serve them all.
"""

import dataclasses
import pathlib
import threading

from ablation import tables
from trainer.errors import CheckpointError, WorkdirError
from trainer.io import workdir as workdir_lib
from trainer.io.checkpoints import Checkpoints
from trainer.io.metrics_io import read_metrics
from trainer.predictor import Predictor, load_predictor


class Run:
  """One source of models: a workdir written by ``train.py`` (every kept checkpoint) or, with
  ``weights=True``, a timm or Hugging Face folder (one model, step 0)."""

  def __init__(self, path: pathlib.Path, *, weights: bool = False, arch: str = '', name: str | None = None):
    self.path, self.weights, self.arch = path, weights, arch
    self.name = name or path.name
    self._predictors: dict[int, Predictor] = {}
    self._lock = threading.Lock()

  def steps(self) -> list[int]:
    """The checkpoints kept, oldest first; a weights folder has the one step 0."""
    if self.weights:
      return [0]
    checkpoints = Checkpoints(self.path, read_only=True, needed_items=('params',))
    try:
      return [step for step in checkpoints.all_steps() if checkpoints.problem(step) is None]
    finally:
      checkpoints.close()

  def problem(self) -> str | None:
    """Why nothing of this run can be shown yet (one line), or ``None``."""
    if not self.weights and not self.steps():
      return f'{self.path} has no intact checkpoint yet: this column answers once the run has saved one.'
    return None

  def predictor(self, step: int | None = None) -> Predictor:
    """The predictor of checkpoint ``step`` (default: the latest), restored once and kept."""
    steps = self.steps()
    if not steps:
      raise CheckpointError(self.problem() or f'{self.path}: no checkpoint.')
    step = steps[-1] if step is None else int(step)
    if step not in steps:
      raise CheckpointError(f'{self.name} keeps no checkpoint of step {step}; it keeps {steps}.')
    with self._lock:
      if step not in self._predictors:
        if self.weights:
          from vit.weights.predictor import load_predictor as load_weights  # pylint: disable=g-import-not-at-top

          self._predictors[step] = load_weights(self.path, self.arch)
        else:
          self._predictors[step] = load_predictor(self.path, step)
      return self._predictors[step]

  def metrics(self) -> list[dict]:
    """The records of ``metrics.jsonl`` (none for a weights folder)."""
    return [] if self.weights else read_metrics(self.path)


def check_workdir(path: pathlib.Path) -> None:
  """A one-line ``WorkdirError`` unless ``path`` is a folder with the config ``train.py`` saves."""
  if not path.is_dir():
    raise WorkdirError(f'--workdir {path}: no such folder.')
  if not (path / workdir_lib.CONFIG_FILE).exists():
    raise WorkdirError(
      f'--workdir {path}: no {workdir_lib.CONFIG_FILE}; it is not a workdir written by train.py.'
    )


@dataclasses.dataclass
class Sweep:
  """A sweep written by ``ablate.py``: its summary, its table as ``ablate.py`` prints it, and one run per
  combination (its first seed), named by the combination."""

  path: pathlib.Path
  summary: dict
  table: str
  arms: list[Run]


def load_sweep(path: pathlib.Path) -> Sweep:
  if not path.is_dir():
    raise WorkdirError(f'--sweep {path}: no such folder.')
  summary = tables.read_results(path)
  axes = list(summary['axes'])
  arms = []
  for group in tables.group_runs(summary).values():
    first = group[0]
    label = ','.join(f'{axis.rsplit(".", 1)[-1]}={first["overrides"][axis]}' for axis in axes)
    arms.append(Run(path / first['name'], name=label))
  return Sweep(path, summary, tables.markdown(summary), arms)
