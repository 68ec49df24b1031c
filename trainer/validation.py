"""Checks a whole config before anything is written, read at length or compiled.

Each problem is a ``ConfigError`` (or ``WorkdirError``) of one line that names the field,
its value and what is allowed. The checks run cheapest first:

1. ``check_trainer_fields``: the trainer's own fields (types, ranges, fields that must
   go together). It needs nothing but the config, so the command line runs it before it
   imports JAX.
2. ``check_task_names``: ``eval_split`` and ``best_metric`` against the names the task
   can produce (the task has found its data by then).
3. ``check_workdir``: the workdir can be created and written, without creating it.

``trainer.task.load_task`` runs 1 and 2; ``trainer.workdir.check_same_identity`` runs 3.
"""

import math
import numbers
import os
import pathlib

import ml_collections

from trainer import observe_config, storage
from trainer.errors import ConfigError, WorkdirError

OPTIMIZERS = ('adamw', 'sgd')
SCHEDULES = ('constant', 'cosine', 'linear', 'rsqrt')
BEST_MODES = ('max', 'min')

# field -> smallest allowed value, for integer fields.
_INTEGERS = {
  'seed': 0,
  'batch_size': 1,
  'eval_batch_size': 1,
  'grad_accum_steps': 1,
  'total_steps': 0,
  'log_every_steps': 1,
  'eval_every_steps': 1,
  'checkpoint_every_steps': 1,
  'keep_checkpoints': 1,
  'optimizer.warmup_steps': 0,
}
# field -> (lowest, highest, whether the highest is allowed), for real-valued fields.
_REALS = {
  'num_epochs': (0.0, math.inf, False),
  'label_smoothing': (0.0, 1.0, False),
  'optimizer.end_learning_rate': (0.0, math.inf, False),
  'optimizer.weight_decay': (0.0, math.inf, False),
  'optimizer.b1': (0.0, 1.0, False),
  'optimizer.b2': (0.0, 1.0, False),
  'optimizer.eps': (0.0, math.inf, False),
  'optimizer.momentum': (0.0, 1.0, False),
  'optimizer.grad_clip_norm': (0.0, math.inf, False),
  'ema.decay': (0.0, 1.0, False),
}
#: the fields of the optional ``ema`` section (``trainer/ema.py``)
EMA_FIELDS = ('decay',)


def _get(config: ml_collections.ConfigDict, field: str):
  """The value at a dotted path; ``KeyError`` when a section or the field is missing."""
  value = config
  for part in field.split('.'):
    if not isinstance(value, (ml_collections.ConfigDict, dict)) or part not in value:
      raise KeyError(field)
    value = value[part]
  return value


def _fail(field: str, value, allowed: str) -> None:
  raise ConfigError(f'config.{field} is {value!r}; {allowed}.')


def _check_integer(config, field: str, lowest: int) -> None:
  value = _get(config, field)
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    _fail(field, value, f'it must be an integer >= {lowest}')
  if value < lowest:
    _fail(field, value, f'it must be >= {lowest}')


def _check_real(config, field: str, lowest: float, highest: float, highest_allowed: bool) -> None:
  value = _get(config, field)
  upper = ']' if highest_allowed else ')'
  allowed = (
    f'it must be a number in [{lowest:g}, {highest:g}{upper}'
    if highest < math.inf
    else f'it must be a finite number >= {lowest:g}'
  )
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
    _fail(field, value, allowed)
  if value < lowest or value > highest or (value == highest and not highest_allowed):
    _fail(field, value, allowed)


def _check_choice(config, field: str, choices: tuple[str, ...]) -> None:
  value = _get(config, field)
  if value not in choices:
    _fail(field, value, f'allowed values: {", ".join(choices)}')


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


def check_trainer_fields(config: ml_collections.ConfigDict) -> None:
  """Types, ranges and cross-field rules of the fields every config has; raises ``ConfigError``."""
  missing = [
    field
    for field in (
      'task',
      *_INTEGERS,
      'num_epochs',
      'best_metric',
      'best_mode',
      'eval_split',
      'optimizer.name',
      'optimizer.schedule',
      'optimizer.learning_rate',
    )
    if not _has(config, field)
  ]
  if missing:
    raise ConfigError(f'config has no {", ".join(missing)}; configs/vit_digits.py shows every field.')
  task = config.task
  if not isinstance(task, str) or task.count(':') != 1:
    _fail('task', task, "it must look like 'package.module:ClassName'")
  for field, lowest in _INTEGERS.items():
    _check_integer(config, field, lowest)
  for field, bounds in _REALS.items():
    if _has(config, field):
      _check_real(config, field, *bounds)
  _check_choice(config, 'optimizer.name', OPTIMIZERS)
  _check_choice(config, 'optimizer.schedule', SCHEDULES)
  _check_choice(config, 'best_mode', BEST_MODES)
  rate = config.optimizer.learning_rate
  if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not math.isfinite(rate) or rate <= 0:
    _fail('optimizer.learning_rate', rate, 'it must be a finite number > 0')
  if not isinstance(config.best_metric, str) or not config.best_metric:
    _fail('best_metric', config.best_metric, 'it must name an evaluation metric')
  check_split_name(config.eval_split, 'config.eval_split', alternatives=True)
  if _has(config, 'data.train_split') and config.data.train_split is not None:  # part of file names
    check_split_name(config.data.train_split, 'config.data.train_split')
  if not config.total_steps and not config.num_epochs:
    raise ConfigError('config.total_steps and config.num_epochs are both 0; set one of them > 0.')
  if _has(config, 'mesh'):  # absent from configs saved before it existed: data=-1, fsdp=1
    _check_integer(config, 'mesh.fsdp', 1)
    if _has(config, 'mesh.model'):  # likewise: model=1
      _check_integer(config, 'mesh.model', 1)
    _check_integer(config, 'mesh.data', -1)
    if config.mesh.data == 0:
      _fail('mesh.data', 0, 'it must be -1 (all devices left) or >= 1')
  _check_ema_section(config)
  if config.batch_size % config.grad_accum_steps:
    raise ConfigError(
      f'config.batch_size ({config.batch_size}) must be divisible by config.grad_accum_steps '
      f'({config.grad_accum_steps}).'
    )
  observe_config.check_fields(config)
  for split in config.get('eval_splits', ()):
    check_split_name(split, 'config.eval_splits')


def _check_ema_section(config) -> None:
  """The optional ``ema`` section holds only known fields (``decay`` is checked with the reals)."""
  if not _has(config, 'ema'):
    return
  if not isinstance(config.ema, (ml_collections.ConfigDict, dict)):
    _fail('ema', config.ema, 'it must be a section with the field decay')
  for name in config.ema:
    if name not in EMA_FIELDS:
      raise ConfigError(f'unknown config field ema.{name}; known: {", ".join(EMA_FIELDS)}.')


def _has(config, field: str) -> bool:
  try:
    _get(config, field)
  except KeyError:
    return False
  return True


def check_task_names(config: ml_collections.ConfigDict, task) -> None:
  """``eval_split`` and ``best_metric`` must be names the task can evaluate and report.

  An ``eval_split`` of alternatives (``test|val``) is replaced by the first one the data has.
  """
  splits = task.eval_split_names()
  resolved = resolve_split(config.eval_split, splits)
  if resolved not in splits:
    _fail('eval_split', config.eval_split, f'this data has the splits {", ".join(splits)}')
  config.eval_split = resolved  # ``test|val`` becomes the split used, as the workdir's config.json says
  observe_config.check_eval_splits(config, splits)
  metrics = task.eval_metric_names()
  if _has(config, 'ema.decay') and config.ema.decay:  # the moving average's metrics (trainer/ema.py)
    metrics = (*metrics, *(f'ema_{name}' for name in metrics))
  if config.best_metric not in metrics:
    _fail('best_metric', config.best_metric, f'an evaluation reports {", ".join(metrics)}')


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
