"""Checks a whole config before anything is written, read at length or compiled, and completes it.

Each problem is a ``ConfigError`` (or ``WorkdirError``) of one line that names the field,
its value and what is allowed. The checks run cheapest first:

1. ``check_trainer_fields``: the trainer's own fields against their schema
   (``trainer/config_schema.py``: types, ranges) and the rules between fields. It needs nothing
   but the config, so the command line runs it before anything long.
2. ``complete_config``: the config completed from the defaults of the trainer's fields and of
   the task's sections (``Task.config_sections``), each section checked by its reader
   (``resolve_config`` runs 1 and 2).
3. ``check_task_names``: ``eval_split``, ``eval_splits`` and ``best_metric`` against the names
   the task can produce (the task has found its data by then).
4. ``total_steps``, ``check_profile_steps`` and ``check_profile_workdir``: the run's length, and
   the traced steps against it and against the workdir.
5. ``check_workdir``: the workdir can be created and written, without creating it.

``trainer.task.resolved_task_class`` runs 1 and 2, ``trainer.task.load_task`` 1 to 3,
``trainer.loop.train_and_evaluate`` 4, ``trainer.io.workdir.check_same_identity`` 5.
"""

import dataclasses
import math
import os
import pathlib

import ml_collections

from trainer import config_schema
from trainer.config_sections import from_section, to_section
from trainer.errors import ConfigError, WorkdirError
from trainer.io import storage
from trainer.observe.observe_config import eval_splits, profile_steps


def _fail(field: str, value, allowed: str) -> None:
  raise ConfigError(f'config.{field} is {value!r}; {allowed}.')


def check_split_name(split, field: str = 'eval_split', *, alternatives: bool = False) -> None:
  """A split (or a language) is a name, never a path: no separators, no leading dot, no spaces.

  With ``alternatives``, ``split`` may list several names in order of preference, ``test|val``.
  """
  names = split.split('|') if alternatives and isinstance(split, str) else [split]
  for name in names:
    if (
      not isinstance(name, str)
      or not name
      or name.startswith('.')
      or name != name.strip()
      or any(character in name for character in '/\\\0')
    ):
      raise ConfigError(
        f'{field} is {split!r}; it must be a plain name such as train, test or de '
        '(no "/", "\\" or leading ".")'
        + (', or names joined by "|", such as test|val.' if alternatives else '.')
      )


def resolve_split(choice: str, available) -> str:
  """The first of ``choice``'s ``|``-separated names that is ``available`` (else the first name)."""
  names = choice.split('|')
  return next((name for name in names if name in available), names[0])


def trainer_fields(config: ml_collections.ConfigDict) -> config_schema.Trainer:
  """The trainer's fields of ``config``, those it lacks at their defaults, each of its declared type."""
  given = {name: config[name] for name in config_schema.TRAINER_FIELDS if name in config}
  return from_section(config_schema.Trainer, given, '')


def check_trainer_fields(config: ml_collections.ConfigDict) -> config_schema.Trainer:
  """The trainer's fields of ``config`` (``trainer_fields``, whose reader checks each field's type and
  range) checked against the rules between them; raises ``ConfigError``."""
  fields = trainer_fields(config)
  if fields.task.count(':') != 1:
    _fail('task', fields.task, "it must look like 'package.module:ClassName'")
  if not fields.best_metric:
    _fail('best_metric', fields.best_metric, 'it must name an evaluation metric')
  check_split_name(fields.eval_split, 'config.eval_split', alternatives=True)
  train_split = config.get('data', {}).get('train_split')
  if train_split is not None:  # part of file names
    check_split_name(train_split, 'config.data.train_split')
  if not fields.total_steps and not fields.num_epochs:
    raise ConfigError('config.total_steps and config.num_epochs are both 0; set one of them > 0.')
  if fields.mesh.data < -1 or fields.mesh.data == 0:
    _fail('mesh.data', fields.mesh.data, 'it must be -1 (all devices left) or >= 1')
  if fields.batch_size % fields.grad_accum_steps:
    raise ConfigError(
      f'config.batch_size ({fields.batch_size}) must be divisible by config.grad_accum_steps '
      f'({fields.grad_accum_steps}).'
    )
  if len(set(fields.eval_splits)) != len(fields.eval_splits):
    _fail('eval_splits', fields.eval_splits, 'each split may be named once')
  for split in fields.eval_splits:
    check_split_name(split, 'config.eval_splits')
  steps = fields.profile_steps
  if any(step < 1 for step in steps) or any(later <= earlier for earlier, later in zip(steps, steps[1:])):
    _fail(
      'profile_steps',
      steps,
      'it must be a tuple of step numbers >= 1 in increasing order, such as (101, 102, 103)',
    )
  for name, value in dataclasses.asdict(fields.wandb).items():
    if value != value.strip():
      _fail(f'wandb.{name}', value, 'it must be a name without surrounding spaces, or empty')
  return fields


def complete_config(
  config: ml_collections.ConfigDict, task_class, fields: config_schema.Trainer
) -> ml_collections.ConfigDict:
  """``config`` with every field it lacks added, in place: the trainer's defaults (``fields``, its
  trainer fields as ``trainer_fields`` read them), and the defaults of each section
  ``task_class.config_sections`` names (each section's reader checks its fields). The values
  ``config`` has are kept as they are. Returns ``config``."""
  with config.unlocked():
    _fill(config, to_section(fields))
    for name, read in task_class.config_sections.items():
      section = read(config.get(name), config)
      if section is None:
        continue
      if name in config:
        _fill(config[name], section)
      else:
        config[name] = section
  return config


def resolve_config(config: ml_collections.ConfigDict, task_class) -> ml_collections.ConfigDict:
  """The complete config a run records (``complete_config``, in place), its trainer fields checked."""
  return complete_config(config, task_class, check_trainer_fields(config))


def _fill(section: ml_collections.ConfigDict, complete: ml_collections.ConfigDict) -> None:
  """Adds to ``section`` the fields of ``complete`` it lacks (a typed ``None`` stays a reference)."""
  for name, value in complete.items(preserve_field_references=True):
    if name not in section:
      section[name] = value
    elif isinstance(value, ml_collections.ConfigDict) and isinstance(
      section[name], ml_collections.ConfigDict
    ):
      _fill(section[name], value)


def check_task_names(config: ml_collections.ConfigDict, task) -> None:
  """``eval_split`` and ``best_metric`` must be names the task can evaluate and report.

  An ``eval_split`` of alternatives (``test|val``) is replaced by the first one the data has.
  """
  splits = task.eval_split_names()
  resolved = resolve_split(config.eval_split, splits)
  if resolved not in splits:
    _fail('eval_split', config.eval_split, f'this data has the splits {", ".join(splits)}')
  config.eval_split = resolved  # ``test|val`` becomes the split used, as the workdir's config.json says
  check_eval_splits(config, splits)
  metrics = task.eval_metric_names()
  if config.ema.decay:  # the moving average's metrics (trainer/ema.py)
    metrics = (*metrics, *(f'ema_{name}' for name in metrics))
  if config.best_metric not in metrics:
    _fail('best_metric', config.best_metric, f'an evaluation reports {", ".join(metrics)}')


def check_eval_splits(config: ml_collections.ConfigDict, available) -> None:
  """Every one of ``eval_splits`` is a split the task can evaluate."""
  for split in eval_splits(config):
    if split not in available:
      _fail('eval_splits', tuple(config.eval_splits), f'this data has the splits {", ".join(available)}')


def total_steps(config: ml_collections.ConfigDict, task) -> int:
  """``config.total_steps``, or ``config.num_epochs`` over the task's training examples."""
  if config.get('total_steps'):
    return int(config.total_steps)
  if config.get('num_epochs'):
    return math.ceil(config.num_epochs * task.num_train_examples() / config.batch_size)
  raise ValueError('Set config.total_steps or config.num_epochs.')


def check_profile_steps(config: ml_collections.ConfigDict, num_steps: int) -> None:
  """The traced steps are steps the run has (``num_steps`` is known once the task is)."""
  beyond = [step for step in profile_steps(config) if step > num_steps]
  if beyond:
    _fail('profile_steps', tuple(config.profile_steps), f'this run has steps 1 to {num_steps} only')


def check_profile_workdir(config: ml_collections.ConfigDict, workdir) -> None:
  """Traces are written by the profiler's own file system code, which a bucket workdir is not tested with."""
  if profile_steps(config) and storage.is_remote(workdir):
    _fail(
      'profile_steps',
      tuple(config.profile_steps),
      f'traces are written to a local workdir only, not {workdir}',
    )


def check_workdir(workdir) -> None:
  """The workdir is a folder we can write, or can be created as one; nothing is created here.

  A workdir in an object store (``gs://bucket/run``) needs its bucket; whether it may be
  written is known at the first write.
  """
  if storage.is_remote(workdir):
    _check_bucket(str(workdir))
    return
  path = pathlib.Path(workdir)
  if path.exists() or path.is_symlink():
    if not path.is_dir():
      raise WorkdirError(f'workdir {path} exists and is not a folder; choose another --workdir.')
    if not os.access(path, os.W_OK | os.X_OK):
      raise WorkdirError(f'workdir {path} is not writable (read-only file system or permissions).')
    return
  parent = path.absolute().parent
  while not parent.exists():
    parent = parent.parent
  if not parent.is_dir():
    raise WorkdirError(f'workdir {path} cannot be created: {parent} is not a folder.')
  if not os.access(parent, os.W_OK | os.X_OK):
    raise WorkdirError(
      f'workdir {path} cannot be created: {parent} is not writable (read-only file system or permissions).'
    )


def _check_bucket(url: str) -> None:
  scheme, _, rest = url.partition('://')
  bucket = rest.split('/', 1)[0]
  if not bucket:
    raise WorkdirError(f'workdir {url} names no bucket; use {scheme}://BUCKET/PATH.')
  try:
    fs, _ = storage.filesystem(url)
    found = fs.exists(bucket)
  except Exception as error:  # pylint: disable=broad-except  (credentials, network: the library says which)
    raise WorkdirError(f'workdir {url}: cannot reach bucket {bucket} ({error}).') from None
  if not found:
    raise WorkdirError(f'workdir {url}: bucket {bucket} does not exist (or these credentials cannot see it).')
