"""Dotted-path overrides for the tiny test configs (``override(config, {'model.width': 8})``), their
short runs (``short_run``), and the check that a bad override stops a run before it starts."""

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


def short_run(
  config, *, steps, eval_every, batch=32, eval_batch=64, log_every=1, checkpoint_every=2, warmup=2
):
  """``config`` trained ``steps`` steps (not epochs) of ``batch`` examples, logged, evaluated and
  saved every so many steps, the learning rate warming up over ``warmup`` steps."""
  config.batch_size = batch
  config.eval_batch_size = eval_batch
  config.num_epochs = 0.0
  config.total_steps = steps
  config.log_every_steps = log_every
  config.eval_every_steps = eval_every
  config.checkpoint_every_steps = checkpoint_every
  config.optimizer.warmup_steps = warmup
  return config


def assert_fails_before_any_work(make_config, overrides, message, tmp_path):
  """Training ``make_config(**overrides)`` fails with an error matching ``message`` and leaves no
  workdir; ``{tmp}`` in a string override stands for ``tmp_path``."""
  overrides = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in overrides.items()}
  workdir = tmp_path / 'workdir'
  with pytest.raises((ValueError, FileNotFoundError), match=message):
    train_and_evaluate(make_config(**overrides), workdir)
  assert not workdir.exists()
