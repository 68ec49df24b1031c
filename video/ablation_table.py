"""The video family's ablation table (``VideoReporting.ablation_table``), shaped as ViViT's Table 2.

For a sweep over ``model.attention`` or ``model.temporal_posemb`` (or both): one row per
combination with the accuracy (and, for moving digits, the digit and direction parts) in %,
mean ± std over seeds, GFLOPs of one clip's forward pass from XLA's cost analysis of the
compiled model (``jax.jit(f).lower(...).compile().cost_analysis()``) and the training
throughput in clips/s ("train clips/s": the median of the logged steps/s times the batch size, of
the first seed's run). The logged rates count training steps only: compilation, evaluations and
checkpoint saves are left out (``trainer/loop.py``, ``_Progress``). Any other sweep gets the
generic table.
"""

from typing import Any

from ablation import tables
from trainer.io import storage

AXES = ('model.attention', 'model.temporal_posemb')
_PARTS = ('accuracy', 'digit_accuracy', 'direction_accuracy')


def table(summary: dict[str, Any]) -> str | None:
  axes = list(summary['axes'])
  if not axes or not set(axes) <= set(AXES):
    return None
  groups, num_seeds = tables.group_runs(summary), len(summary['seeds'])
  parts = [part for part in _PARTS if any(part in run['metrics'] for run in summary['runs'])]
  header = axes + [f'{part} (%)' for part in parts] + ['GFLOPs / clip', 'train clips/s']
  rows = []
  for values in tables.all_combinations(summary):
    runs = groups.get(values, [])
    if tables.is_not_applicable(summary, values):
      rows.append([*values] + ['N/A'] * (len(header) - len(values)))
      continue
    row = [*values] + [tables.cell(tables.metric_values(runs, part), num_seeds, scale=100) for part in parts]
    if runs:
      workdir = storage.as_path(runs[0]['workdir'])
      row += [f'{clip_gflops(workdir):.3f}', f'{train_throughput(workdir):.1f}']
    else:
      row += ['not run', 'not run']
    rows.append(row)
  caption = f'{summary["task"]}: {summary["eval_split"]} metrics, {tables.over_seeds(summary)}.'
  return caption + '\n\n' + tables.markdown_rows(header, rows)


def clip_gflops(workdir: storage.Path) -> float:
  """GFLOPs of one clip's forward pass, as the run saved them in its workdir (NaN if it did not)."""
  from trainer.io.workdir import load_model_facts  # pylint: disable=g-import-not-at-top

  return float(load_model_facts(workdir).get('gflops_per_clip', float('nan')))


def train_throughput(workdir: storage.Path) -> float:
  """Clips per second in training: the median logged steps/s (training steps on training time only,
  without compilation, evaluations or saves), times the batch."""
  from trainer.io.workdir import load_config  # pylint: disable=g-import-not-at-top

  examples_per_second = tables.train_examples_per_second(workdir, load_config(workdir).batch_size)
  return float('nan') if examples_per_second is None else examples_per_second
