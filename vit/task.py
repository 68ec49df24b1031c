"""Image classification as a trainer task: the ViT, its data, its loss and its metrics."""

import dataclasses
import os
import pathlib

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from clu import metrics as clu_metrics
from flax import nnx

from attention.options import with_defaults
from attention.positional import INJECTIONS, POSEMB_KINDS, combination_exists
from pipelines.image_sources import IMAGE_SUFFIXES
from trainer.devices import Devices
from trainer.errors import ConfigError, DataError, InputError
from trainer.losses import cross_entropy
from trainer.parameter_regexes import check_regexes_under_scan
from trainer.partitioning import check_batch_size
from trainer.predictor import batched, classify, compiled_features, compiled_logits, present_classes
from trainer.task import NotApplicable, Task
from trainer.validation import check_split_name
from vit import ablation_table, fewshot, pretrained
from vit import config_sections as sections
from vit.distillation import Distillation, check_distill
from vit.input_pipeline import ImagePreparation, load_image_data
from vit.model import default_model_config, make_vit


@flax.struct.dataclass
class ClassificationMetrics(clu_metrics.Collection):
  loss: clu_metrics.Average.from_output('loss')
  accuracy: clu_metrics.Accuracy


@flax.struct.dataclass
class DistillationMetrics(clu_metrics.Collection):
  """Training with a teacher: ``loss`` is the loss trained, ``distill_loss`` its distillation term."""

  loss: clu_metrics.Average.from_output('loss')
  accuracy: clu_metrics.Accuracy
  distill_loss: clu_metrics.Average.from_output('distill_loss')


def default_fewshot_config() -> ml_collections.ConfigDict:
  """``shots`` (k per class; () = off), ``seeds`` (draws averaged), ``held_out_per_class`` (training
  examples that choose the regulariser), ``train_examples`` (the size of the pool the draws come
  from: a seeded random subset of the train split, ``vit.fewshot.pool_ids``; None = all of it)."""
  return ml_collections.ConfigDict(dict(shots=(), seeds=3, held_out_per_class=10, train_examples=5000))


@dataclasses.dataclass(frozen=True)
class ImageShapes:
  """What the model needs to know of a data set, when there is none (``Task.without_data``), and how
  an image is prepared for it (``None``: not known, so the task cannot predict)."""

  num_classes: int
  image_shape: tuple[int, int, int]
  preparation: ImagePreparation | None = None

  @property
  def class_names(self) -> list[str]:
    return [str(index) for index in range(self.num_classes)]


class ImageClassification(Task):
  """Config: ``data`` (see ``vit.input_pipeline``), ``model`` (see ``vit.model``), ``label_smoothing``;
  optional sections ``init_from`` (see ``vit.pretrained``), ``fewshot`` (few-shot linear
  accuracy at every evaluation, see ``default_fewshot_config``) and ``distill`` (a teacher, see
  ``vit.distillation``).

  The training loss is the cross-entropy per image, label-smoothed and mixed as configured,
  summed with the image count as its weight (the trainer takes the whole batch's mean); the
  training ``loss`` metric is that loss. The evaluation ``loss`` is the unsmoothed negative
  log-likelihood per image, as in every family.
  """

  train_metrics = ClassificationMetrics
  config_sections = sections.SECTIONS
  eval_metrics = ClassificationMetrics
  percent_metrics = ('accuracy',)

  def __init__(self, config: ml_collections.ConfigDict, shapes: ImageShapes | None = None):
    super().__init__(config)
    self.label_smoothing = config.get('label_smoothing', 0.0)
    if not 0.0 <= self.label_smoothing < 1.0:
      raise ConfigError(f'label_smoothing must be in [0, 1), got {self.label_smoothing}.')
    if shapes is None:  # built from recorded sizes: a workdir, whose config was completed when it trained
      pretrained.complete_model_config(config.model, config.get('init_from'))
    try:
      model = with_defaults(config.model, default_model_config())
    except ValueError as error:
      raise ConfigError(f'model: {error}') from None
    posemb, injection = model.posemb, model.posemb_injection
    if posemb in POSEMB_KINDS and injection in INJECTIONS and not combination_exists(posemb, injection):
      raise NotApplicable(
        f"model.posemb {posemb!r} has no {injection!r} injection; only 'stem' exists for it."
      )
    if model.scan_layers and config.get('optimizer', {}).get('layer_decay', 1.0) != 1.0:
      raise ConfigError(
        'config.optimizer.layer_decay needs one parameter per layer: set model.scan_layers=False '
        '(a scanned encoder stacks its layers into one array).'
      )
    self.init_from = config.get('init_from')
    pretrained.check_init_from(self.init_from)
    distill = check_distill(config.get('distill'))
    if model.distill_token and (distill is None or distill.alpha == 0):
      raise NotApplicable(
        'model.distill_token needs a teacher to learn from: set config.distill.teacher and an alpha > 0 '
        '(vit.distillation).'
      )
    self.fewshot = config.get('fewshot')
    if self.fewshot is not None and any(k < 1 for k in self.fewshot.shots):
      raise ConfigError(f'config.fewshot.shots is {self.fewshot.shots}; each must be >= 1.')
    self._initial = None
    repeats = config.get('data', {}).get('augment', {}).get('repeats', 1)
    if isinstance(repeats, int) and repeats > 1 and config.batch_size % repeats:
      raise ConfigError(
        f'batch_size ({config.batch_size}) must be divisible by data.augment.repeats ({repeats}).'
      )
    self.data = load_image_data(config.data) if shapes is None else shapes
    self.preparation = self.data.preparation
    self.distillation = None
    if distill is not None:
      self.distillation = Distillation(
        distill, num_classes=self.data.num_classes, image_shape=self.data.image_shape, dtype=model.dtype
      )
      self.train_metrics = DistillationMetrics
    # Build the model abstractly now, so a bad model option fails before any real work.
    try:
      nnx.eval_shape(lambda: self.make_model(nnx.Rngs(0)))
    except ValueError as error:
      raise ConfigError(f'model: {error}') from error
    if model.scan_layers:
      check_regexes_under_scan(
        config.get('optimizer'),
        lambda scan: make_vit(
          {**model.to_dict(), 'scan_layers': scan},
          num_classes=self.data.num_classes,
          image_shape=self.data.image_shape,
          rngs=nnx.Rngs(0),
        ),
      )

  @classmethod
  def without_data(cls, config, sizes):
    """``sizes['num_classes']`` and ``sizes['image_shape']`` ``[H, W, C]`` (or ``sizes['channels']``
    with ``config.data.image_size``), and the normalisation ``sizes['mean']`` and ``sizes['std']`` (per
    channel; else the config's ``data.mean`` and ``data.std``, where set): what ``data_sizes`` records."""
    if sizes.get('image_shape'):
      image_shape = tuple(int(size) for size in sizes['image_shape'])
    else:
      image_size = config.data.get('image_size')
      if not image_size or len(image_size) != 2:
        raise ConfigError('data.image_size must be (height, width) to build the task without its data.')
      image_shape = (*image_size, sizes['channels'])
    mean, std = sizes.get('mean', config.data.get('mean')), sizes.get('std', config.data.get('std'))
    preparation = None
    if mean is not None and std is not None:
      mean, std = (
        tuple(float(v) for v in np.broadcast_to(values, image_shape[-1:])) for values in (mean, std)
      )
      preparation = ImagePreparation(image_shape, mean, std)
    return cls(config, ImageShapes(int(sizes['num_classes']), image_shape, preparation))

  def data_sizes(self):
    return {
      'num_classes': self.data.num_classes,
      'image_shape': list(self.data.image_shape),
      'mean': list(self.preparation.mean),
      'std': list(self.preparation.std),
    }

  def batch_shapes(self, batch_size):
    shapes = {
      'image': jax.ShapeDtypeStruct((batch_size, *self.data.image_shape), jnp.float32),
      'label': jax.ShapeDtypeStruct((batch_size,), jnp.int32),
    }
    augment = self.config.data.get('augment', {})
    if augment.get('mixup_alpha', 0.0) > 0 or augment.get('cutmix_alpha', 0.0) > 0:
      shapes['mix_label'] = jax.ShapeDtypeStruct((batch_size,), jnp.int32)
      shapes['mix_weight'] = jax.ShapeDtypeStruct((batch_size,), jnp.float32)
    return shapes

  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    return make_vit(
      self.config.model, num_classes=self.data.num_classes, image_shape=self.data.image_shape, rngs=rngs
    )

  def check_training_data(self) -> None:
    """Reads ``init_from`` and loads it into a model once, and the teacher, so a bad file fails
    before training."""
    if self.distillation is not None:
      self.distillation.load()
    if self.init_from is not None and self.init_from.path:
      self._initial = pretrained.read_canonical(self.init_from)
      pretrained.load_into(self.make_model(nnx.Rngs(0)), self.init_from, self._initial)

  def training_constants(self):
    """The teacher's variables, when distilling (``vit.distillation``)."""
    return None if self.distillation is None else self.distillation.load().variables

  def load_initial(self, model) -> None:
    if self.init_from is None or not self.init_from.path:
      return
    if self._initial is None:
      self._initial = pretrained.read_canonical(self.init_from)
    print(pretrained.load_into(model, self.init_from, self._initial), flush=True)

  def extra_evaluation(self, model, split, output_dir, devices):
    """Few-shot linear accuracies of the pre-logits features, when ``fewshot.shots`` is set."""
    del output_dir
    if self.fewshot is None or not self.fewshot.shots:
      return {}
    return fewshot_evaluation(
      model,
      self.data,
      split,
      self.fewshot,
      devices=devices or Devices(),
      batch_size=self.config.eval_batch_size,
    )

  def num_train_examples(self) -> int:
    return self.data.num_train

  @classmethod
  def ablation_table(cls, summary):
    return ablation_table.table(summary)

  def draw_pictures(self, model, out_dir, name, title):
    from vit import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    return pictures.draw(model, self, out_dir, name, title)

  def class_names(self) -> list[str]:
    return list(self.data.class_names)

  # Prediction ---------------------------------------------------------------------

  def input_names(self, argument):
    """A folder names its image files (all levels down, in sorted order); anything else itself."""
    if not os.path.isdir(argument):
      return [argument]
    found = sorted(
      os.path.join(folder, name)
      for folder, _, names in os.walk(argument)
      for name in names
      if name.lower().endswith(IMAGE_SUFFIXES)
    )
    return found or [argument]

  def read_input(self, item):
    """An image file (PNG or JPEG, any size and channels) or uint8 array, as the data set holds its
    images (``ImagePreparation.read_image``): uint8 ``[H, W, C]`` at the model's size."""
    what = 'this workdir classifies images (PNG or JPEG files, folders of them, or uint8 arrays)'
    if self.preparation is None:
      raise InputError('this task was built without its data and its normalisation: it cannot predict.')
    if not isinstance(item, np.ndarray):
      if not os.path.exists(item):
        raise InputError(f'{item}: no such file; {what}.')
      if os.path.isdir(item):
        raise InputError(f'{item}: a folder without .png, .jpg or .jpeg images; {what}.')
    try:
      return self.preparation.read_image(item)
    except DataError as error:
      raise InputError(f'{error}; {what}.') from None

  def predict(self, model, inputs, options):
    """The ``options.top_k`` most probable classes of each image: ``{'classes': [{index, name,
    probability}, ...]}``, the first being the argmax of the logits that evaluation scores."""
    return classify(model, inputs, options, self.data.image_shape, self.preparation.prepare_images)

  def features(self, model, inputs, options):
    """The pooled pre-logits embedding (``intermediates['pre_logits']``) of each image: float32 ``[n, D]``."""
    return batched(
      compiled_features(model),
      inputs,
      options.batch_size,
      self.data.image_shape,
      self.preparation.prepare_images,
    )

  def logits(self, model, inputs, options):
    return batched(
      compiled_logits(model),
      inputs,
      options.batch_size,
      self.data.image_shape,
      self.preparation.prepare_images,
    )

  def present(self, name, prediction):
    return present_classes(name, prediction)

  def explain(self, model, item, prediction, path: pathlib.Path, title):
    from vit import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    best = prediction['classes'][0]
    caption = f'predicted {best["name"]} ({100 * best["probability"]:.1f}%)'
    image = self.preparation.prepare_images(item[None])
    return pictures.plot_attention_maps(model, image, caption, title, path)

  def eval_split_names(self) -> tuple[str, ...]:
    return tuple(self.data.split_names)

  def eval_metric_names(self) -> tuple[str, ...]:
    return tuple(self.eval_metrics.__annotations__)

  def train_batches(self, *, batch_size, seed, start_step, process_index, process_count):
    return self.data.train_batches(
      batch_size=batch_size,
      seed=seed,
      start_step=start_step,
      process_index=process_index,
      process_count=process_count,
    )

  def eval_batches(self, split, *, batch_size, process_index, process_count):
    check_split_name(split, 'split')
    return self.data.eval_batches(
      split, batch_size=batch_size, process_index=process_index, process_count=process_count
    )

  def loss_and_outputs(self, model, batch, *, rngs, deterministic, constants=None):
    """With a teacher, ``constants`` are its variables (``training_constants``)."""
    logits, intermediates = model(batch['image'], deterministic=deterministic, rngs=rngs)
    class_logits = intermediates.get('class_logits', logits)
    losses = cross_entropy(class_logits, batch['label'], self.label_smoothing)
    if 'mix_label' in batch:
      mixed = cross_entropy(class_logits, batch['mix_label'], self.label_smoothing)
      losses = batch['mix_weight'] * losses + (1.0 - batch['mix_weight']) * mixed
    outputs = {'logits': logits, 'labels': batch['label']}
    if self.distillation is not None:
      if constants is None:
        raise ConfigError(
          'config.distill: the teacher was not passed into the train step (Task.training_constants).'
        )
      teacher_logits = self.distillation.load().logits(
        constants, batch['image'], self.preparation.mean, self.preparation.std
      )
      distill_losses = self.distillation.losses(intermediates.get('distill_logits', logits), teacher_logits)
      alpha = self.distillation.config.alpha
      losses = (1.0 - alpha) * losses + alpha * distill_losses
      outputs['distill_loss'] = distill_losses
    outputs['loss'] = losses
    return jnp.sum(losses), losses.shape[0], outputs

  def eval_outputs(self, model, batch):
    logits, _ = model(batch['image'])
    return {
      'loss': cross_entropy(logits, batch['label']),
      'logits': logits,
      'labels': batch['label'],
      'mask': batch['mask'],
    }


def fewshot_evaluation(
  model, data, split: str, fewshot_config: ml_collections.ConfigDict, *, devices: Devices, batch_size: int
) -> dict[str, float]:
  """Few-shot linear accuracies on ``split`` of ``data`` with draws from its training split.

  Every process reads its rows of global batches of ``batch_size`` and gets the same accuracies.
  """
  check_batch_size(batch_size, devices.mesh, 'eval_batch_size')

  def batches(name, example_ids=None):
    return data.eval_batches(
      name,
      batch_size=batch_size,
      process_index=devices.process_index,
      process_count=devices.process_count,
      example_ids=example_ids,
    )

  pool = fewshot.pool_ids(data.num_examples('train'), fewshot_config.train_examples)
  train = fewshot.extract_features(model, batches('train', pool), devices)
  test = fewshot.extract_features(model, batches(split), devices)
  return fewshot.fewshot_results(
    train,
    test,
    tuple(fewshot_config.shots),
    seeds=fewshot_config.seeds,
    held_out_per_class=fewshot_config.held_out_per_class,
  )
