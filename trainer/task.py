"""The interface between the generic trainer and a model family.

A task owns its data, its model and its loss. The trainer owns everything else:
devices, the jit-compiled step, the optimizer, checkpoints and metrics.
"""

import abc
import importlib
import pathlib
from typing import Any, Iterator

import jax
import ml_collections
import numpy as np
from clu import metrics as clu_metrics
from flax import nnx

from trainer import validation
from trainer.devices import Devices
from trainer.errors import ConfigError

Batch = dict[str, np.ndarray]


class NotApplicable(ConfigError):
  """A config whose options do not exist together (the N/A cells of a paper's table).

  A task raises it from its constructor; a sweep skips the combination instead of failing.
  """


class Task(abc.ABC):
  """Subclasses validate ``config`` in ``__init__`` so bad input fails before compilation."""

  #: clu metric collections; the trainer feeds them the outputs of ``loss_and_outputs``
  #: (training) and ``eval_outputs`` (evaluation, with the batch's padding ``mask``).
  train_metrics: type[clu_metrics.Collection]
  eval_metrics: type[clu_metrics.Collection]
  #: the evaluation metrics that are fractions, shown in % by tables and pictures
  percent_metrics: tuple[str, ...] = ()

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config

  @abc.abstractmethod
  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    """A freshly initialised model."""

  @classmethod
  def without_data(cls, config: ml_collections.ConfigDict, sizes: dict[str, int]) -> 'Task':
    """The task with the sizes its data would give taken from ``sizes`` (``num_classes``,
    ``channels``, ``vocab_size``: each task reads those it needs), reading no file: enough to
    build the model and the train step (``make_model``, ``loss_and_outputs``, ``batch_shapes``)
    to compile them for hardware that is not here (``benchmarks/compile_for.py``)."""
    del config, sizes
    raise NotImplementedError(f'{cls.__name__} cannot be built without its data.')

  def batch_shapes(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """Shape and dtype of each array of a global training batch (the widest, where widths vary)."""
    del batch_size
    raise NotImplementedError(f'{type(self).__name__} does not describe its batches.')

  @abc.abstractmethod
  def train_batches(
    self, *, batch_size: int, seed: int, start_step: int, process_index: int, process_count: int
  ) -> Iterator[Batch]:
    """This process's slice of global batches ``start_step, start_step + 1, ...``."""

  @abc.abstractmethod
  def eval_batches(
    self, split: str, *, batch_size: int, process_index: int, process_count: int
  ) -> Iterator[Batch]:
    """One pass over ``split``; every batch has a float ``mask`` (0 for padding rows)."""

  @abc.abstractmethod
  def loss_and_outputs(
    self, model: nnx.Module, batch: Batch, *, rngs: nnx.Rngs | None, deterministic: bool
  ) -> tuple[jax.Array, dict[str, Any]]:
    """The scalar training loss and the keyword outputs for the metric collections."""

  def eval_outputs(self, model: nnx.Module, batch: Batch) -> dict[str, Any]:
    """Outputs for ``eval_metrics`` on one evaluation batch (padding rows masked)."""
    _, outputs = self.loss_and_outputs(model, batch, rngs=None, deterministic=True)
    return outputs

  def load_initial(self, model: nnx.Module) -> None:
    """Overwrites a fresh model's parameters in place (pretrained weights); nothing by default.

    Training calls it once, on a run that starts from step 0 (never when resuming), after
    ``check_training_data``; a task reads and checks its source there, before the workdir is
    touched, so a bad file fails early.
    """
    del model

  def prepare(self, workdir: pathlib.Path) -> None:
    """Binds the task to its workdir; always called, once, before ``make_model`` or any batch.

    Every path that builds a model calls it: training (``trainer.loop.train_and_evaluate``)
    and restoring a checkpoint (``trainer.evaluation.restore_checkpoint``, which evaluation
    and pictures use). What comes before it (the constructor, ``num_train_examples``,
    ``eval_split_names``, ``eval_metric_names``, ``ablation_table``) needs no workdir. A task
    that learns something from the data (a tokenizer) saves it here on the first run and
    loads it on later ones; nothing by default.
    """
    del workdir

  def extra_evaluation(
    self, model: nnx.Module, split: str, output_dir: pathlib.Path | None, devices: Devices
  ) -> dict[str, float | str]:
    """Metrics that need more than one forward pass (decoding, BLEU); none by default.

    ``devices`` (the trainer's) shards this process's rows and gathers results from every
    process. String values are written as TensorBoard text (sample translations); files
    such as hypotheses may be written into ``output_dir``.
    """
    del model, split, output_dir, devices
    return {}

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

  def eval_split_names(self) -> tuple[str, ...]:
    """The split names ``eval_batches`` accepts (checked against ``eval_split`` before training)."""
    raise NotImplementedError

  def eval_metric_names(self) -> tuple[str, ...]:
    """The scalar metric names an evaluation returns (``best_metric`` must be one of them)."""
    raise NotImplementedError

  def check_training_data(self) -> None:
    """Reads what training will read, so a missing or damaged file fails before the workdir is
    touched. Tasks that read everything in ``__init__`` need nothing here."""
    return None

  def num_train_examples(self) -> int:
    """Training-set size, for durations given in epochs."""
    raise NotImplementedError(f'{type(self).__name__} does not know its training-set size; set total_steps.')


def task_class(spec: str) -> type[Task]:
  """The class ``config.task`` names (``'package.module:ClassName'``), imported but not built."""
  module_name, colon, class_name = spec.partition(':')
  if not colon:
    raise ConfigError(f"config.task must look like 'package.module:ClassName', got {spec!r}.")
  try:
    module = importlib.import_module(module_name)
  except ModuleNotFoundError as error:
    raise ConfigError(f'config.task {spec!r}: cannot import module {module_name!r} ({error}).') from None
  found = getattr(module, class_name, None)
  if not (isinstance(found, type) and issubclass(found, Task)):
    raise ConfigError(f'config.task {spec!r}: {module_name} has no Task subclass named {class_name!r}.')
  return found


def load_task(config: ml_collections.ConfigDict) -> Task:
  """Checks the trainer's fields, imports ``config.task`` (``'package.module:ClassName'``), builds it
  from ``config`` (which checks the rest), then checks ``eval_split`` and ``best_metric`` against it."""
  validation.check_trainer_fields(config)
  task = task_class(config.task)(config)
  validation.check_task_names(config, task)
  return task
