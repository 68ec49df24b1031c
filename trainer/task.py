"""The interface between the generic trainer and a model family.

A task owns its data, its model and its loss. The trainer owns everything else:
devices, the jit-compiled step, the optimizer, checkpoints and metrics. ``Task`` is the training
contract; what a family adds for tables and pictures is ``trainer.reporting.Reporting``.
"""

import abc
import dataclasses
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
from trainer.errors import ConfigError, InputError
from trainer.reporting import Reporting

Batch = dict[str, np.ndarray]


class NotApplicable(ConfigError):
  """A config whose options do not exist together (the N/A cells of a paper's table).

  A task raises it from its constructor; a sweep skips the combination instead of failing.
  """


@dataclasses.dataclass(frozen=True)
class PredictOptions:
  """What a user chooses about predictions (``predict.py``'s flags); a task ignores what is not its own."""

  top_k: int = 5  #: classifiers: the most probable classes shown
  class_names: list[str] | None = None  #: classifiers: from ``classes.json``; ``None``: indices
  beam_size: int | None = None  #: translators: ``None`` = the config's ``decode.beam_size``
  alpha: float | None = None  #: translators: ``None`` = the config's ``decode.alpha``
  batch_size: int = 64  #: most inputs run at once (batches are padded to a power of two up to it)


def prediction_rows(count: int, batch_size: int) -> int:
  """Rows a batch of ``count`` inputs is padded to: the next power of two, at most ``batch_size``,
  so that a few shapes are compiled whatever the number of inputs."""
  return min(1 << max(count - 1, 0).bit_length(), max(batch_size, 1))


class Task(Reporting, abc.ABC):
  """The training contract: what every family implements to train and evaluate.

  A new family's minimum is the abstract methods with ``train_metrics`` and ``eval_metrics``
  (``docs/adding_a_family.md`` shows one); everything else has a default. Tables and pictures
  are the reporting protocol (``trainer.reporting.Reporting``, optional); prediction on a user's
  inputs (``predict.py``) is a section of its own here, optional too. Subclasses validate
  ``config`` in ``__init__`` so bad input fails before compilation.
  """

  #: the family's config sections: name -> ``section -> complete ConfigDict`` (``validation.resolve_config``)
  config_sections = {}

  #: clu metric collections; the trainer feeds them the outputs of ``loss_and_outputs``
  #: (training) and ``eval_outputs`` (evaluation, with the batch's padding ``mask``).
  train_metrics: type[clu_metrics.Collection]
  eval_metrics: type[clu_metrics.Collection]
  #: config fields under ``data``/``model`` that say where things are, not what is learned: a
  #: workdir may be resumed with other values (``trainer.workdir.NOT_IDENTITY_FIELDS`` has the common ones)
  not_identity_fields: tuple[str, ...] = ()

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config

  @abc.abstractmethod
  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    """A freshly initialised model."""

  @classmethod
  def without_data(cls, config: ml_collections.ConfigDict, sizes: dict[str, Any]) -> 'Task':
    """The task with what its data would give taken from ``sizes``, reading no data: enough to
    build the model and the train step (``make_model``, ``loss_and_outputs``, ``batch_shapes``)
    to compile them for hardware that is not here (``benchmarks/compile_for.py``: ``num_classes``,
    ``channels``, ``vocab_size``; each task reads those it needs), and, given what ``data_sizes``
    returned, to restore a checkpoint and predict (``trainer.evaluation.restore_checkpoint``)."""
    del config, sizes
    raise NotImplementedError(f'{cls.__name__} cannot be built without its data.')

  def data_sizes(self) -> dict[str, Any] | None:
    """What the data gave the model (class count, input shape, normalisation statistics, ...) as JSON
    values that ``without_data`` accepts, or ``None`` (the default) when the task cannot be built
    without its data. The trainer records it in the workdir's ``model.json`` (after ``prepare``), so
    predictions, ``init_from`` a workdir and exports read no data."""
    return None

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
  ) -> tuple[jax.Array, jax.Array, dict[str, Any]]:
    """``(loss_sum, weight, outputs)``: the training loss *summed* over the batch, what it is a sum
    over (the number of examples, or of real target tokens), and the keyword outputs for
    ``train_metrics``.

    The trainer sums both over micro-batches, devices and processes and divides once, so the
    update is that of the whole batch's mean loss however the batch is split (the Flax WMT
    example's ``(loss_sum, weight_sum)``). The loss is the one trained (label-smoothed where the
    config asks). A task whose ``training_constants`` are not ``None`` also gets them, as
    ``constants=``, inside the compiled step.
    """

  def training_constants(self) -> Any:
    """Arrays the training loss reads besides the model and the batch, never trained and never saved
    (a distillation teacher's variables), as a tree; ``None`` (the default) for none.

    Called once per run, after ``check_training_data``. The trainer places them with the
    parameters' sharding rules and passes them into the compiled train step, as an argument (not a
    constant of the program), to ``loss_and_outputs(..., constants=)``; no gradient is taken of them.
    """
    return None

  def eval_outputs(self, model: nnx.Module, batch: Batch) -> dict[str, Any]:
    """Outputs for ``eval_metrics`` on one evaluation batch (padding rows masked).

    Every family's evaluation ``loss`` is the unsmoothed negative log-likelihood per target (per
    example for a classifier, per target token for a translator), whatever the training loss
    is. This default reuses ``loss_and_outputs``'s outputs, which is right only for a task that
    trains on that likelihood.
    """
    _, _, outputs = self.loss_and_outputs(model, batch, rngs=None, deterministic=True)
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

  # Prediction on a user's own inputs (``trainer.predictor``, ``predict.py``) ------------

  def input_names(self, argument: str) -> list[str]:
    """The inputs one command-line argument names (images: a folder's image files); itself by default."""
    return [argument]

  def read_input(self, item) -> Any:
    """One input (a path or text as given, or an array), read and checked as evaluation reads its
    examples; an ``InputError`` names the problem in one line. None by default: the task cannot predict."""
    del item
    raise InputError(f'{type(self).__name__} cannot predict on inputs of its own.')

  def predict(self, model: nnx.Module, inputs: list[Any], options: PredictOptions) -> list[dict[str, Any]]:
    """One prediction per input of ``read_input``, in order: JSON-able values, except keys starting
    with ``_`` (kept for ``explain``, never shown)."""
    raise NotImplementedError(f'{type(self).__name__} cannot predict.')

  def present(self, name: str, prediction: dict[str, Any]) -> str:
    """One prediction as plain text, one line (``name`` is the input as the user gave it)."""
    shown = {key: value for key, value in prediction.items() if not key.startswith('_')}
    return f'{name}: {shown}'

  def explain(
    self, model: nnx.Module, item: Any, prediction: dict[str, Any], path: pathlib.Path, title: str
  ) -> pathlib.Path:
    """A picture of the model's attention for one input (as ``read_input`` returned it), a PNG at ``path``."""
    del model, item, prediction, path, title
    raise NotImplementedError(f'{type(self).__name__} has no attention picture of an input.')

  def class_names(self) -> list[str] | None:
    """The name of each class index, saved as ``classes.json`` at training time; ``None`` (the
    default) for a task without classes."""
    return None

  @abc.abstractmethod
  def eval_split_names(self) -> tuple[str, ...]:
    """The split names ``eval_batches`` accepts (checked against ``eval_split`` before training)."""

  @abc.abstractmethod
  def eval_metric_names(self) -> tuple[str, ...]:
    """The scalar metric names an evaluation returns (``best_metric`` must be one of them)."""

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
  """Checks the trainer's fields, imports ``config.task`` (``'package.module:ClassName'``), completes
  ``config`` in place (``validation.resolve_config``), builds the task from it (which checks the rest),
  then checks ``eval_split`` and ``best_metric`` against it."""
  validation.check_trainer_fields(config)
  family = task_class(config.task)
  validation.resolve_config(config, family)
  task = family(config)
  validation.check_task_names(config, task)
  return task
