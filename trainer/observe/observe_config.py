"""What the config fields that watch a run mean (no JAX here); ``trainer/config_schema.py`` has their
defaults, ``trainer/validation.py`` checks them and ``trainer.loop.named_metrics`` names an
evaluation's metrics by them.

- ``eval_splits``: splits evaluated side by side at each evaluation, each metric named
  ``<split>_<metric>``; the first split's ``best_metric`` chooses the best checkpoint. ``()``: the
  one ``eval_split``, its metrics named as they always were.
- ``peak_tflops``: one device's dense peak in TFLOP/s, for the model FLOPs utilisation on the
  progress line; ``0``: the peak ``trainer/observe/step_cost.py`` knows for the device and ``model.dtype``,
  else no utilisation.
- ``profile_steps``: step numbers (as the progress line counts them, from 1) traced with
  ``jax.profiler`` into ``<workdir>/profile/``; each run of consecutive numbers is one trace.
- ``wandb``: ``project`` (``''``: off), ``entity`` and ``name`` (``''``: W&B's default entity, the
  workdir's name) of a Weights & Biases run that gets the same scalars and the resolved config.
"""


def eval_splits(config) -> tuple[str, ...]:
  return tuple(config.get('eval_splits') or ())


def checkpoint_metric(config) -> str:
  """The metric that chooses the best checkpoint: ``best_metric``, of the first of ``eval_splits``."""
  splits = eval_splits(config)
  return f'{splits[0]}_{config.best_metric}' if splits else config.best_metric


def profile_steps(config) -> tuple[int, ...]:
  return tuple(config.get('profile_steps') or ())
