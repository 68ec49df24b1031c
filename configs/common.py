"""Helpers for config files: ``experiment`` for a recipe's differences, ``unset`` for a field with no value.

A config states what differs from the defaults; ``experiment`` returns the complete config (every field
of the trainer and of the task's sections), so ``--config.X=...`` can set any field on the command line.
"""

import ml_collections


def unset(field_type: type) -> ml_collections.FieldReference:
  """A field without a value that the command line can still set (``--config.data.path=DIR``)."""
  return ml_collections.FieldReference(None, field_type=field_type)


def experiment(base, **fields) -> ml_collections.ConfigDict:
  """The complete config of ``base`` with ``fields`` over it.

  ``base`` is a task (``'vit.task:ImageClassification'``: the defaults) or another config's
  ``get_config()``. A section is given as a ``dict`` of the fields that differ
  (``model=dict(width=64)``); fields not given keep ``base``'s values.
  """
  from trainer.task import task_class  # pylint: disable=g-import-not-at-top  (imports the family)
  from trainer.validation import complete_config, trainer_fields  # pylint: disable=g-import-not-at-top

  config = ml_collections.ConfigDict(dict(task=base)) if isinstance(base, str) else base
  _update(config, fields)
  return complete_config(config, task_class(config.task), trainer_fields(config))


def trainer_config() -> ml_collections.ConfigDict:
  """The trainer's fields with their defaults (``trainer/config_schema.py``), for benchmarks and tests
  that bring their own task."""
  from trainer.config_schema import Trainer  # pylint: disable=g-import-not-at-top
  from trainer.config_sections import to_section  # pylint: disable=g-import-not-at-top

  return to_section(Trainer())


def _update(config: ml_collections.ConfigDict, fields: dict) -> None:
  for name, value in fields.items():
    if isinstance(value, dict) and isinstance(config.get(name), ml_collections.ConfigDict):
      _update(config[name], value)
    else:
      config[name] = value
