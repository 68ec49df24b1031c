"""Knowledge distillation (Hinton et al. 2015; DeiT, Touvron et al. 2021): a frozen teacher's logits
as a second target for the student.

``config.distill`` (every default in ``vit.config_sections.Distill``; ``teacher=''`` is off):

- ``teacher``: a workdir written by ``train.py`` (``checkpoint`` says which: ``'latest'``, ``'best'``
  or a step), or a timm or Hugging Face transformers folder or ``.safetensors`` file (a bare timm
  file with its architecture in ``arch``): the model ``trainer.predictor.load_predictor`` builds for
  that path, with its options, heads (a distilled DeiT's two), resolution, mean and std; or an
  ``.npz`` in the official or big_vision layout (``read_teacher_weights``), whose width, depth,
  heads, MLP, patch, pooling and resolution are read from its arrays, which has no other options
  and sees the student's normalised images;
- ``kind``: ``'soft'``, the KL divergence from the teacher's to the student's softmax at
  ``temperature`` T, times T^2 (Hinton et al.; DeiT); or ``'hard'``, the cross-entropy against the
  teacher's argmax (DeiT's hard distillation);
- ``alpha``: the training loss per image is ``(1 - alpha) * label loss + alpha * distillation loss``
  (DeiT: 0.5 for hard, 0.1 at T=3 for soft).

With the model's ``distill_token`` (``vit.model``) the class head learns the labels and the
distillation head the teacher (DeiT); without it one head learns both. The teacher sees the
student's batch (mixed and augmented as the student sees it), renormalised to its own statistics
and resized to its own resolution when they differ, inside the same compiled step: its variables
reach the step as the task's ``training_constants`` (``trainer.task``), placed like the student's
parameters, never in the optimizer or a checkpoint, and never differentiated.

DeiT's code divides its soft loss by the number of logits (batch x classes), not by the batch;
here it is a mean over images like every other loss, so DeiT's ``alpha`` for soft distillation
corresponds to ``alpha / classes`` here.
"""

import dataclasses
import math
import pathlib
import re
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from trainer.config_sections import from_section, to_section
from trainer.errors import ConfigError, MissingFileError
from trainer.io.workdir import CONFIG_FILE
from trainer.losses import cross_entropy
from vit import config_sections, pretrained
from vit.model import ViTOptions, make_vit
from vit.weights import checkpoint_npz, sources

KINDS = ('soft', 'hard')
_BLOCK = re.compile(r'^Transformer/encoderblock_(\d+)/')


def default_distill_config() -> ml_collections.ConfigDict:
  """Every ``distill`` field with its default (``vit.config_sections.Distill``)."""
  return to_section(config_sections.Distill())


def check_distill(section: ml_collections.ConfigDict | None) -> ml_collections.ConfigDict | None:
  """``config.distill`` with its defaults filled in, or ``None`` when it is absent or off; a
  ``ConfigError`` of one line for an unknown field or a bad value. Reads no file."""
  if section is None:
    return None
  config = to_section(from_section(config_sections.Distill, section, 'distill'))
  for field, lowest, highest in (('temperature', 0.0, math.inf), ('alpha', 0.0, 1.0)):
    value = config[field]
    if (
      not math.isfinite(value) or value < lowest or value > highest or (field == 'temperature' and value == 0)
    ):
      allowed = 'a finite number > 0' if field == 'temperature' else 'a number in [0, 1]'
      raise ConfigError(f'config.distill.{field} is {value!r}; it must be {allowed}.')
  checkpoint = config.checkpoint
  if checkpoint not in ('best', 'latest') and not (
    (isinstance(checkpoint, int) and not isinstance(checkpoint, bool) and checkpoint >= 0)
    or (isinstance(checkpoint, str) and checkpoint.isdigit())
  ):
    raise ConfigError(f"config.distill.checkpoint is {checkpoint!r}; it must be 'best', 'latest' or a step.")
  return config if config.teacher else None


# The losses, per image --------------------------------------------------------------


def soft_distillation(student_logits: jax.Array, teacher_logits: jax.Array, temperature: float) -> jax.Array:
  """``T^2 KL(softmax(teacher / T) || softmax(student / T))`` per example."""
  teacher_log_probs = jax.nn.log_softmax(teacher_logits / temperature)
  student_log_probs = jax.nn.log_softmax(student_logits / temperature)
  kl = jnp.sum(jnp.exp(teacher_log_probs) * (teacher_log_probs - student_log_probs), axis=-1)
  return temperature**2 * kl


def hard_distillation(student_logits: jax.Array, teacher_logits: jax.Array) -> jax.Array:
  """The cross-entropy of the student against the teacher's most probable class, per example."""
  return cross_entropy(student_logits, jnp.argmax(teacher_logits, axis=-1))


# The teacher ------------------------------------------------------------------------


@dataclasses.dataclass
class Teacher:
  """A frozen ViT: its graph, its variables (what the trainer places and passes into the step), the
  image shape it reads and its normalisation (``None``: the student's)."""

  graphdef: Any
  variables: Any
  image_shape: tuple[int, int, int]
  mean: tuple[float, ...] | None = None
  std: tuple[float, ...] | None = None

  def logits(self, variables, images: jax.Array, student_mean, student_std) -> jax.Array:
    """The teacher's logits of the student's normalised ``images`` ``[B, H, W, C]``, with no gradient."""
    images = jax.lax.stop_gradient(images)
    own = None if self.mean is None else (tuple(self.mean), tuple(self.std))
    if own is not None and own != (tuple(student_mean), tuple(student_std)):
      pixels = images * jnp.asarray(student_std, images.dtype) + jnp.asarray(student_mean, images.dtype)
      images = (pixels - jnp.asarray(self.mean, images.dtype)) / jnp.asarray(self.std, images.dtype)
    if images.shape[1:3] != self.image_shape[:2]:
      images = jax.image.resize(images, (images.shape[0], *self.image_shape), method='bilinear')
    logits, _ = nnx.merge(self.graphdef, jax.lax.stop_gradient(variables))(images, deterministic=True)
    return jax.lax.stop_gradient(logits)


class Distillation:
  """``config.distill`` (checked by ``check_distill``) for a student of ``num_classes`` classes of
  images ``image_shape``; the teacher is read by ``load`` (before training, not before evaluation)."""

  def __init__(self, config: ml_collections.ConfigDict, *, num_classes: int, image_shape, dtype: str):
    self.config, self.num_classes, self.image_shape, self.dtype = (
      config,
      num_classes,
      tuple(image_shape),
      dtype,
    )
    self.teacher: Teacher | None = None

  def load(self) -> Teacher:
    if self.teacher is None:
      self.teacher = load_teacher(
        self.config, num_classes=self.num_classes, image_shape=self.image_shape, dtype=self.dtype
      )
    return self.teacher

  def losses(self, student_logits, teacher_logits) -> jax.Array:
    if self.config.kind == 'hard':
      return hard_distillation(student_logits, teacher_logits)
    return soft_distillation(student_logits, teacher_logits, self.config.temperature)


def load_teacher(config: ml_collections.ConfigDict, *, num_classes: int, image_shape, dtype: str) -> Teacher:
  """The teacher ``config.teacher`` names: a workdir of ours, restored whole, or weights that
  ``read_teacher_weights`` reads, in a ViT built from their shapes (the other model fields at their
  defaults, the published code's numerics, computing in ``dtype``); checked against the student's
  classes and channels."""
  path = pathlib.Path(config.teacher)
  if not path.exists():
    raise MissingFileError(f'config.distill.teacher {path}: no such file or folder.')
  if ((path / CONFIG_FILE).is_file() and (path / 'checkpoints').is_dir()) or sources.is_weights_path(path):
    teacher = _predictor_teacher(path, config.checkpoint, config.get('arch', ''))
  else:
    canonical = read_teacher_weights(path)
    model_config = dataclasses.asdict(ViTOptions())
    model_config.update(architecture_of(canonical, path), dtype=dtype)
    grid = model_config.pop('grid') or _student_grid(image_shape, model_config['patch_size'])
    channels = canonical['embedding/kernel'].shape[2]
    shape = (grid[0] * model_config['patch_size'], grid[1] * model_config['patch_size'], channels)
    classes = model_config.pop('num_classes')
    model = make_vit(model_config, num_classes=classes, image_shape=shape, rngs=nnx.Rngs(0))
    checkpoint_npz.canonical_to_model(model, canonical, strict=True)
    graphdef, variables = nnx.split(model)
    teacher = Teacher(graphdef, variables, shape)
  head = teacher.variables['head']['kernel'].get_value()
  if head.shape[-1] != num_classes:
    raise ConfigError(
      f'config.distill.teacher {path} has {head.shape[-1]} classes; the student has {num_classes}.'
    )
  if teacher.image_shape[-1] != image_shape[-1]:
    raise ConfigError(
      f'config.distill.teacher {path} reads images of {teacher.image_shape[-1]} channels; '
      f'the student has {image_shape[-1]}.'
    )
  return teacher


def read_teacher_weights(path: pathlib.Path) -> dict[str, np.ndarray]:
  """Weights the ViT can read, in ``vit.weights.checkpoint_npz``'s canonical form: the one place a new kind
  of weights file or folder is added for teachers (as ``vit.pretrained`` reads it for ``init_from``)."""
  return pretrained.read_canonical(ml_collections.ConfigDict(dict(path=str(path), checkpoint='latest')))


def _predictor_teacher(path: pathlib.Path, checkpoint, arch: str) -> Teacher:
  """The model ``trainer.predictor.load_predictor`` builds for ``path`` (a workdir's checkpoint, or a
  timm or transformers folder or file: its options, heads and resolution), with the mean and std its
  images are normalised with."""
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top  (import cycle)

  which = int(checkpoint) if str(checkpoint).isdigit() else checkpoint
  predictor = load_predictor(path, which, **({'arch': arch} if arch else {}))
  graphdef, variables = nnx.split(predictor.model)
  preparation = getattr(predictor.task, 'preparation', None)
  mean, std = (preparation.mean, preparation.std) if preparation is not None else (None, None)
  return Teacher(graphdef, variables, tuple(predictor.task.sizes.image_shape), mean, std)


def architecture_of(canonical: dict[str, np.ndarray], path) -> dict[str, Any]:
  """The ViT model fields a canonical array set implies: width, depth, heads, MLP, patch, pooling,
  ``pre_logits``, the position encoding, the ``grid`` (``None``: no learned table says it; without
  one the encoding is big_vision's sincos2d) and ``num_classes``."""
  try:
    num_classes = canonical['head/kernel'].shape[-1]
    patch_h, patch_w, _, width = canonical['embedding/kernel'].shape
    depth = 1 + max(int(m.group(1)) for m in map(_BLOCK.match, canonical) if m)
    block = 'Transformer/encoderblock_0'
    heads = canonical[f'{block}/MultiHeadDotProductAttention_1/query/kernel'].shape[1]
    mlp_dim = canonical[f'{block}/MlpBlock_3/Dense_0/kernel'].shape[1]
  except (KeyError, ValueError) as error:
    raise ConfigError(
      f'config.distill.teacher {path}: not a ViT the .npz layouts describe ({error}).'
    ) from None
  if patch_h != patch_w:
    raise ConfigError(
      f'config.distill.teacher {path} has {patch_h}x{patch_w} patches; only square ones are read.'
    )
  pool = 'cls' if 'cls' in canonical else 'map' if 'MAPHead_0/probe' in canonical else 'gap'
  grid, posemb = None, 'sincos2d'
  if checkpoint_npz.POSEMB_KEY in canonical:
    rows, posemb = canonical[checkpoint_npz.POSEMB_KEY].shape[0], 'learn1d'
    side = math.isqrt(rows)
    if side * side != rows:
      raise ConfigError(f'config.distill.teacher {path}: its {rows} position rows are not a square grid.')
    grid = (side, side)
  pre_logits = canonical['pre_logits/kernel'].shape[1] if 'pre_logits/kernel' in canonical else 0
  return dict(
    width=width,
    depth=depth,
    num_heads=heads,
    mlp_dim=mlp_dim,
    patch_size=patch_h,
    pool=pool,
    posemb=posemb,
    posemb_injection='stem',
    pre_logits=pre_logits,
    sincos2d_layout='big_vision',
    grid=grid,
    num_classes=num_classes,
  )


def _student_grid(image_shape, patch_size: int) -> tuple[int, int]:
  return (image_shape[0] // patch_size, image_shape[1] // patch_size)
