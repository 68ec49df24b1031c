"""One way to build a run's step: the mesh, the optimizer with its frozen set, the abstract train state
and the compiled train step of a config and a task.

Training (``trainer.loop``), compiling for a TPU slice (``benchmarks.compile_for``) and the throughput
benchmarks (``benchmarks.vit_throughput``, ``benchmarks.transformer_throughput``) all call
``build_step``, so what they compile is the step a run trains with: the same shardings, the same
micro-batches and the same frozen parameters, whose gradients are never computed.

``build_step`` checks what needs no model at once (the mesh, the batch against it, the optimizer's
fields), so a bad config fails before any long work; the model's abstract state is built on first use
(``RunStep.init``), since a task may learn what its model is only in ``Task.prepare`` (a translator's
vocabulary, from its tokenizers).
"""

import dataclasses
import functools

import ml_collections
import optax
from jax.sharding import Mesh

from trainer.ema import ema_decay, ema_warmup
from trainer.optim import frozen_paths, make_optimizer
from trainer.partitioning import AXES, check_batch_size, check_micro_batches, make_mesh
from trainer.state import ModelParts, make_train_step
from trainer.state_init import StateInit
from trainer.task import Task


@dataclasses.dataclass(eq=False)
class RunStep:
  """The mesh, optimizer, abstract state and train step of one run of ``config`` (``build_step``)."""

  config: ml_collections.ConfigDict
  task: Task
  mesh: Mesh
  optimizer: optax.GradientTransformation

  @functools.cached_property
  def init(self) -> StateInit:
    """The train state built abstractly, its shardings, and how to create or restore it."""
    return StateInit(self.task, self.optimizer, self.mesh, self.config.seed, ema=ema_decay(self.config) > 0)

  @functools.cached_property
  def frozen(self) -> frozenset[str]:
    """The paths of the parameters ``config.optimizer.frozen`` freezes."""
    return frozen_paths(self.config.optimizer, self.init.abstract_state.params)

  def train_step(self, parts: ModelParts):
    """The compiled ``step(state, metrics, batch) -> (state, metrics)`` of the model ``parts`` holds
    (its constants: ``StateInit.create``, ``rest`` or ``host_rest``), with the task's
    ``training_constants`` (a distillation teacher) passed in."""
    return make_train_step(
      self.task,
      parts,
      self.optimizer,
      self.mesh,
      seed=self.config.seed,
      grad_accum_steps=self.config.grad_accum_steps,
      state_sharding=self.init.state_sharding,
      frozen=self.frozen,
      ema_decay=ema_decay(self.config),
      ema_warmup=ema_warmup(self.config),
      constants=self.task.training_constants(),
      gather_per_layer=self.config.get('mesh', {}).get('gather_per_layer', True),
    )


def build_step(config: ml_collections.ConfigDict, task: Task, num_steps: int, devices=None) -> RunStep:
  """The step of a run of ``config`` on ``devices`` (default: all of this process's view) over
  ``num_steps`` steps (the schedule's length); raises ``ConfigError`` for a mesh, batch size,
  micro-batch count or optimizer field that cannot work."""
  optimizer = make_optimizer(config.optimizer, num_steps)
  sizes = {axis: size for axis, size in config.get('mesh', {}).items() if axis in AXES}
  mesh = make_mesh(**sizes, devices=devices)
  check_batch_size(config.batch_size, mesh)
  check_micro_batches(config.batch_size, config.grad_accum_steps, mesh)
  return RunStep(config, task, mesh, optimizer)
