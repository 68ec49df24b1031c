"""The translator's ablation tables (``TranslationReporting.ablation_table``), shaped like the papers'.

For a sweep over ``model.posemb`` (Vaswani et al. Table 3, row (E)) or over
``model.attention_score`` (the RNN's scores, as in Luong et al.'s tables): rows are the swept
values, columns the perplexity, BLEU and exact match on the evaluation split, mean ± std over
seeds; with a ``data.split`` axis too (SCAN's simple and length splits), one group of those
columns per split. Any other sweep gets the generic table.
"""

from typing import Any

from ablation import tables

ROW_AXES = ('model.posemb', 'model.attention_score')
DATA_SPLIT = 'data.split'
# metric, column label, scale, digits
COLUMNS = (('perplexity', 'PPL', 1, 2), ('bleu', 'BLEU', 1, 1), ('exact_match', 'exact match (%)', 100, 1))


def table(summary: dict[str, Any]) -> str | None:
  axes = set(summary['axes'])
  row_axis = next((axis for axis in ROW_AXES if axis in axes), None)
  if row_axis is None or not axes <= {row_axis, DATA_SPLIT}:
    return None
  groups, num_seeds, split = tables.group_runs(summary), len(summary['seeds']), summary['eval_split']
  present = {name for run in summary['runs'] for name in run['metrics']}
  columns = [column for column in COLUMNS if column[0] in present]
  data_splits = summary['axes'].get(DATA_SPLIT)
  header = [row_axis] + [
    f'{data_split + " " if data_splits else ""}{split} {label}'
    for data_split in data_splits or [None]
    for _, label, _, _ in columns
  ]
  rows = []
  for value in summary['axes'][row_axis]:
    row = [value]
    for data_split in data_splits or [None]:
      named = {row_axis: value, DATA_SPLIT: data_split}
      runs = groups.get(tuple(named[path] for path in summary['axes']), [])
      row += [
        tables.cell(tables.metric_values(runs, name), num_seeds, scale, digits)
        for name, _, scale, digits in columns
      ]
    rows.append(row)
  caption = (
    f'{summary["task"]}: {split} perplexity, BLEU and exact match'
    + (f' for each {DATA_SPLIT}' if data_splits else '')
    + f', {tables.over_seeds(summary)}.'
  )
  return caption + '\n\n' + tables.markdown_rows(header, rows)
