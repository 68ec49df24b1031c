"""The config fields that watch a run, their defaults and their checks (no JAX here).

- ``eval_splits``: splits evaluated side by side at each evaluation, each metric named
  ``<split>_<metric>``; the first split's ``best_metric`` chooses the best checkpoint. ``()``: the
  one ``eval_split``, its metrics named as they always were.
- ``peak_tflops``: one device's dense peak in TFLOP/s, for the model FLOPs utilisation on the
  progress line; ``0``: the peak ``trainer/step_cost.py`` knows for the device and ``model.dtype``,
  else no utilisation.
- ``profile_steps``: step numbers (as the progress line counts them, from 1) traced with
  ``jax.profiler`` into ``<workdir>/profile/``; each run of consecutive numbers is one trace.
- ``wandb``: ``project`` (``''``: off), ``entity`` and ``name`` (``''``: W&B's default entity, the
  workdir's name) of a Weights & Biases run that gets the same scalars and the resolved config.

Configs written before these fields existed lack them: a missing field is off.
"""

import math
import numbers

import ml_collections

from trainer.errors import ConfigError

WANDB_FIELDS = ('project', 'entity', 'name')


def default_fields() -> dict:
  """The fields with their defaults (all off), for ``configs.common.trainer_config``."""
  return dict(
    eval_splits=(),
    peak_tflops=0.0,
    profile_steps=(),
    wandb=ml_collections.ConfigDict({field: '' for field in WANDB_FIELDS}),
  )


def eval_splits(config) -> tuple[str, ...]:
  return tuple(config.get('eval_splits') or ())


def checkpoint_metric(config) -> str:
  """The metric that chooses the best checkpoint: ``best_metric``, of the first of ``eval_splits``."""
  splits = eval_splits(config)
  return f'{splits[0]}_{config.best_metric}' if splits else config.best_metric


def profile_steps(config) -> tuple[int, ...]:
  return tuple(config.get('profile_steps') or ())


def wandb_project(config) -> str:
  section = config.get('wandb') or {}
  return section.get('project') or ''


def _fail(field: str, value, allowed: str) -> None:
  raise ConfigError(f'config.{field} is {value!r}; {allowed}.')


def check_fields(config: ml_collections.ConfigDict) -> None:
  """Types and values of the fields above, where the config has them; raises ``ConfigError``."""
  splits = config.get('eval_splits', ())
  if not isinstance(splits, (tuple, list)):
    _fail('eval_splits', splits, "it must be a tuple of split names, such as ('val', 'test')")
  if len(set(splits)) != len(splits):
    _fail('eval_splits', splits, 'each split may be named once')

  peak = config.get('peak_tflops', 0.0)
  if isinstance(peak, bool) or not isinstance(peak, numbers.Real) or not math.isfinite(peak) or peak < 0:
    _fail('peak_tflops', peak, "it must be a finite number >= 0 (one device's dense peak; 0: the known one)")

  steps = config.get('profile_steps', ())
  allowed = 'it must be a tuple of step numbers >= 1 in increasing order, such as (101, 102, 103)'
  if not isinstance(steps, (tuple, list)):
    _fail('profile_steps', steps, allowed)
  for index, step in enumerate(steps):
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 1:
      _fail('profile_steps', steps, allowed)
    if index and step <= steps[index - 1]:
      _fail('profile_steps', steps, allowed)

  section = config.get('wandb', None)
  if section is None:
    return
  if not isinstance(section, (ml_collections.ConfigDict, dict)):
    _fail('wandb', section, f'it must be a section with the fields {", ".join(WANDB_FIELDS)}')
  for field in WANDB_FIELDS:
    value = section.get(field, '')
    if not isinstance(value, str) or value != value.strip():
      _fail(f'wandb.{field}', value, 'it must be a name without surrounding spaces, or empty')


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
