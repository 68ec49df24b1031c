"""Video classification as a trainer task: the video Transformer, its clips, loss and metrics.

Metrics: loss and accuracy; for moving digits also ``digit_accuracy`` and ``direction_accuracy``,
each part of the predicted class (argmax over all classes) compared with the label's part.
The training loss is the cross-entropy per clip, label-smoothed as configured, summed with the
clip count as its weight (the trainer takes the whole batch's mean); the training ``loss`` metric
is that loss. The evaluation ``loss`` is the unsmoothed negative log-likelihood per clip, as in
every family.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
from clu import metrics as clu_metrics
from flax import nnx

from trainer.losses import cross_entropy
from trainer.observe.reporting import Reporting
from trainer.parameter_regexes import check_layer_numbering
from trainer.task import BatchesFromData, Task, loss_and_accuracy
from video import ablation_table
from video import config_sections as sections
from video.input_pipeline import ClipShapes, VideoData, load_video_data
from video.layouts import parameter_layer
from video.model import make_video_model, model_section, token_grid
from video.prediction import ClipPrediction

ClipMetrics = loss_and_accuracy()
MovingDigitMetrics = loss_and_accuracy(
  digit_accuracy=clu_metrics.Average.from_output('digit_correct'),
  direction_accuracy=clu_metrics.Average.from_output('direction_correct'),
)


class VideoReporting(Reporting):
  """The video classifier's tables (layouts by position encodings), pictures (attention over a
  clip) and model facts (GFLOPs per clip)."""

  percent_metrics = ('accuracy', 'digit_accuracy', 'direction_accuracy')

  def ablation_table(self, summary):
    return ablation_table.table(summary)

  def draw_pictures(self, task, model, out_dir, name, title):
    from video import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    return pictures.draw(model, task, out_dir, name, title)

  def model_facts(self, task) -> dict:
    model = nnx.eval_shape(lambda: task.make_model(nnx.Rngs(0)))
    return {'gflops_per_clip': forward_cost(model, task.sizes.clip_shape) / 1e9}


class VideoClassification(BatchesFromData, Task):
  """Config: ``data`` (see ``video.input_pipeline``), ``model`` (see ``video.model``), ``label_smoothing``."""

  config_sections = sections.SECTIONS
  Sizes = ClipShapes
  reporting = VideoReporting()

  def __init__(self, config: ml_collections.ConfigDict, shapes: ClipShapes | None = None):
    super().__init__(config, shapes)
    self.label_smoothing = config.label_smoothing
    model = model_section(config.model)
    if shapes is None:  # learned from the data, read (and checked) now
      self.sizes, class_names = self.data.shapes, self.data.class_names
    else:
      class_names = shapes.class_names
    self.preparation = self.sizes.preparation
    token_grid(self.sizes.clip_shape, model.tubelet)
    self.label_parts = self.sizes.label_parts
    if self.label_parts:  # moving digits: '7, moving left'
      class_names = [name.replace('/', ', moving ') for name in class_names]
    self.prediction = ClipPrediction(self.sizes, class_names)
    metrics = MovingDigitMetrics if self.label_parts else ClipMetrics
    self.train_metrics = self.eval_metrics = metrics
    self.check_model(lambda section: self._video_model(section, nnx.Rngs(0)))
    check_layer_numbering(
      config.optimizer,
      lambda: self.make_model(nnx.Rngs(0)),
      functools.partial(parameter_layer, layout=model.attention, depth=model.depth),
      f'the {model.attention!r} layout',
    )

  @functools.cached_property
  def data(self) -> VideoData:
    """The clip set, read when first needed (at once when no sizes were given)."""
    return load_video_data(self.config.data)

  def batch_shapes(self, batch_size):
    return {
      'clip': jax.ShapeDtypeStruct((batch_size, *self.sizes.clip_shape), jnp.float32),
      'label': jax.ShapeDtypeStruct((batch_size,), jnp.int32),
    }

  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    return self._video_model(self.config.model, rngs)

  def _video_model(self, section, rngs: nnx.Rngs) -> nnx.Module:
    """The model of a ``model`` section (``check_model`` builds both forms of a scanned one)."""
    return make_video_model(
      section, num_classes=self.sizes.num_classes, clip_shape=self.sizes.clip_shape, rngs=rngs
    )

  def _outputs(self, logits, labels, losses) -> dict:
    outputs = {'loss': losses, 'logits': logits, 'labels': labels}
    if self.label_parts:
      (_, _), (_, num_directions) = self.label_parts
      predicted = jnp.argmax(logits, axis=-1)
      outputs['digit_correct'] = (predicted // num_directions == labels // num_directions).astype(jnp.float32)
      outputs['direction_correct'] = (predicted % num_directions == labels % num_directions).astype(
        jnp.float32
      )
    return outputs

  def loss_and_outputs(self, model, batch, *, rngs, deterministic):
    logits, _ = model(batch['clip'], deterministic=deterministic, rngs=rngs)
    losses = cross_entropy(logits, batch['label'], self.label_smoothing)
    return jnp.sum(losses), losses.shape[0], self._outputs(logits, batch['label'], losses)

  def eval_outputs(self, model, batch):
    logits, _ = model(batch['clip'])
    outputs = self._outputs(logits, batch['label'], cross_entropy(logits, batch['label']))
    return {**outputs, 'mask': batch['mask']}


def forward_cost(model: nnx.Module, clip_shape) -> float:
  """FLOPs of one clip's forward pass, from XLA's cost analysis of the compiled function."""
  graphdef, state = nnx.split(model)

  def forward(state, clips):
    return nnx.merge(graphdef, state)(clips)[0]

  clips = jax.ShapeDtypeStruct((1, *clip_shape), jnp.float32)
  compiled = jax.jit(forward).lower(state, clips).compile()
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0]
  return float(analysis['flops'])
