"""A sweep's results: ``results.json`` (every run), ``results.csv`` (one row per run) and ``results.md``.

``results.json`` is the summary ``ablation.sweep.run_sweep`` returns: ``task``, ``eval_split``,
``best_metric``, ``logged_metric`` (its name in ``metrics.jsonl``: ``<split>_<metric>`` with
``eval_splits``), ``axes`` (field path -> values), ``seeds``, ``not_applicable`` (the combinations
that do not exist) and ``runs``, each ``{"overrides": {path: value, ..., "seed": s}, "name",
"workdir", "metrics", "cost"}`` with the metrics ``evaluate.py`` prints and what the run cost
(``ablation.sweep.run_cost``: training examples a second, and the model's facts such as a video
model's GFLOPs per clip), so that a record of the sweep keeps its cost columns.

``results.md`` holds the table the task draws for the sweep (``Reporting.ablation_table``: a family
knows the axes of the paper tables it reproduces) or else the generic one: one row per
combination, one column per metric. Each cell is the mean ± sample standard deviation over
seeds; the helpers below build such cells for any family's table.
"""

import csv
import io
import itertools
import json
from typing import Any

import numpy as np

from trainer.errors import WorkdirError
from trainer.io import storage
from trainer.io.metrics_io import read_metrics
from trainer.observe.reporting import reporting_of
from trainer.task import task_class

RESULTS_JSON, RESULTS_CSV, RESULTS_MD = 'results.json', 'results.csv', 'results.md'
_NOT_METRICS = ('step', 'split', 'checkpoint')


def combination(record: dict[str, Any], axes: list[str]) -> tuple:
  return tuple(record['overrides'][path] for path in axes)


def group_runs(summary: dict[str, Any]) -> dict[tuple, list[dict[str, Any]]]:
  """Combination (a tuple of axis values, in axis order) -> its runs, one per finished seed."""
  axes = list(summary['axes'])
  groups: dict[tuple, list[dict[str, Any]]] = {}
  for record in summary['runs']:
    groups.setdefault(combination(record, axes), []).append(record)
  return groups


def is_not_applicable(summary: dict[str, Any], values: tuple) -> bool:
  axes = list(summary['axes'])
  return any(tuple(entry[path] for path in axes) == values for entry in summary['not_applicable'])


def train_examples_per_second(workdir: storage.Path, batch_size: int) -> float | None:
  """Training examples a second: the median logged steps/s (training steps on training time only,
  without compilation, evaluations or saves) times the batch; ``None`` before the first log."""
  rates = [record['steps_per_sec'] for record in read_metrics(workdir) if 'steps_per_sec' in record]
  return float(np.median(rates)) * batch_size if rates else None


def metric_values(runs: list[dict[str, Any]], metric: str) -> list[float]:
  return [run['metrics'][metric] for run in runs if metric in run['metrics']]


def mean_std(values: list[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (0 for one value)."""
  values = np.asarray(values, np.float64)
  return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0


def cell(values: list[float], num_seeds: int, scale: float = 1.0, digits: int = 1) -> str:
  if not values:
    return 'not run'
  mean, std = mean_std([value * scale for value in values])
  text = f'{mean:.{digits}f} ± {std:.{digits}f}' if len(values) > 1 else f'{mean:.{digits}f}'
  return text if len(values) == num_seeds else f'{text} (n={len(values)})'


def over_seeds(summary: dict[str, Any]) -> str:
  num_seeds = len(summary['seeds'])
  return f'mean ± std over {num_seeds} seed{"s" if num_seeds > 1 else ""}'


def markdown_rows(header: list[str], rows: list[list[str]]) -> str:
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
  lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
  return '\n'.join(lines)


def metric_names(summary: dict[str, Any]) -> list[str]:
  return sorted({name for run in summary['runs'] for name in run['metrics'] if name not in _NOT_METRICS})


def all_combinations(summary: dict[str, Any]) -> list[tuple]:
  """Every combination of the axes' values, in sweep order, including the N/A ones."""
  return list(itertools.product(*summary['axes'].values()))


def generic_table(summary: dict[str, Any]) -> str:
  groups, num_seeds = group_runs(summary), len(summary['seeds'])
  metrics = metric_names(summary)
  header = list(summary['axes']) + metrics
  rows = []
  for values in all_combinations(summary):
    if is_not_applicable(summary, values):
      cells = ['N/A'] * len(metrics)
    else:
      runs = groups.get(values, [])
      cells = [cell(metric_values(runs, name), num_seeds, digits=4) for name in metrics]
    rows.append([str(value) for value in values] + cells)
  caption = f'{summary["task"]}: {summary["eval_split"]} metrics, {over_seeds(summary)}.'
  return caption + '\n\n' + markdown_rows(header, rows)


def markdown(summary: dict[str, Any]) -> str:
  """The task's table for the sweep (its reporting's ``ablation_table``), or the generic one."""
  table = reporting_of(task_class(summary['task'])).ablation_table(summary) or generic_table(summary)
  return f'# Ablation over {" x ".join(summary["axes"])}\n\n' + table + '\n'


def csv_text(summary: dict[str, Any]) -> str:
  axes, metrics = list(summary['axes']), metric_names(summary)
  output = io.StringIO()
  writer = csv.writer(output, lineterminator='\n')
  writer.writerow(['name', 'workdir'] + axes + ['seed', 'step'] + metrics)
  for run in summary['runs']:
    writer.writerow(
      [run['name'], run['workdir']]
      + [run['overrides'][path] for path in axes]
      + [run['overrides']['seed'], run['metrics'].get('step')]
      + [run['metrics'].get(name, '') for name in metrics]
    )
  return output.getvalue()


def write_results(directory: storage.Path, summary: dict[str, Any]) -> str:
  """Writes ``results.json``, ``results.csv`` and ``results.md`` into ``directory``; returns the markdown."""
  directory.mkdir(parents=True, exist_ok=True)
  table = markdown(summary)
  (directory / RESULTS_JSON).write_text(json.dumps(summary, indent=2) + '\n')
  (directory / RESULTS_CSV).write_text(csv_text(summary))
  (directory / RESULTS_MD).write_text(table)
  return table


def read_results(directory: storage.Path) -> dict[str, Any]:
  path = directory / RESULTS_JSON
  if not path.exists():
    raise WorkdirError(f'{path} not found: {directory} is not a workdir written by ablate.py.')
  return json.loads(path.read_text())
