"""Helpers for config files: ``unset`` for a field with no value yet, and the trainer's defaults.

Each experiment file writes out every field of its recipe; ``trainer_config()`` is for
benchmarks and tests that start from the defaults.
"""

import ml_collections


def unset(field_type: type) -> ml_collections.FieldReference:
  """A field without a value that the command line can still set (``--config.data.path=DIR``)."""
  return ml_collections.FieldReference(None, field_type=field_type)


def trainer_config() -> ml_collections.ConfigDict:
  """The trainer's fields with their defaults.

  ``total_steps`` (or ``num_epochs`` when ``total_steps`` is 0), ``batch_size`` (global),
  ``eval_batch_size``, ``grad_accum_steps``, ``seed``, ``log_every_steps``,
  ``eval_every_steps``, ``checkpoint_every_steps``, ``keep_checkpoints`` (latest N kept,
  plus the best by ``best_metric``/``best_mode``), ``eval_split``, ``optimizer``, ``mesh``
  (``data`` x ``fsdp`` x ``model`` devices, ``trainer.partitioning``; ``data=-1``: all that
  are left; ``model`` > 1 splits the attention heads and MLP width of each layer over that
  many devices, for layers too wide for one device's memory), ``ema`` (``decay``: a moving average
  of the parameters, ``trainer/ema.py``; 0 = off), and the fields that watch a run,
  all off (``eval_splits``, ``peak_tflops``, ``profile_steps``, ``wandb``: ``trainer/observe_config.py``).
  """
  from trainer.ema import default_ema_config  # pylint: disable=g-import-not-at-top  (JAX: not for configs)
  from trainer.observe_config import default_fields  # pylint: disable=g-import-not-at-top
  from trainer.optim import default_optimizer_config  # pylint: disable=g-import-not-at-top

  return ml_collections.ConfigDict(
    dict(
      task='',
      seed=0,
      batch_size=128,
      eval_batch_size=256,
      grad_accum_steps=1,
      total_steps=0,
      num_epochs=0.0,
      log_every_steps=50,
      eval_every_steps=500,
      checkpoint_every_steps=500,
      keep_checkpoints=3,
      best_metric='accuracy',
      best_mode='max',
      eval_split='test',
      optimizer=default_optimizer_config(),
      mesh=ml_collections.ConfigDict(dict(data=-1, fsdp=1, model=1)),
      ema=default_ema_config(),
      **default_fields(),
    )
  )
