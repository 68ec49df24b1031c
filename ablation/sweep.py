"""A sweep over config axes and seeds: plan every run, check them all, then train them one by one.

An axis is ``'path=value1,value2,...'``: an existing config field and the values it takes, each
parsed with the field's type (``model.depth=1,2``, ``optimizer.learning_rate=1e-3,3e-3``).
The runs are every combination of the axes' values, each repeated for ``num_seeds`` seeds (seed i
sets ``config.seed`` to the config's own seed + i), and each trains in ``<workdir>/<name>/`` where
the name spells its overrides (``depth=2,seed=0``). Combinations whose task says they
do not exist (it raises ``trainer.task.NotApplicable``) are not run; the tables write N/A for them.

Every run is checked before the first one trains: its task is built (so a bad value fails with
the task's own message, naming the allowed values) and its workdir, if there is one, must hold
the same model. That task (one per combination, shared by its seeds) is the one the run trains
with, never built again, and is dropped when the combination's runs are done. A run whose
workdir has an evaluation at its last step and a checkpoint of that step is finished and is not
trained again, whether ablate.py or train.py trained it; any other run starts, or resumes from its
latest checkpoint, so rerunning a sweep continues where it stopped.
"""

import dataclasses
import itertools
import pathlib
import re
import shlex
import time
from typing import Any, Callable

import ml_collections
from absl import flags

from ablation import tables
from trainer.errors import ConfigError
from trainer.io import storage
from trainer.io import workdir as workdir_lib
from trainer.io.checkpoints import Checkpoints
from trainer.io.metrics_io import read_metrics
from trainer.loop import train_and_evaluate
from trainer.observe import observe_config
from trainer.task import NotApplicable, Task, load_task
from trainer.validation import total_steps

_PARSERS = {
  bool: flags.BooleanParser(),
  int: flags.IntegerParser(),
  float: flags.FloatParser(),
  str: flags.ArgumentParser(),
}


@dataclasses.dataclass(frozen=True)
class Axis:
  path: str
  values: tuple


@dataclasses.dataclass
class Run:
  name: str
  overrides: dict[str, Any]  # field path -> value, the seed last
  config: ml_collections.ConfigDict
  workdir: pathlib.Path
  task: Task | None  # built once per combination, shared by its seeds; dropped once the run is done


@dataclasses.dataclass
class Plan:
  config: ml_collections.ConfigDict
  axes: list[Axis]
  seeds: list[int]
  runs: list[Run]
  not_applicable: list[dict[str, Any]]  # the combinations that do not exist


def _field(config: ml_collections.ConfigDict, path: str) -> tuple[ml_collections.ConfigDict, str]:
  *parents, key = path.split('.')
  node = config
  for part in parents:
    node = node.get(part) if isinstance(node, ml_collections.ConfigDict) else None
  if not isinstance(node, ml_collections.ConfigDict) or key not in node:
    raise ConfigError(f'--axis {path}: the config has no field {path!r}.')
  return node, key


def parse_axis(spec: str, config: ml_collections.ConfigDict) -> Axis:
  """``'model.depth=1,2'`` -> ``Axis('model.depth', (1, 2))``, checked against ``config``."""
  path, equals, text = spec.partition('=')
  path = path.strip()
  if not equals or not path or not text.strip():
    raise ConfigError(f"--axis {spec!r}: expected 'path=value1,value2,...'.")
  if path == 'seed':
    raise ConfigError('--axis seed: use --seeds N, which repeats every combination with N seeds.')
  node, key = _field(config, path)
  field_type = node.get_type(key)
  if field_type not in _PARSERS:
    raise ConfigError(
      f'--axis {path}: the field holds a {field_type.__name__}; an axis takes a bool, int, '
      'float or str field.'
    )
  values = []
  for item in text.split(','):
    item = item.strip()
    if not item:
      raise ConfigError(f'--axis {path}: an empty value in {text!r}.')
    try:
      value = _PARSERS[field_type].parse(item)
    except ValueError:
      raise ConfigError(
        f"--axis {path}: {item!r} is not of the field's type, {field_type.__name__}."
      ) from None
    values.append(value)
  if len(set(values)) != len(values):
    raise ConfigError(f'--axis {path}: a value is repeated in {text!r}.')
  return Axis(path, tuple(values))


def _with_overrides(
  config: ml_collections.ConfigDict, overrides: dict[str, Any]
) -> ml_collections.ConfigDict:
  config = config.copy_and_resolve_references()
  for path, value in overrides.items():
    node, key = _field(config, path)
    node[key] = value
  return config


def _run_name(overrides: dict[str, Any]) -> str:
  """``{'model.depth': 2, 'seed': 0}`` -> ``'depth=2,seed=0'`` (whole paths where last parts clash)."""
  last = [path.rsplit('.', 1)[-1] for path in overrides]
  parts = []
  for path, short in zip(overrides, last):
    key = short if last.count(short) == 1 else path
    spelled = re.sub(r'[^\w.+-]', '-', str(overrides[path]))
    parts.append(f'{key}={spelled}')
  return ','.join(parts)


def plan_sweep(
  config: ml_collections.ConfigDict, axis_specs: list[str], num_seeds: int, workdir: str | pathlib.Path
) -> Plan:
  """Every run of the sweep, each checked (task built, workdir compatible) before anything trains."""
  if not axis_specs:
    raise ConfigError('Give at least one --axis path=value1,value2,...')
  if num_seeds < 1:
    raise ConfigError(f'--seeds must be at least 1, got {num_seeds}.')
  axes = [parse_axis(spec, config) for spec in axis_specs]
  paths = [axis.path for axis in axes]
  if len(set(paths)) != len(paths):
    raise ConfigError(f'--axis: a field is given twice in {", ".join(paths)}.')
  workdir = storage.as_path(workdir)
  seeds = [config.seed + i for i in range(num_seeds)]
  runs, not_applicable = [], []
  for values in itertools.product(*(axis.values for axis in axes)):
    combination = dict(zip(paths, values))
    combination_config = _with_overrides(config, combination)
    try:
      task = load_task(combination_config)
    except NotApplicable:
      not_applicable.append(combination)
      continue
    for seed in seeds:
      overrides = dict(combination, seed=seed)
      name = _run_name(overrides)
      run = Run(name, overrides, _with_overrides(combination_config, {'seed': seed}), workdir / name, task)
      workdir_lib.check_same_identity(run.workdir, run.config, task.not_identity_fields)
      runs.append(run)
  names = [run.name for run in runs]
  if len(set(names)) != len(names):
    raise ConfigError(f'--axis: two runs would share a workdir name among {", ".join(names)}.')
  return Plan(config, axes, seeds, runs, not_applicable)


def _latest_checkpoint(workdir: pathlib.Path) -> int | None:
  if not (workdir / 'checkpoints').is_dir():
    return None
  checkpoints = Checkpoints(workdir, read_only=True)
  try:
    return checkpoints.latest_step()
  finally:
    checkpoints.close()


def _metrics_record(config: ml_collections.ConfigDict, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
  """The keys ``evaluate.py`` prints: the scalar metrics, ``step``, ``split`` and ``checkpoint``.

  With ``eval_splits``, the split is the first of them, whose metrics (the ones that choose) keep
  their plain names for the tables; the other splits' stay prefixed (``test_exact_match``)."""
  split = sweep_split(config)
  chosen_by = f'{split}_' if observe_config.eval_splits(config) else ''
  scalars = {
    name.removeprefix(chosen_by): value
    for name, value in metrics.items()
    if name not in ('step', 'split') and isinstance(value, (int, float))
  }
  return dict(scalars, step=int(step), split=split, checkpoint='latest')


def sweep_split(config: ml_collections.ConfigDict) -> str:
  """The split whose metrics a sweep's tables show: the first of ``eval_splits``, else ``eval_split``."""
  return (observe_config.eval_splits(config) or (config.eval_split,))[0]


def finished_metrics(run: Run) -> dict[str, Any] | None:
  """The final evaluation of a finished run (at its last step, with a checkpoint there), else ``None``."""
  last_step = total_steps(run.config, run.task)
  evaluations = [
    record
    for record in read_metrics(run.workdir)
    if record.get('split') == 'eval' and record.get('step') == last_step
  ]
  if not evaluations or _latest_checkpoint(run.workdir) != last_step:
    return None
  return _metrics_record(run.config, last_step, evaluations[-1])


def _shown(metrics: dict[str, Any]) -> str:
  return ' '.join(
    f'{name} {value:.4g}' for name, value in sorted(metrics.items()) if isinstance(value, float)
  )


def run_sweep(plan: Plan, log: Callable[[str], None] = print) -> dict[str, Any] | None:
  """Trains the runs that are not finished, one after another; the summary, or ``None`` if interrupted.

  The summary is what ``results.json`` holds (``ablation.tables``).
  """
  for combination in plan.not_applicable:
    log(f'{_run_name(combination)}: N/A (this combination does not exist), not run')
  records = []
  for index, run in enumerate(plan.runs, 1):
    prefix = f'[{index}/{len(plan.runs)}] {run.name}'
    metrics = finished_metrics(run)
    if metrics is not None:
      log(f'{prefix}: finished before, not trained again: {_shown(metrics)}')
    else:
      log(f'{prefix}: training in {run.workdir}')
      start = time.perf_counter()
      result = train_and_evaluate(run.config, run.workdir, run.task)
      if result.interrupted:
        log(f'{prefix}: interrupted; rerun the same command to resume the sweep.')
        return None
      metrics = _metrics_record(run.config, result.step, result.eval_metrics)
      log(f'{prefix}: trained in {time.perf_counter() - start:.0f} s: {_shown(metrics)}')
    run.task = None  # its data is freed once the combination's last seed is done
    records.append(
      dict(
        overrides=run.overrides,
        name=run.name,
        workdir=str(run.workdir),
        metrics=metrics,
        cost=run_cost(run.workdir, run.config.batch_size),
      )
    )
  return summarize(plan, records)


def run_cost(workdir: storage.Path, batch_size: int) -> dict[str, float]:
  """What a run cost, from its workdir: ``train_examples_per_second`` (the median of the logged
  steps/s, which count training time only, times the batch) and the model's numeric facts
  (``model.json``, such as a video model's ``gflops_per_clip``). Either is left out where the workdir
  does not have it."""
  workdir = storage.as_path(workdir)
  facts = workdir_lib.load_model_facts(workdir) if (workdir / workdir_lib.MODEL_FACTS_FILE).exists() else {}
  cost = {
    name: float(value)
    for name, value in facts.items()
    if isinstance(value, (int, float)) and not isinstance(value, bool)
  }
  examples_per_second = tables.train_examples_per_second(workdir, batch_size)
  if examples_per_second is not None:
    cost['train_examples_per_second'] = examples_per_second
  return cost


def summarize(plan: Plan, records: list[dict[str, Any]]) -> dict[str, Any]:
  return dict(
    task=plan.config.task,
    eval_split=sweep_split(plan.config),
    best_metric=plan.config.best_metric,
    logged_metric=observe_config.checkpoint_metric(plan.config),
    axes={axis.path: list(axis.values) for axis in plan.axes},
    seeds=plan.seeds,
    not_applicable=plan.not_applicable,
    runs=records,
  )


def _flag_text(value: Any) -> str:
  if isinstance(value, bool):
    return str(value).lower()
  return str(value)


def train_commands(plan: Plan, config_file: str, config_overrides: dict[str, Any]) -> list[str]:
  """The ``python train.py ...`` command of every run, with the sweep's other ``--config.`` overrides."""
  swept = {axis.path for axis in plan.axes} | {'seed'}
  shared = [
    f'--config.{path}={_flag_text(value)}' for path, value in config_overrides.items() if path not in swept
  ]
  commands = []
  for run in plan.runs:
    own = [f'--config.{path}={_flag_text(value)}' for path, value in run.overrides.items()]
    commands.append(
      shlex.join(
        ['python', 'train.py', '--config', config_file, '--workdir', str(run.workdir), *shared, *own]
      )
    )
  return commands
