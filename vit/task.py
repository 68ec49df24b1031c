"""Image classification as a trainer task: the ViT, its data, its loss and its metrics."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
from clu import metrics as clu_metrics
from flax import nnx

from trainer.errors import ConfigError
from trainer.losses import cross_entropy
from trainer.observe.reporting import Reporting
from trainer.partitioning import Devices, check_batch_size
from trainer.task import BatchesFromData, NotApplicable, Task, loss_and_accuracy
from vit import ablation_table, fewshot, pretrained
from vit import config_sections as sections
from vit.distillation import Distillation, check_distill
from vit.image_augmentation import check_mixing_batch
from vit.input_pipeline import ImageData, ImageShapes, load_image_data
from vit.model import make_vit, model_section
from vit.prediction import ImagePrediction

ClassificationMetrics = loss_and_accuracy()
# Training with a teacher: ``loss`` is the loss trained, ``distill_loss`` its distillation term.
DistillationMetrics = loss_and_accuracy(distill_loss=clu_metrics.Average.from_output('distill_loss'))


def default_fewshot_config() -> ml_collections.ConfigDict:
  """``shots`` (k per class; () = off), ``seeds`` (draws averaged), ``held_out_per_class`` (training
  examples that choose the regulariser), ``train_examples`` (the size of the pool the draws come
  from: a seeded random subset of the train split, ``vit.fewshot.pool_ids``; None = all of it)."""
  return ml_collections.ConfigDict(dict(shots=(), seeds=3, held_out_per_class=10, train_examples=5000))


class ImageReporting(Reporting):
  """The ViT's tables (the ViT paper's positional-embedding table) and pictures (attention maps,
  position similarities)."""

  percent_metrics = ('accuracy',)

  def ablation_table(self, summary):
    return ablation_table.table(summary)

  def draw_pictures(self, task, model, out_dir, name, title):
    from vit import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    return pictures.draw(model, task, out_dir, name, title)


class ImageClassification(BatchesFromData, Task):
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
  Sizes = ImageShapes
  reporting = ImageReporting()

  def __init__(self, config: ml_collections.ConfigDict, shapes: ImageShapes | None = None):
    super().__init__(config, shapes)
    # ``vit.weights.predictor`` builds this task from a partial config: the defaults are read here
    self.label_smoothing = config.get('label_smoothing', 0.0)
    model = model_section(config.model)
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
    repeats = config.data.get('augment', {}).get('repeats', 1)
    if repeats > 1 and config.batch_size % repeats:
      raise ConfigError(
        f'batch_size ({config.batch_size}) must be divisible by data.augment.repeats ({repeats}).'
      )
    if 'batch_size' in config:  # a training config
      check_mixing_batch(config.batch_size, config.get('data', {}).get('augment', {}))
    if shapes is None:  # learned from the data, read (and checked) now
      self.sizes, class_names = self.data.shapes, self.data.class_names
    else:
      class_names = shapes.class_names
    self.preparation = self.sizes.preparation
    self.prediction = ImagePrediction(self.sizes, class_names)
    self.distillation = None
    if distill is not None:
      self.distillation = Distillation(
        distill, num_classes=self.sizes.num_classes, image_shape=self.sizes.image_shape, dtype=model.dtype
      )
      self.train_metrics = DistillationMetrics
    self.check_model(lambda section: self._vit(section, nnx.Rngs(0)))

  @functools.cached_property
  def data(self) -> ImageData:
    """The data set, read when first needed (at once when no sizes were given)."""
    return load_image_data(self.config.data)

  def batch_shapes(self, batch_size):
    shapes = {
      'image': jax.ShapeDtypeStruct((batch_size, *self.sizes.image_shape), jnp.float32),
      'label': jax.ShapeDtypeStruct((batch_size,), jnp.int32),
    }
    augment = self.config.data.augment
    if augment.mixup_alpha > 0 or augment.cutmix_alpha > 0:
      shapes['mix_label'] = jax.ShapeDtypeStruct((batch_size,), jnp.int32)
      shapes['mix_weight'] = jax.ShapeDtypeStruct((batch_size,), jnp.float32)
    return shapes

  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    return self._vit(self.config.model, rngs)

  def _vit(self, section, rngs: nnx.Rngs) -> nnx.Module:
    """The model of a ``model`` section (``check_model`` builds both forms of a scanned one)."""
    return make_vit(
      section, num_classes=self.sizes.num_classes, image_shape=self.sizes.image_shape, rngs=rngs
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
