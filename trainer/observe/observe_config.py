"""What the config fields that watch a run mean (no JAX here); ``trainer/config_schema.py`` has their
defaults and ``trainer/validation.py`` checks them.

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

from trainer.errors import ConfigError


def eval_splits(config) -> tuple[str, ...]:
  return tuple(config.get('eval_splits') or ())


def checkpoint_metric(config) -> str:
  """The metric that chooses the best checkpoint: ``best_metric``, of the first of ``eval_splits``."""
  splits = eval_splits(config)
  return f'{splits[0]}_{config.best_metric}' if splits else config.best_metric


def profile_steps(config) -> tuple[int, ...]:
  return tuple(config.get('profile_steps') or ())


def _fail(field: str, value, allowed: str) -> None:
  raise ConfigError(f'config.{field} is {value!r}; {allowed}.')


def check_eval_splits(config, available) -> None:
  """Every one of ``eval_splits`` is a split the task can evaluate."""
  for split in eval_splits(config):
    if split not in available:
      _fail('eval_splits', tuple(config.eval_splits), f'this data has the splits {", ".join(available)}')


def check_profile_steps(config, num_steps: int) -> None:
  """The traced steps are steps the run has (``num_steps`` is known once the task is)."""
  beyond = [step for step in profile_steps(config) if step > num_steps]
  if beyond:
    _fail('profile_steps', tuple(config.profile_steps), f'this run has steps 1 to {num_steps} only')


def named_metrics(config, per_split: dict[str, dict]) -> dict:
  """One evaluation's metrics, ``{split: {name: value}}``, as written: ``<split>_<name>`` for each of
  ``eval_splits``; without them, the one split's names as they are."""
  if not eval_splits(config):
    (metrics,) = per_split.values()
    return dict(metrics)
  return {f'{split}_{name}': value for split, metrics in per_split.items() for name, value in metrics.items()}


def check_profile_workdir(config, workdir, is_remote: bool) -> None:
  """Traces are written by the profiler's own file system code, which a bucket workdir is not tested with."""
  if profile_steps(config) and is_remote:
    _fail(
      'profile_steps',
      tuple(config.profile_steps),
      f'traces are written to a local workdir only, not {workdir}',
    )
