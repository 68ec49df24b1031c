"""Image classification as a trainer task: the ViT, its data, its loss and its metrics."""

import dataclasses

import flax
import jax
import jax.numpy as jnp
import ml_collections
from clu import metrics as clu_metrics
from flax import nnx

from attention.positional import INJECTIONS, POSEMB_KINDS, combination_exists
from trainer.errors import ConfigError
from trainer.losses import cross_entropy
from trainer.task import NotApplicable, Task
from trainer.validation import check_split_name
from vit import ablation_table, fewshot, pretrained
from vit.input_pipeline import load_image_data
from vit.model import make_vit


@flax.struct.dataclass
class ClassificationMetrics(clu_metrics.Collection):
  loss: clu_metrics.Average.from_output('loss')
  accuracy: clu_metrics.Accuracy


def default_fewshot_config() -> ml_collections.ConfigDict:
  """``shots`` (k per class; () = off), ``seeds`` (draws averaged), ``held_out_per_class`` (training
  examples that choose the regulariser), ``train_examples`` (the first N training examples are the
  pool the draws come from)."""
  return ml_collections.ConfigDict(dict(shots=(), seeds=3, held_out_per_class=10, train_examples=5000))


@dataclasses.dataclass(frozen=True)
class ImageShapes:
  """What the model needs to know of a data set, when there is none (``Task.without_data``)."""

  num_classes: int
  image_shape: tuple[int, int, int]


class ImageClassification(Task):
  """Config: ``data`` (see ``vit.input_pipeline``), ``model`` (see ``vit.model``), ``label_smoothing``;
  optional sections ``init_from`` (see ``vit.pretrained``) and ``fewshot`` (few-shot linear
  accuracy at every evaluation, see ``default_fewshot_config``)."""

  train_metrics = ClassificationMetrics
  eval_metrics = ClassificationMetrics
  percent_metrics = ('accuracy',)

  def __init__(self, config: ml_collections.ConfigDict, shapes: ImageShapes | None = None):
    super().__init__(config)
    self.label_smoothing = config.get('label_smoothing', 0.0)
    if not 0.0 <= self.label_smoothing < 1.0:
      raise ConfigError(f'label_smoothing must be in [0, 1), got {self.label_smoothing}.')
    posemb, injection = config.model.posemb, config.model.posemb_injection
    if posemb in POSEMB_KINDS and injection in INJECTIONS and not combination_exists(posemb, injection):
      raise NotApplicable(
        f"model.posemb {posemb!r} has no {injection!r} injection; only 'stem' exists for it."
      )
    self.init_from = config.get('init_from')
    pretrained.check_init_from(self.init_from)
    self.fewshot = config.get('fewshot')
    if self.fewshot is not None and any(k < 1 for k in self.fewshot.shots):
      raise ConfigError(f'config.fewshot.shots is {self.fewshot.shots}; each must be >= 1.')
    self._initial = None
    self.data = load_image_data(config.data) if shapes is None else shapes
    # Build the model abstractly now, so a bad model option fails before any real work.
    try:
      nnx.eval_shape(lambda: self.make_model(nnx.Rngs(0)))
    except ValueError as error:
      raise ConfigError(f'model: {error}') from error

  @classmethod
  def without_data(cls, config, sizes):
    """``sizes['num_classes']`` and ``sizes['channels']``; the image size is ``config.data.image_size``."""
    image_size = config.data.get('image_size')
    if not image_size or len(image_size) != 2:
      raise ConfigError('data.image_size must be (height, width) to build the task without its data.')
    return cls(config, ImageShapes(sizes['num_classes'], (*image_size, sizes['channels'])))

  def batch_shapes(self, batch_size):
    shapes = {
      'image': jax.ShapeDtypeStruct((batch_size, *self.data.image_shape), jnp.float32),
      'label': jax.ShapeDtypeStruct((batch_size,), jnp.int32),
    }
    if self.config.data.get('augment', {}).get('mixup_alpha', 0.0) > 0:
      shapes['mix_label'] = jax.ShapeDtypeStruct((batch_size,), jnp.int32)
      shapes['mix_weight'] = jax.ShapeDtypeStruct((batch_size,), jnp.float32)
    return shapes

  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    return make_vit(
      self.config.model, num_classes=self.data.num_classes, image_shape=self.data.image_shape, rngs=rngs
    )

  def check_training_data(self) -> None:
    """Reads ``init_from`` and loads it into a model once, so a bad file fails before training."""
    if self.init_from is not None and self.init_from.path:
      self._initial = pretrained.read_canonical(self.init_from)
      pretrained.load_into(self.make_model(nnx.Rngs(0)), self.init_from, self._initial)

  def load_initial(self, model) -> None:
    if self.init_from is None or not self.init_from.path:
      return
    if self._initial is None:
      self._initial = pretrained.read_canonical(self.init_from)
    print(pretrained.load_into(model, self.init_from, self._initial), flush=True)

  def extra_evaluation(self, model, split, output_dir, devices):
    """Few-shot linear accuracies of the pre-logits features, when ``fewshot.shots`` is set."""
    del output_dir, devices
    if self.fewshot is None or not self.fewshot.shots:
      return {}
    return fewshot_evaluation(model, self.data, split, self.fewshot)

  def num_train_examples(self) -> int:
    return self.data.num_train

  @classmethod
  def ablation_table(cls, summary):
    return ablation_table.table(summary)

  def draw_pictures(self, model, out_dir, name, title):
    from vit import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    return pictures.draw(model, self, out_dir, name, title)

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

  def loss_and_outputs(self, model, batch, *, rngs, deterministic):
    logits, _ = model(batch['image'], deterministic=deterministic, rngs=rngs)
    losses = cross_entropy(logits, batch['label'], self.label_smoothing)
    if 'mix_label' in batch:
      mixed = cross_entropy(logits, batch['mix_label'], self.label_smoothing)
      losses = batch['mix_weight'] * losses + (1.0 - batch['mix_weight']) * mixed
    return jnp.mean(losses), {'loss': losses, 'logits': logits, 'labels': batch['label']}

  def eval_outputs(self, model, batch):
    logits, _ = model(batch['image'])
    return {
      'loss': cross_entropy(logits, batch['label']),
      'logits': logits,
      'labels': batch['label'],
      'mask': batch['mask'],
    }


def fewshot_evaluation(
  model, data, split: str, fewshot_config: ml_collections.ConfigDict
) -> dict[str, float]:
  """Few-shot linear accuracies on ``split`` of ``data`` with draws from its training split."""

  def batches(name):
    return data.eval_batches(name, batch_size=256, process_index=0, process_count=1)

  train = fewshot.extract_features(model, batches('train'), fewshot_config.train_examples)
  test = fewshot.extract_features(model, batches(split))
  return fewshot.fewshot_results(
    train,
    test,
    tuple(fewshot_config.shots),
    seeds=fewshot_config.seeds,
    held_out_per_class=fewshot_config.held_out_per_class,
  )
