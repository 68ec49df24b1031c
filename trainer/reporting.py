"""What a family may add for tables and pictures: the reporting half of the task seam.

``trainer.task.Task`` is the training contract, what every family implements to train and
evaluate. ``Reporting`` is what ``ablate.py``, ``ablation.tables`` and ``ablation.plots`` ask of a
task besides that; ``Task`` derives from it, so every task answers, and each default reports
nothing of the family's own (the generic table, no pictures, no percentages, no model facts). A
family overrides what its papers printed and drew.
"""

import pathlib
from typing import Any

from flax import nnx


class Reporting:
  """Tables and pictures of a family's runs; each method is optional."""

  #: the evaluation metrics that are fractions, shown in % by tables and pictures
  percent_metrics: tuple[str, ...] = ()

  @classmethod
  def ablation_table(cls, summary: dict[str, Any]) -> str | None:
    """Markdown for a sweep whose axes this family knows (the table a paper printed), else ``None``.

    ``summary`` is what ``ablation.sweep.run_sweep`` returns (``ablation.tables`` describes
    it and has helpers for cells); ``None`` gives the generic table, one row per combination.
    """
    del summary
    return None

  def draw_pictures(
    self, model: nnx.Module, out_dir: pathlib.Path, name: str, title: str
  ) -> list[pathlib.Path]:
    """Pictures of one trained model (attention maps, position similarities) as PNGs in ``out_dir``.

    Called after ``prepare`` on a restored checkpoint; ``name`` (the run's) ends every file
    name, ``title`` heads every picture. Returns the paths written; none by default.
    """
    del model, out_dir, name, title
    return []

  def model_facts(self) -> dict[str, Any]:
    """What reports need to know of the model that costs work to find (FLOPs per example, say), as
    JSON values. The trainer saves it once, in the workdir's ``model.json``, when a run starts, so
    tables read it instead of building the task and its data again."""
    return {}
