"""The reporting protocol: what ``ablate.py``, ``ablation.tables``, ``ablation.plots`` and the
workdir's ``model.json`` ask of a family besides the training contract (``trainer.task.Task``).

It is optional and held by composition: a task class's ``reporting`` is an instance of a
``Reporting`` subclass, or ``None``, which reports nothing of the family's own (the generic table,
no pictures, no percentages, no model facts): ``reporting_of`` gives the defaults then. A family
overrides what its papers printed and drew.
"""

import pathlib
from typing import Any

from flax import nnx


class Reporting:
  """Tables and pictures of a family's runs; each method is optional, and none keeps state, so one
  instance serves every task of the family (tables are made before any task is built)."""

  #: the evaluation metrics that are fractions, shown in % by tables and pictures
  percent_metrics: tuple[str, ...] = ()

  def ablation_table(self, summary: dict[str, Any]) -> str | None:
    """Markdown for a sweep whose axes this family knows (the table a paper printed), else ``None``.

    ``summary`` is what ``ablation.sweep.run_sweep`` returns (``ablation.tables`` describes
    it and has helpers for cells); ``None`` gives the generic table, one row per combination.
    """
    del summary
    return None

  def draw_pictures(
    self, task, model: nnx.Module, out_dir: pathlib.Path, name: str, title: str
  ) -> list[pathlib.Path]:
    """Pictures of one trained model of ``task`` (attention maps, position similarities) as PNGs in
    ``out_dir``.

    Called after ``task.prepare`` on a restored checkpoint; ``name`` (the run's) ends every file
    name, ``title`` heads every picture. Returns the paths written; none by default.
    """
    del task, model, out_dir, name, title
    return []

  def model_facts(self, task) -> dict[str, Any]:
    """What reports need to know of ``task``'s model that costs work to find (FLOPs per example, say),
    as JSON values. The trainer saves it once, in the workdir's ``model.json``, when a run starts, so
    tables read it instead of building the task and its data again."""
    del task
    return {}


def reporting_of(task) -> Reporting:
  """The reporting of a task or task class: its own, or the defaults when it has none."""
  return getattr(task, 'reporting', None) or Reporting()
