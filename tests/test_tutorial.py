"""docs/tutorial.ipynb: kept without outputs in git, and every cell runs (the slow tier executes it)."""

import pathlib

import nbformat
import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / 'docs' / 'tutorial.ipynb'
CELL_TIMEOUT_S = 900


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

  notebook = nbformat.read(NOTEBOOK, as_version=4)
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
