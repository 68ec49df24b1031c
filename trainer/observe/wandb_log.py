"""Weights & Biases, for those who use it: the run's scalars and resolved config through the ``wandb`` client.

``config.wandb.project`` (``''``: off) names the W&B project; ``entity`` and ``name`` are passed
on (``''``: W&B's default entity, and the workdir's name). The package is optional and not in
``requirements.txt``: asked for and missing, training stops before it starts with one line naming
the pip command. The main process logs, once per write, what goes to ``metrics.jsonl``: the
training scalars as ``train/<name>`` and the evaluation's as ``eval/<name>``, against the
training step (a metric named ``step``), so a resumed run that repeats steps after its last
checkpoint logs them again rather than having W&B drop them. The run's id is kept in the
workdir's ``wandb.json``, so rerunning the command to resume continues the same W&B run. W&B's
own files go into ``<workdir>/wandb/`` for a local workdir. ``WANDB_MODE=offline`` (W&B's
variable) keeps everything on disk, for ``wandb sync`` later.
"""

import json
import pathlib
import secrets

from trainer.errors import ConfigError
from trainer.io import storage
from trainer.io.metrics_io import MetricWriter

PIP_COMMAND = 'pip install wandb==0.31.0'
RUN_ID_FILE = 'wandb.json'


def wandb_project(config) -> str:
  """``config.wandb.project``; ``''`` (off) where the config has no ``wandb`` section."""
  section = config.get('wandb') or {}
  return section.get('project') or ''


def import_wandb(config):
  """The ``wandb`` module; a ``ConfigError`` of one line naming the pip command when it is missing."""
  try:
    import wandb  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ConfigError(
      f'config.wandb.project is {wandb_project(config)!r} but the wandb package is not installed; '
      f'run `{PIP_COMMAND}` or set --config.wandb.project=.'
    ) from None
  return wandb


def check_available(config) -> None:
  """Fails in one line, before anything is written, when W&B is asked for and not installed."""
  if wandb_project(config):
    import_wandb(config)


class _Run:
  """One W&B run shared by the train and eval writers; finished once, by whichever closes first."""

  def __init__(self, run):
    self.run, self.finished = run, False

  def log(self, values: dict) -> None:
    self.run.log(values)

  def finish(self) -> None:
    if not self.finished:
      self.finished = True
      self.run.finish()


class WandbWriter(MetricWriter):
  """A writer that logs one split's scalars to a W&B run, each as ``<split>/<name>``."""

  def __init__(self, run: _Run, split: str):
    self._run, self.split = run, split

  def write_scalars(self, step: int, scalars) -> None:
    values = {f'{self.split}/{name}': float(value) for name, value in scalars.items()}
    self._run.log({'step': int(step), **values})

  def close(self) -> None:
    self._run.finish()


def _run_id(workdir: storage.Path) -> str:
  """The W&B run id of this workdir: read from ``wandb.json``, or made and saved there."""
  path = workdir / RUN_ID_FILE
  if path.exists():
    try:
      return str(json.loads(path.read_text())['id'])
    except (json.JSONDecodeError, KeyError, TypeError):
      pass  # damaged: a new run is started and recorded
  run_id = secrets.token_hex(6)  # W&B's ids are short lowercase alphanumerics
  storage.write_text(path, json.dumps({'id': run_id}) + '\n')
  return run_id


def make_writers(config, workdir: storage.Path) -> dict[str, WandbWriter]:
  """``{'train': writer, 'eval': writer}`` of one W&B run given the resolved ``config``; ``{}`` when off."""
  if not wandb_project(config):
    return {}
  wandb = import_wandb(config)
  section = config.wandb
  local = not storage.is_remote(workdir)
  try:
    run = wandb.init(
      project=section.project,
      entity=section.get('entity') or None,
      name=section.get('name') or pathlib.PurePosixPath(str(workdir)).name,
      id=_run_id(workdir),
      resume='allow',
      config=json.loads(config.to_json_best_effort()),
      dir=str(workdir) if local else None,
    )
  except wandb.errors.Error as error:  # not logged in, no network, a project one may not write
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    raise ConfigError(
      f'config.wandb.project is {section.project!r} but W&B could not start a run ({first_line}); '
      'run `wandb login`, or set WANDB_MODE=offline to log to disk.'
    ) from None
  run.define_metric('step')
  for split in ('train', 'eval'):
    run.define_metric(f'{split}/*', step_metric='step')
  shared = _Run(run)
  return {split: WandbWriter(shared, split) for split in ('train', 'eval')}
