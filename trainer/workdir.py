"""A workdir describes itself: the resolved config is saved there, and a rerun checks it.

Rerunning in a workdir resumes training. The task, model and data fields must
match what the workdir was written with (otherwise the checkpoints belong to a
different model); the schedule, logging and evaluation fields may change.
"""

import json
import pathlib

import ml_collections

CONFIG_FILE = 'config.json'
IDENTITY_FIELDS = ('task', 'model', 'data')


def save_config(workdir: pathlib.Path, config: ml_collections.ConfigDict) -> None:
  path = pathlib.Path(workdir) / CONFIG_FILE
  temporary = path.with_suffix('.tmp')
  temporary.write_text(config.to_json_best_effort(indent=2, sort_keys=True) + '\n')
  temporary.replace(path)


def load_config(workdir: pathlib.Path) -> ml_collections.ConfigDict:
  path = pathlib.Path(workdir) / CONFIG_FILE
  if not path.exists():
    raise FileNotFoundError(f'{path} not found: {workdir} is not a workdir written by train.py.')
  return ml_collections.ConfigDict(json.loads(path.read_text()))


def _flatten(value, prefix=''):
  if isinstance(value, dict):
    flat = {}
    for key, item in value.items():
      flat.update(_flatten(item, f'{prefix}.{key}' if prefix else key))
    return flat
  if isinstance(value, tuple):
    value = list(value)
  return {prefix: value}


def check_same_identity(workdir: pathlib.Path, config: ml_collections.ConfigDict) -> None:
  """Raises ``ValueError`` naming the first differing field if the workdir holds another model."""
  path = pathlib.Path(workdir) / CONFIG_FILE
  if not path.exists():
    return
  saved = _flatten({key: json.loads(path.read_text()).get(key) for key in IDENTITY_FIELDS})
  current = _flatten({key: json.loads(config.to_json_best_effort()).get(key) for key in IDENTITY_FIELDS})
  for field in sorted(set(saved) | set(current)):
    if saved.get(field) != current.get(field):
      raise ValueError(
          f'{workdir} was written by a different config: {field} is {saved.get(field)!r} there and '
          f'{current.get(field)!r} now. Use a new --workdir, or the same config to resume.')
