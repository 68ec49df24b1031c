"""Dotted-path overrides for the tiny test configs: ``override(config, {'model.width': 8})``, and the
check that a bad override stops a run before it starts."""

import pytest

from trainer.loop import train_and_evaluate


def override(config, overrides):
  """Sets each ``'a.b.c'`` field of ``config``; a path that is not in the config is a KeyError."""
  for path, value in overrides.items():
    *parents, name = path.split('.')
    section = config
    for part in parents:
      section = section[part]
    if name not in section:
      raise KeyError(f'{path} is not a field of the config')
    section[name] = value
  return config


def assert_fails_before_any_work(make_config, overrides, message, tmp_path):
  """Training ``make_config(**overrides)`` fails with an error matching ``message`` and leaves no
  workdir; ``{tmp}`` in a string override stands for ``tmp_path``."""
  overrides = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in overrides.items()}
  workdir = tmp_path / 'workdir'
  with pytest.raises((ValueError, FileNotFoundError), match=message):
    train_and_evaluate(make_config(**overrides), workdir)
  assert not workdir.exists()
