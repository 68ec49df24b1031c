"""The ViT's ablation table (``ImageReporting.ablation_table``): the ViT paper's Table 8.

For a sweep over ``model.posemb`` (and ``model.posemb_injection``): rows are encodings, columns
injections, cells the accuracy in %, mean ± std over seeds, N/A where the combination does not
exist. When the runs also measured few-shot linear accuracy (``config.fewshot.shots``), a second
table of the same shape gives the 5-shot accuracy (or the smallest k measured), the metric of
the paper's table. Any other sweep gets the generic table.
"""

from typing import Any

from ablation import tables

POSEMB, INJECTION = 'model.posemb', 'model.posemb_injection'


def _fewshot_shots(summary: dict[str, Any]) -> int | None:
  """5 if the runs measured 5-shot accuracy (``fewshot_5shot``), else the smallest k they measured."""
  shots = {
    int(name.removeprefix('fewshot_').removesuffix('shot'))
    for run in summary['runs']
    for name in run['metrics']
    if name.startswith('fewshot_') and name.endswith('shot')
  }
  if not shots:
    return None
  return 5 if 5 in shots else min(shots)


def _one_table(summary: dict[str, Any], metric: str, what: str) -> str:
  groups, num_seeds = tables.group_runs(summary), len(summary['seeds'])
  injections = summary['axes'].get(INJECTION)
  header = [POSEMB] + (list(injections) if injections else [f'{summary["eval_split"]} {what} (%)'])
  rows = []
  for posemb in summary['axes'][POSEMB]:
    row = [posemb]
    for injection in injections or [None]:
      named = {POSEMB: posemb, INJECTION: injection}
      values = tuple(named[path] for path in summary['axes'])
      if tables.is_not_applicable(summary, values):
        row.append('N/A')
      else:
        row.append(tables.cell(tables.metric_values(groups.get(values, []), metric), num_seeds, scale=100))
    rows.append(row)
  caption = (
    f'{summary["task"]}: {summary["eval_split"]} {what} (%), {tables.over_seeds(summary)}'
    + (f'; columns: {INJECTION}' if injections else '')
    + '.'
  )
  return caption + '\n\n' + tables.markdown_rows(header, rows)


def table(summary: dict[str, Any]) -> str | None:
  axes = set(summary['axes'])
  if POSEMB not in axes or not axes <= {POSEMB, INJECTION}:
    return None
  parts = [_one_table(summary, 'accuracy', 'accuracy')]
  shots = _fewshot_shots(summary)
  if shots is not None:
    parts.append(_one_table(summary, f'fewshot_{shots}shot', f'{shots}-shot linear accuracy'))
  return '\n\n'.join(parts)
