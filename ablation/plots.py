"""Pictures of a sweep, or of one training run, from its saved workdir alone (PNG, matplotlib's Agg).

  python -m ablation.plots --workdir runs/ablation      # a workdir written by ablate.py
  python -m ablation.plots --workdir runs/digits       # or by train.py

Into ``<workdir>/plots/``:
``ablation.png``            the sweep's ``best_metric`` per combination, mean ± std over seeds as
                            bars and error bars, each seed a dot (sweeps only): the first axis's
                            values along x, a second axis's as colours, more axes as combinations
``training_curves.png``     training loss and the evaluation's ``best_metric`` against the step,
                            for every run, from ``metrics.jsonl``
and for the first seed of each combination (or the one run), from its latest checkpoint, the
pictures its task draws (``Reporting.draw_pictures``: attention maps, position similarities, ...).
"""

import pathlib
from typing import Any

import matplotlib
from absl import app, flags
from matplotlib.figure import Figure

from ablation import tables
from ablation.sweep import sweep_split
from attention.drawing import save
from trainer.command_line.cli import quiet_library_logs, run_reporting_user_errors
from trainer.errors import WorkdirError
from trainer.evaluation import restore_checkpoint
from trainer.io import storage
from trainer.io import workdir as workdir_lib
from trainer.io.metrics_io import read_metrics
from trainer.observe import observe_config
from trainer.observe.reporting import reporting_of
from trainer.task import task_class

PLOTS_DIR = 'plots'


def _is_percent(task: str, metric: str) -> bool:
  return metric in reporting_of(task_class(task)).percent_metrics


def _metric_label(split: str, metric: str, percent: bool) -> str:
  return f'{split} {metric}' + (' (%)' if percent else '')


# The ablation and the training curves -----------------------------------------------------------


def _short(path: str) -> str:
  return path.rsplit('.', 1)[-1]


def plot_ablation(summary: dict[str, Any], path: pathlib.Path) -> pathlib.Path:
  """Bars (mean), error bars (std) and dots (seeds) of ``best_metric``; rows of the table along x."""
  metric = summary['best_metric']
  percent = _is_percent(summary['task'], metric)
  scale = 100.0 if percent else 1.0
  axes = list(summary['axes'])
  groups = tables.group_runs(summary)
  if len(axes) <= 2:
    positions = [(value,) for value in summary['axes'][axes[0]]]
    hues = [(value,) for value in summary['axes'][axes[1]]] if len(axes) == 2 else [()]
    labels = [str(value) for value in summary['axes'][axes[0]]]
  else:
    positions, hues = tables.all_combinations(summary), [()]
    labels = ['\n'.join(f'{_short(a)}={v}' for a, v in zip(axes, values)) for values in positions]
  width = 0.8 / len(hues)
  figure = Figure(figsize=(max(5.0, 1.2 * len(positions) * max(1, len(hues) / 2)), 4.2))
  ax = figure.subplots()
  colors = matplotlib.colormaps['tab10'].colors
  tops, labelled = [0.0], set()
  for h, hue in enumerate(hues):
    for x, position in enumerate(positions):
      values = position + hue
      center = x - 0.4 + width * (h + 0.5)
      if tables.is_not_applicable(summary, values):
        ax.text(center, 0, 'N/A', ha='center', va='bottom', fontsize=8, rotation=90 if len(hues) > 2 else 0)
        continue
      seeds = [value * scale for value in tables.metric_values(groups.get(values, []), metric)]
      if not seeds:
        continue
      mean, std = tables.mean_std(seeds)
      label = str(hue[0]) if hue and hue not in labelled else None
      labelled.add(hue)
      ax.bar(
        center,
        mean,
        width * 0.9,
        yerr=std if len(seeds) > 1 else None,
        capsize=3,
        color=colors[h % len(colors)],
        label=label,
      )
      ax.scatter([center] * len(seeds), seeds, s=9, color='black', zorder=3)
      ax.text(
        center,
        mean + std,
        f'{mean:.1f}' if scale > 1 else f'{mean:.3g}',
        ha='center',
        va='bottom',
        fontsize=8,
      )
      tops.append(mean + std)
  ax.set_xticks(range(len(positions)), labels)
  ax.set_ylim(0, max(tops) * 1.12 or 1.0)
  ax.set_xlabel(axes[0] if len(axes) <= 2 else 'combination')
  ax.set_ylabel(_metric_label(summary['eval_split'], metric, percent))
  ax.set_title(f'{summary["task"]}: {tables.over_seeds(summary)}', fontsize=10)
  if hues != [()]:
    ax.legend(
      title=_short(axes[1]), fontsize=8, title_fontsize=8, loc='upper left', bbox_to_anchor=(1.01, 1.0)
    )
  ax.grid(axis='y', alpha=0.3)
  return save(figure, path)


def _curve(records: list[dict[str, Any]], split: str, metric: str) -> tuple[list[int], list[float]]:
  """Steps and values of ``metric``; a step logged twice (a resumed run) keeps its last record."""
  by_step = {
    record['step']: record[metric] for record in records if record.get('split') == split and metric in record
  }
  steps = sorted(by_step)
  return steps, [by_step[step] for step in steps]


def plot_training_curves(
  runs: list[tuple[pathlib.Path, str]],
  metric: str,
  logged: str | None,
  split: str,
  path: pathlib.Path,
  percent: bool = False,
) -> pathlib.Path:
  return save(training_curves_figure(runs, metric, logged, split, percent), path)


def training_curves_figure(
  runs: list[tuple[pathlib.Path, str]], metric: str, logged: str | None, split: str, percent: bool = False
) -> Figure:
  """``runs``: (workdir, group); the runs of a group (its seeds) share a colour and a legend entry.
  ``logged`` is the name ``metrics.jsonl`` gives ``metric`` (``<split>_<metric>`` with ``eval_splits``);
  ``None`` (a sweep's ``results.json`` written before it kept the name) looks for either."""
  figure = Figure(figsize=(11, 4))
  loss_ax, metric_ax = figure.subplots(1, 2)
  colors = matplotlib.colormaps['tab10'].colors
  group_index: dict[str, int] = {}
  for workdir, group in runs:
    records = read_metrics(workdir)
    first = group not in group_index
    color = colors[group_index.setdefault(group, len(group_index)) % len(colors)]
    steps, losses = _curve(records, 'train', 'loss')
    loss_ax.plot(
      steps,
      losses,
      color=color,
      linewidth=1,
      alpha=0.8,
      marker='.' if len(steps) < 30 else None,
      label=group if first else None,
    )
    name = logged or (metric if any(metric in record for record in records) else f'{split}_{metric}')
    steps, values = _curve(records, 'eval', name)
    scaled = [value * (100.0 if percent else 1.0) for value in values]
    metric_ax.plot(
      steps, scaled, color=color, linewidth=1, marker='.', alpha=0.8, label=group if first else None
    )
  loss_ax.set(xlabel='step', ylabel='training loss', title='training loss')
  metric_ax.set(xlabel='step', ylabel=_metric_label(split, metric, percent), title=f'evaluation ({split})')
  for ax in (loss_ax, metric_ax):
    ax.grid(alpha=0.3)
  metric_ax.legend(fontsize=8)
  return figure


def run_curves_figure(workdir: pathlib.Path, name: str) -> Figure:
  """The training curves of one training workdir (``config.json``), its best metric on the right."""
  config = workdir_lib.load_config(workdir)
  return training_curves_figure(
    [(workdir, name)],
    config.best_metric,
    observe_config.checkpoint_metric(config),
    sweep_split(config),
    _is_percent(config.task, config.best_metric),
  )


# Pictures of one trained model -------------------------------------------------------------------


def plot_run_pictures(run_dir: pathlib.Path, out_dir: pathlib.Path, name: str) -> list[pathlib.Path]:
  """The pictures the run's task draws of its model (its reporting's ``draw_pictures``), restored from
  the latest checkpoint."""
  task, parts, params, step = restore_checkpoint(run_dir)
  return reporting_of(task).draw_pictures(task, parts.merge(params), out_dir, name, f'{name}, step {step}')


def plot_workdir(workdir: str | pathlib.Path) -> list[pathlib.Path]:
  """Every picture of an ablation workdir (``results.json``) or a training workdir (``config.json``)."""
  workdir = storage.as_path(workdir)
  out_dir = workdir / PLOTS_DIR
  if (workdir / tables.RESULTS_JSON).exists():
    summary = tables.read_results(workdir)
    axes = list(summary['axes'])
    runs = [
      (workdir / run['name'], ','.join(f'{_short(path)}={run["overrides"][path]}' for path in axes))
      for run in summary['runs']
    ]
    paths = [
      plot_ablation(summary, out_dir / 'ablation.png'),
      plot_training_curves(
        runs,
        summary['best_metric'],
        summary.get('logged_metric'),
        summary['eval_split'],
        out_dir / 'training_curves.png',
        _is_percent(summary['task'], summary['best_metric']),
      ),
    ]
    for group in tables.group_runs(summary).values():
      paths += plot_run_pictures(workdir / group[0]['name'], out_dir, group[0]['name'])
    return paths
  if (workdir / workdir_lib.CONFIG_FILE).exists():
    paths = [save(run_curves_figure(workdir, workdir.name), out_dir / 'training_curves.png')]
    return paths + plot_run_pictures(workdir, out_dir, workdir.name)
  raise WorkdirError(
    f'{workdir} has neither {tables.RESULTS_JSON} (written by ablate.py) nor '
    f'{workdir_lib.CONFIG_FILE} (written by train.py).'
  )


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  quiet_library_logs()
  for path in run_reporting_user_errors(plot_workdir, flags.FLAGS.workdir):
    print(path)


if __name__ == '__main__':
  flags.DEFINE_string('workdir', None, 'A workdir written by ablate.py or train.py.')
  flags.mark_flag_as_required('workdir')
  app.run(main)
