"""The ViT's ablation table (``ImageClassification.ablation_table``): the ViT paper's Table 8.

For a sweep over ``model.posemb`` (and ``model.posemb_injection``): rows are encodings, columns
injections, cells the accuracy in %, mean ± std over seeds, N/A where the combination does not
exist. Any other sweep gets the generic table.
"""

from typing import Any

from ablation import tables

POSEMB, INJECTION = 'model.posemb', 'model.posemb_injection'


def table(summary: dict[str, Any]) -> str | None:
  axes = set(summary['axes'])
  if POSEMB not in axes or not axes <= {POSEMB, INJECTION}:
    return None
  groups, num_seeds = tables.group_runs(summary), len(summary['seeds'])
  injections = summary['axes'].get(INJECTION)
  header = [POSEMB] + (list(injections) if injections else [f'{summary["eval_split"]} accuracy (%)'])
  rows = []
  for posemb in summary['axes'][POSEMB]:
    row = [posemb]
    for injection in injections or [None]:
      named = {POSEMB: posemb, INJECTION: injection}
      values = tuple(named[path] for path in summary['axes'])
      if tables.is_not_applicable(summary, values):
        row.append('N/A')
      else:
        row.append(
          tables.cell(tables.metric_values(groups.get(values, []), 'accuracy'), num_seeds, scale=100)
        )
    rows.append(row)
  caption = (
    f'{summary["task"]}: {summary["eval_split"]} accuracy (%), {tables.over_seeds(summary)}'
    + (f'; columns: {INJECTION}' if injections else '')
    + '.'
  )
  return caption + '\n\n' + tables.markdown_rows(header, rows)
