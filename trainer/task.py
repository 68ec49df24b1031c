"""The interface between the generic trainer and a model family: the training contract.

A task owns its data, its model and its loss. The trainer owns everything else:
devices, the jit-compiled step, the optimizer, checkpoints and metrics. ``Task`` is what every family
implements to train and evaluate; what the data gives the model (class count, input shape,
vocabulary sizes) is a small record of the family's own (``DataSizes``), and two protocols are
optional, held by composition: prediction on a user's inputs (``task.prediction``,
``trainer.prediction.Prediction``) and tables and pictures (``task.reporting``,
``trainer.observe.reporting.Reporting``).
"""

import abc
import importlib
import pathlib
from typing import Any, Callable, ClassVar, Iterator, Protocol

import jax
import ml_collections
import numpy as np
from clu import metrics as clu_metrics
from flax import nnx

from attention.positional import NoSuchCombination
from trainer import validation
from trainer.errors import ConfigError
from trainer.observe.reporting import Reporting
from trainer.parameter_regexes import check_scanned_layers
from trainer.partitioning import Devices
from trainer.prediction import Prediction

Batch = dict[str, np.ndarray]


class NotApplicable(ConfigError):
  """A config whose options do not exist together (the N/A cells of a paper's table).

  A task raises it from its constructor; a sweep skips the combination instead of failing.
  """


class DataSizes(Protocol):
  """What a family's data gives its model (class count, input shape, normalisation, vocabulary sizes),
  as a frozen record (``vit.input_pipeline.ImageShapes``, ``video.input_pipeline.ClipShapes``,
  ``seq2seq.task.VocabSizes``). The data makes one; so does the workdir's ``model.json``, which
  records ``to_json()``, so a task built from it reads no data."""

  def to_json(self) -> dict[str, Any]:
    """The record as JSON values (what ``model.json`` keeps under ``data_sizes``)."""

  @classmethod
  def from_json(cls, values: dict[str, Any], config: ml_collections.ConfigDict) -> 'DataSizes':
    """The record from ``to_json``'s values, or from fewer (``benchmarks/compile_for.py`` gives class
    count and channels, or a vocabulary size) completed from ``config``."""


def loss_and_accuracy(**more) -> type[clu_metrics.Collection]:
  """The metrics every family reports: the mean of the ``loss`` output and the accuracy of ``logits``
  against ``labels`` (``mask`` rows only), with a family's ``more`` (name -> clu metric) beside them."""
  return clu_metrics.Collection.create(
    loss=clu_metrics.Average.from_output('loss'), accuracy=clu_metrics.Accuracy, **more
  )


class Task(abc.ABC):
  """The training contract: what every family implements to train and evaluate.

  A new family's minimum is the abstract methods with ``train_metrics`` and ``eval_metrics``
  (``docs/adding_a_family.md`` shows one); everything else has a default. Subclasses validate
  ``config`` in ``__init__`` so bad input fails before compilation.
  """

  #: the family's config sections: name -> ``(section, config) -> complete ConfigDict``, called in this
  #: order with the section and the whole config (``validation.resolve_config``); a reader may read other
  #: sections, as the ViT's ``model`` reader takes the fields its ``init_from`` weights decide
  config_sections = {}

  #: clu metric collections; the trainer feeds them the outputs of ``loss_and_outputs``
  #: (training) and ``eval_outputs`` (evaluation, with the batch's padding ``mask``).
  train_metrics: type[clu_metrics.Collection]
  eval_metrics: type[clu_metrics.Collection]
  #: config fields under ``data``/``model`` that say where things are, not what is learned: a
  #: workdir may be resumed with other values (``trainer.io.workdir.NOT_IDENTITY_FIELDS`` has the common ones)
  not_identity_fields: tuple[str, ...] = ()
  #: the family's ``DataSizes`` record; ``None``: the task cannot be built without its data
  Sizes: ClassVar[type[DataSizes] | None] = None
  #: what the data gave the model (a ``Sizes``), once known: given to the constructor, or learned from
  #: the data by it (or by ``prepare``, where a tokenizer made there decides them). The trainer records
  #: ``sizes.to_json()`` in the workdir's ``model.json`` (after ``prepare``), so predictions,
  #: ``init_from`` a workdir and exports read no data.
  sizes: DataSizes | None = None
  #: prediction on a user's inputs (``predict.py``), or ``None``: this task cannot predict
  prediction: Prediction | None = None
  #: tables and pictures (``ablate.py``), or ``None``: the generic table and no pictures
  reporting: ClassVar[Reporting | None] = None

  def __init__(self, config: ml_collections.ConfigDict, sizes: DataSizes | None = None):
    """``sizes``: the family's ``Sizes`` record, for a task that reads no data until batches are asked
    for; ``None``: the data is read (and checked) here to learn them."""
    self.config = config
    self.sizes = sizes

  @classmethod
  def without_data(cls, config: ml_collections.ConfigDict, sizes: dict[str, Any]) -> 'Task':
    """The task built from the JSON values of its ``Sizes`` (what ``model.json`` records, or fewer that
    ``Sizes.from_json`` completes from ``config``), reading no data: enough to build the model and
    the train step (``make_model``, ``loss_and_outputs``, ``batch_shapes``), to compile them for
    hardware that is not here (``benchmarks/compile_for.py``) and to restore a checkpoint and predict
    (``trainer.evaluation.restore_checkpoint``)."""
    if cls.Sizes is None:
      raise ConfigError(f'{cls.__name__} cannot be built without its data: it has no Sizes record.')
    return cls(config, cls.Sizes.from_json(sizes, config))

  @abc.abstractmethod
  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    """A freshly initialised model."""

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
    ``eval_split_names``, ``eval_metric_names``) needs no workdir. A task that learns something
    from the data (a tokenizer) saves it here on the first run and loads it on later ones (and
    sets ``sizes``, where that decides them); nothing by default.
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

  @abc.abstractmethod
  def eval_split_names(self) -> tuple[str, ...]:
    """The split names ``eval_batches`` accepts (checked against ``eval_split`` before training)."""

  def eval_metric_names(self) -> tuple[str, ...]:
    """The scalar metric names an evaluation returns (``best_metric`` must be one of them): by default
    the fields of ``eval_metrics``; a task with ``extra_evaluation`` adds its names."""
    return tuple(self.eval_metrics.__annotations__)

  def check_training_data(self) -> None:
    """Reads what training will read, so a missing or damaged file fails before the workdir is
    touched. Tasks that read everything in ``__init__`` need nothing here."""
    return None

  def num_train_examples(self) -> int:
    """Training-set size, for durations given in epochs."""
    raise NotImplementedError(f'{type(self).__name__} does not know its training-set size; set total_steps.')

  def check_model(self, build: Callable[[ml_collections.ConfigDict], nnx.Module]) -> None:
    """Builds the model of ``config.model`` abstractly (``build(model_section)``, no arrays made), so a
    bad model option fails before any real work: options that exist but not together are
    ``NotApplicable`` (a sweep skips them), any other ``ValueError`` a ``ConfigError``; a model that
    scans its layers is built in both forms and the optimizer's regexes checked against them
    (``trainer.parameter_regexes.check_scanned_layers``)."""
    try:
      nnx.eval_shape(lambda: build(self.config.model))
    except NoSuchCombination as error:
      raise NotApplicable(f'model: {error}') from None
    except ValueError as error:
      raise ConfigError(f'model: {error}') from error
    check_scanned_layers(self.config, build)


class BatchesFromData:
  """The batch methods of a ``Task`` whose ``data`` serves them: ``train_batches``, ``eval_batches``
  (the split's name checked), ``num_train`` and ``split_names`` (``vit.input_pipeline.ImageData``,
  ``video.input_pipeline.VideoData``). Listed before ``Task`` among a task's bases."""

  data: Any

  def train_batches(self, *, batch_size, seed, start_step, process_index, process_count):
    return self.data.train_batches(
      batch_size=batch_size,
      seed=seed,
      start_step=start_step,
      process_index=process_index,
      process_count=process_count,
    )

  def eval_batches(self, split, *, batch_size, process_index, process_count):
    validation.check_split_name(split, 'split')
    return self.data.eval_batches(
      split, batch_size=batch_size, process_index=process_index, process_count=process_count
    )

  def num_train_examples(self) -> int:
    return self.data.num_train

  def eval_split_names(self) -> tuple[str, ...]:
    return tuple(self.data.split_names)


def task_class(spec: str) -> type[Task]:
  """The class ``config.task`` names (``'package.module:ClassName'``), imported but not built."""
  if not isinstance(spec, str) or spec.count(':') != 1:
    raise ConfigError(f"config.task is {spec!r}; it must look like 'package.module:ClassName'.")
  module_name, _, class_name = spec.partition(':')
  try:
    module = importlib.import_module(module_name)
  except ModuleNotFoundError as error:
    raise ConfigError(f'config.task {spec!r}: cannot import module {module_name!r} ({error}).') from None
  found = getattr(module, class_name, None)
  if not (isinstance(found, type) and issubclass(found, Task)):
    raise ConfigError(f'config.task {spec!r}: {module_name} has no Task subclass named {class_name!r}.')
  return found


def resolved_task_class(config: ml_collections.ConfigDict) -> type[Task]:
  """Imports ``config.task`` (``'package.module:ClassName'``), then checks the trainer's fields and
  completes ``config`` in place from the defaults (``validation.resolve_config``); returns the class."""
  family = task_class(config.get('task', ''))
  validation.resolve_config(config, family)
  return family


def load_task(config: ml_collections.ConfigDict) -> Task:
  """The task of ``config`` (``resolved_task_class``), built (which checks the rest of the config), with
  ``eval_split`` and ``best_metric`` then checked against it."""
  task = resolved_task_class(config)(config)
  validation.check_task_names(config, task)
  return task
