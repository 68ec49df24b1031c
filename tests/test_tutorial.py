"""docs/tutorial.ipynb: kept without outputs in git, and every cell runs (the slow tier executes it,
with its three trainings shortened: every cell still runs, on a model trained for fewer steps)."""

import pathlib
import re

import nbformat
import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / 'docs' / 'tutorial.ipynb'
CELL_TIMEOUT_S = 900
# The step counts of the notebook's training cells, and what the test runs instead.
SHORTER = {'total_steps': 30, 'log_every_steps': 10, 'eval_every_steps': 30, 'checkpoint_every_steps': 30}
STEP_FIELD = re.compile(rf'\b({"|".join(SHORTER)})=\d+')


def shortened(notebook):
  """The notebook with each training cell's step counts set to ``SHORTER``'s."""
  trainings = [cell for cell in notebook.cells if 'train_and_evaluate(config' in cell.source]
  assert len(trainings) == 3, 'the tutorial trains three models; update SHORTER for what it does now'
  for cell in trainings:
    cell.source, count = STEP_FIELD.subn(lambda match: f'{match[1]}={SHORTER[match[1]]}', cell.source)
    assert count == len(SHORTER), cell.source
  return notebook


def test_the_notebook_is_stored_without_outputs():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(notebook)
  executed = [
    index
    for index, cell in enumerate(notebook.cells)
    if cell.cell_type == 'code' and (cell.outputs or cell.execution_count is not None)
  ]
  assert not executed, (
    f'cells {executed} of {NOTEBOOK.name} hold outputs; clear them before committing '
    '(in Jupyter: Edit, Clear Outputs of All Cells)'
  )


@pytest.mark.slow
def test_every_cell_of_the_notebook_runs():
  from nbclient import NotebookClient

  notebook = shortened(nbformat.read(NOTEBOOK, as_version=4))
  client = NotebookClient(
    notebook,
    timeout=CELL_TIMEOUT_S,
    kernel_name='python3',
    resources={'metadata': {'path': str(NOTEBOOK.parent)}},
  )
  client.execute()
  errors = [
    output for cell in notebook.cells for output in cell.get('outputs', []) if output.output_type == 'error'
  ]
  assert not errors
  pictures = [
    output
    for cell in notebook.cells
    for output in cell.get('outputs', [])
    if 'image/png' in output.get('data', {})
  ]
  drawing_cells = [cell for cell in notebook.cells if cell.cell_type == 'code' and 'plt.' in cell.source]
  assert drawing_cells and len(pictures) >= len(drawing_cells)  # every drawing cell shows its picture
