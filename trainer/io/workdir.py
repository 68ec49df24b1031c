"""A workdir describes itself: the resolved config is saved there, and a rerun checks it.

Rerunning in a workdir resumes training. The fields that change what is learned (the
task, the model, the data) must match what the workdir was written with, otherwise
the checkpoints belong to a different model. Where the data lies (``data.path``,
``data_dir``, ``cache_dir``, a tokenizer file), how fast it is read (``num_threads``,
``prefetch_batches``), how much of a split is evaluated, and the schedule, logging and
evaluation fields may change.
"""

import json
import sys

import ml_collections

from trainer import validation
from trainer.errors import MissingFileError, WorkdirError
from trainer.io import storage
from trainer.observe.reporting import reporting_of

CONFIG_FILE = 'config.json'
MODEL_FACTS_FILE = 'model.json'  # ``Reporting.model_facts``, saved when a run starts
DATA_SIZES = 'data_sizes'  # model.json's record of ``Task.sizes``, for ``Task.without_data``
CLASSES_FILE = 'classes.json'  # ``Prediction.class_names``, saved when a run starts
IDENTITY_FIELDS = ('task', 'model', 'data')
# Under IDENTITY_FIELDS, but they do not change what is learned; a task adds its own
# (``Task.not_identity_fields``: a translator's tokenizer files, say).
NOT_IDENTITY_FIELDS = (
  'data.path',
  'data.data_dir',
  'data.cache_dir',
  'data.num_threads',
  'data.prefetch_batches',
  'data.max_eval_examples',
)


def save_config(workdir: storage.Path, config: ml_collections.ConfigDict) -> None:
  storage.write_text(workdir / CONFIG_FILE, config.to_json_best_effort(indent=2, sort_keys=True) + '\n')


def save_model_facts(workdir: storage.Path, facts: dict) -> None:
  storage.write_text(workdir / MODEL_FACTS_FILE, json.dumps(facts, indent=2, sort_keys=True) + '\n')


def load_model_facts(workdir: storage.Path) -> dict:
  """The workdir's ``model.json`` (every training run writes it when it starts)."""
  path = workdir / MODEL_FACTS_FILE
  if not path.exists():
    raise MissingFileError(f'{path} not found: {workdir} is not a workdir written by train.py.')
  try:
    facts = json.loads(path.read_text())
  except (json.JSONDecodeError, UnicodeDecodeError) as error:
    raise WorkdirError(
      f'{path} is damaged ({error}); delete it and the next training run writes it again.'
    ) from None
  if not isinstance(facts, dict):
    raise WorkdirError(
      f'{path} is damaged (not a JSON object); delete it and the next training run writes it again.'
    )
  return facts


def record_model_facts(workdir: storage.Path, task) -> None:
  """Saves ``model.json`` when a run starts: the task's reporting's ``model_facts`` (computed once, kept
  when resuming) and, under ``DATA_SIZES``, ``task.sizes.to_json()`` (written again when it changed)."""
  try:
    saved = load_model_facts(workdir) if (workdir / MODEL_FACTS_FILE).exists() else None
  except WorkdirError:
    saved = None  # damaged: written anew
  facts = dict(reporting_of(task).model_facts(task) if saved is None else saved)
  facts.pop(DATA_SIZES, None)
  if task.sizes is not None:
    facts[DATA_SIZES] = json.loads(json.dumps(task.sizes.to_json()))  # as read back: lists, not tuples
  if facts != saved:
    save_model_facts(workdir, facts)


def save_class_names(workdir: storage.Path, class_names: list[str] | None) -> None:
  """Writes ``classes.json`` (the name of each class index) for a task that has classes."""
  if class_names is None:
    return
  storage.write_text(
    workdir / CLASSES_FILE,
    json.dumps(list(class_names), ensure_ascii=False, indent=1) + '\n',
  )


def load_class_names(workdir: storage.Path) -> list[str] | None:
  """The class names saved at training time, or ``None`` where none were saved (a task without classes)."""
  path = workdir / CLASSES_FILE
  if not path.exists():
    return None
  try:
    names = json.loads(path.read_text(encoding='utf-8'))
  except (json.JSONDecodeError, UnicodeDecodeError) as error:
    raise WorkdirError(f'{path} is damaged ({error}); delete it to see class indices instead.') from None
  if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
    raise WorkdirError(f'{path} is damaged (not a list of names); delete it to see class indices instead.')
  return names


def write_or_say(path: storage.Path, data: bytes) -> bool:
  """Writes ``data`` to ``path``; where the user may not write (a shared, read-only results folder),
  says so in one line on stderr instead and returns False."""
  try:
    path.write_bytes(data)
    return True
  except OSError as error:
    print(f'note: could not write {path}: {error.strerror or error}', file=sys.stderr, flush=True)
    return False


def _read_saved(workdir: storage.Path) -> dict:
  path = workdir / CONFIG_FILE
  try:
    saved = json.loads(path.read_text())
  except (json.JSONDecodeError, UnicodeDecodeError) as error:
    raise WorkdirError(
      f'{path} is damaged ({error}); it is the config this workdir was trained with. '
      'Restore it, or use a new --workdir.'
    ) from None
  if not isinstance(saved, dict):
    raise WorkdirError(f'{path} is damaged (not a JSON object); restore it, or use a new --workdir.')
  return saved


def load_config(workdir: storage.Path) -> ml_collections.ConfigDict:
  path = workdir / CONFIG_FILE
  if not path.exists():
    raise MissingFileError(f'{path} not found: {workdir} is not a workdir written by train.py.')
  return ml_collections.ConfigDict(_read_saved(workdir))


def _flatten(value, prefix=''):
  if isinstance(value, dict):
    flat = {}
    for key, item in value.items():
      flat.update(_flatten(item, f'{prefix}.{key}' if prefix else key))
    return flat
  if isinstance(value, tuple):
    value = list(value)
  return {prefix: value}


def identity(config: dict, not_identity: tuple[str, ...] = ()) -> dict:
  """The flattened fields of ``config`` (a plain dict) that change what is learned."""
  flat = _flatten({key: config.get(key) for key in IDENTITY_FIELDS})
  ignored = (*NOT_IDENTITY_FIELDS, *not_identity)
  return {field: value for field, value in flat.items() if field not in ignored}


def check_same_identity(
  workdir: storage.Path, config: ml_collections.ConfigDict, not_identity: tuple[str, ...] = ()
) -> None:
  """Raises ``WorkdirError`` if the workdir cannot be written or holds another model (naming the field).

  ``not_identity`` names the task's own fields that may change (``Task.not_identity_fields``).
  Creates nothing: a workdir that does not exist yet only has to be creatable.
  """
  validation.check_workdir(workdir)
  if not (workdir / CONFIG_FILE).exists():
    return
  saved = identity(_read_saved(workdir), not_identity)
  current = identity(json.loads(config.to_json_best_effort()), not_identity)
  for field in sorted(set(saved) | set(current)):
    if field not in saved:
      # A field added to the code after the workdir was written: only the user knows whether
      # its default is what that run did, so say how to resume rather than guess.
      raise WorkdirError(
        f'{workdir / CONFIG_FILE} has no {field} (the field is newer than the workdir); it is '
        f'{current[field]!r} now. If that is what the run used, add it there to resume; '
        'otherwise use a new --workdir.'
      )
    if saved.get(field) != current.get(field):
      raise WorkdirError(
        f'{workdir} was written by a different config: {field} is {saved.get(field)!r} there and '
        f'{current.get(field)!r} now. Use a new --workdir, or the same config to resume.'
      )
