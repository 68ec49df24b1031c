"""The trainer's config fields: their types, defaults and allowed ranges, in one place (no JAX here).

``Trainer`` is the top level of every config (a family's sections, ``model``, ``data`` and the like,
come from its task's ``config_sections``); ``Optimizer``, ``Mesh``, ``Ema`` and ``Wandb`` are its
sections. A field's range is metadata on it (``at_least``, ``within``, ``above``), which the section
reader (``trainer.config_sections.from_section``) checks with the field's type; the rules between
fields are ``trainer.validation.check_trainer_fields``'s.
"""

import dataclasses
import math
from typing import Literal


def at_least(default, lowest):
  """A number field whose value must be finite and ``>= lowest``."""
  return dataclasses.field(default=default, metadata={'range': (lowest, True, math.inf, False)})


def within(default, lowest: float, highest: float, *, highest_allowed: bool = False):
  """A number field in ``[lowest, highest)`` (``[lowest, highest]`` with ``highest_allowed``)."""
  return dataclasses.field(default=default, metadata={'range': (lowest, True, highest, highest_allowed)})


def above(default, lowest: float, highest: float = math.inf, *, highest_allowed: bool = False):
  """A number field whose value must be finite, ``> lowest`` and below (or at) ``highest``."""
  return dataclasses.field(default=default, metadata={'range': (lowest, False, highest, highest_allowed)})


@dataclasses.dataclass(frozen=True)
class Optimizer:
  """``trainer/optim.py`` says what each field does."""

  name: Literal['adamw', 'sgd'] = 'adamw'
  learning_rate: float = above(1e-3, 0.0)
  schedule: Literal['constant', 'cosine', 'linear', 'rsqrt'] = 'cosine'
  warmup_steps: int = at_least(0, 0)
  end_learning_rate: float = at_least(0.0, 0.0)
  weight_decay: float = at_least(0.0, 0.0)
  weight_decay_regex: str = 'kernel$'  #: the parameters decayed, by path
  b1: float = within(0.9, 0.0, 1.0)
  b2: float = within(0.999, 0.0, 1.0)
  eps: float = at_least(1e-8, 0.0)
  momentum: float = within(0.9, 0.0, 1.0)
  nesterov: bool = False
  grad_clip_norm: float = at_least(1.0, 0.0)  #: 0 = off
  frozen: str = ''  #: parameters never updated, by path ('' = none)
  layer_decay: float = above(1.0, 0.0, 1.0, highest_allowed=True)  #: 1 = off
  layer_decay_stem: str = ''
  layer_regex: str = r'blocks\.(\d+)\.'


@dataclasses.dataclass(frozen=True)
class Mesh:
  """Devices on each axis of the mesh (``trainer/partitioning.py``)."""

  data: int = -1  #: -1: all that fsdp and model leave
  fsdp: int = at_least(1, 1)  #: shard parameters and optimizer state
  model: int = at_least(1, 1)  #: split attention heads and MLP width (tensor parallelism)
  gather_per_layer: bool = True  #: under fsdp, each layer gathers its own weights (trainer/partitioning.py)


@dataclasses.dataclass(frozen=True)
class Ema:
  """A moving average of the parameters, evaluated beside them (``trainer/ema.py``)."""

  decay: float = within(0.0, 0.0, 1.0)  #: 0 = off
  warmup: bool = False  #: grow the decay as timm's ModelEmaV3 warm-up; off: a constant decay, as ModelEmaV2


@dataclasses.dataclass(frozen=True)
class Wandb:
  """A Weights & Biases run (``trainer/observe/observe_config.py``); ``project=''``: off."""

  project: str = ''
  entity: str = ''
  name: str = ''


@dataclasses.dataclass(frozen=True)
class Trainer:
  """The top-level fields. Durations: ``total_steps``, or ``num_epochs`` when it is 0. ``batch_size`` is
  global; ``keep_checkpoints`` latest ones are kept, plus the best by ``best_metric``/``best_mode``.
  ``eval_splits``, ``peak_tflops``, ``profile_steps`` and ``wandb`` watch a run
  (``trainer/observe/observe_config.py``)."""

  task: str = ''  #: 'package.module:ClassName'
  seed: int = at_least(0, 0)
  batch_size: int = at_least(128, 1)
  eval_batch_size: int = at_least(256, 1)
  grad_accum_steps: int = at_least(1, 1)
  total_steps: int = at_least(0, 0)
  num_epochs: float = at_least(0.0, 0.0)
  label_smoothing: float = within(0.0, 0.0, 1.0)
  log_every_steps: int = at_least(50, 1)
  eval_every_steps: int = at_least(500, 1)
  checkpoint_every_steps: int = at_least(500, 1)
  keep_checkpoints: int = at_least(3, 1)
  best_metric: str = 'accuracy'
  best_mode: Literal['max', 'min'] = 'max'
  eval_split: str = 'test'  #: a split, or alternatives in order of preference: 'test|val'
  eval_splits: tuple[str, ...] = ()  #: splits evaluated side by side; metrics named <split>_<metric>
  peak_tflops: float = at_least(0.0, 0.0)  #: one device's dense peak, for the utilisation; 0: the known one
  profile_steps: tuple[int, ...] = ()  #: steps traced with jax.profiler into <workdir>/profile/
  optimizer: Optimizer = Optimizer()
  mesh: Mesh = Mesh()
  ema: Ema = Ema()
  wandb: Wandb = Wandb()


TRAINER_FIELDS = tuple(field.name for field in dataclasses.fields(Trainer))
