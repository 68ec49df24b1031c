"""The training state and the jit-compiled train and evaluation steps.

The model is split once into a static graph definition, its parameters and its
other (constant) variables; the steps are pure functions of arrays, compiled
with ``jax.jit`` with explicit shardings and the old state's buffers donated.
"""

import dataclasses
import functools
from collections.abc import Collection
from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax
from clu import metrics as clu_metrics
from flax import nnx
from jax.sharding import Mesh

from trainer import random_streams
from trainer.accumulation import accumulated_gradient
from trainer.ema import update_ema
from trainer.optim import parameter_path
from trainer.partitioning import (
  batch_sharding,
  check_micro_batches,
  mark_layer_gathers,
  param_specs,
  replicated,
  state_shardings,
)
from trainer.task import Task


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any
  ema_params: Any = None  # the parameters' moving average (``trainer/ema.py``); None when off


class ModelParts:
  """A model split into graph definition, parameters and the remaining (non-trained) variables."""

  def __init__(self, model: nnx.Module):
    self.graphdef, self.params, self.rest = nnx.split(model, nnx.Param, ...)

  @classmethod
  def from_split(cls, graphdef, params, rest) -> 'ModelParts':
    """The parts of a model already split (``trainer.state_init`` makes them without a whole model)."""
    parts = cls.__new__(cls)
    parts.graphdef, parts.params, parts.rest = graphdef, params, rest
    return parts

  def merge(self, params) -> nnx.Module:
    return nnx.merge(self.graphdef, params, self.rest)


@functools.cache
def _with_grad_norm(task_metrics: type[clu_metrics.Collection]) -> type[clu_metrics.Collection]:
  return clu_metrics.Collection.create(
    **task_metrics.__annotations__, grad_norm=clu_metrics.Average.from_output('grad_norm')
  )


def train_metrics(task: Task) -> type[clu_metrics.Collection]:
  """The metrics the train step accumulates: the task's, and ``grad_norm``, the global norm of
  each step's gradient before clipping (frozen parameters' gradients are zero), whose mean is
  finite only if every step's gradient was: the loop stops on it as on a non-finite loss."""
  return _with_grad_norm(task.train_metrics)


def _add_grad_norm(metrics: clu_metrics.Collection, grad_norm: clu_metrics.Average) -> clu_metrics.Collection:
  fields = {field.name: getattr(metrics, field.name) for field in dataclasses.fields(metrics)}
  return _with_grad_norm(type(metrics))(**fields, grad_norm=grad_norm)


def make_train_step(
  task: Task,
  parts: ModelParts,
  optimizer: optax.GradientTransformation,
  mesh: Mesh,
  *,
  seed: int,
  grad_accum_steps: int = 1,
  state_sharding=None,
  frozen: Collection[str] = frozenset(),
  ema_decay: float = 0.0,
  ema_warmup: bool = False,
  constants=None,
  gather_per_layer: bool = True,
):
  """``step(state, metrics, batch) -> (state, metrics)``, compiled once.

  The gradient is that of the whole batch's mean loss: the gradients of the task's loss sums
  (``Task.loss_and_outputs``) are added over the ``grad_accum_steps`` micro-batches and divided
  once by the summed weight. Without micro-batches XLA sums the batch's devices and processes, as
  one global batch; with them each device adds up its own rows' gradients in the loop and they
  are reduced across devices once, after it (``trainer.accumulation``). ``metrics`` accumulates the train metrics
  since the last report inside the compiled step (start from ``train_metrics(task).empty()``),
  which saves a few small dispatches per step. ``state_sharding`` (a tree like the state, from
  ``trainer.partitioning.state_shardings``) defaults to replicated. The parameters whose paths
  are in ``frozen`` (``trainer.optim.frozen_paths``) are constants to the differentiation: their
  gradients are zero and never computed. With ``ema_decay`` > 0 the state's ``ema_params`` follow
  the updated parameters (``trainer.ema.update_ema``, warmed up with ``ema_warmup``). ``constants`` (``Task.training_constants``),
  when not ``None``, are placed like parameters and passed to every step as an argument of the
  compiled program, to the task's loss, which is never differentiated with respect to them.
  Under fsdp without micro-batches, ``gather_per_layer`` has each layer of the model's stacks gather
  its own weights (``trainer.partitioning.mark_layer_gathers``); off, XLA places the gathers.
  """
  dropout_key = random_streams.key(seed, random_streams.DROPOUT)
  state_sharding = replicated(mesh) if state_sharding is None else state_sharding

  def without_frozen_gradients(params):
    return jax.tree_util.tree_map_with_path(
      lambda key, p: jax.lax.stop_gradient(p) if parameter_path(key) in frozen else p, params
    )

  gather = (
    gather_per_layer and mesh.shape['fsdp'] > 1 and grad_accum_steps == 1
  )  # micro-batches gather inside their loop

  def loss_sum_fn(params, batch, key, constants):
    params = without_frozen_gradients(params)
    if gather:  # each layer gathers its own weights (trainer.partitioning.mark_layer_gathers)
      params = mark_layer_gathers(params, param_specs(params, mesh, state_sharding), mesh)
    rngs = nnx.Rngs(dropout=key)  # made inside the traced function: NNX forbids mutating outer Rngs
    given = {} if constants is None else {'constants': constants}
    loss_sum, weight, outputs = task.loss_and_outputs(
      parts.merge(params), batch, rngs=rngs, deterministic=False, **given
    )
    return loss_sum, (jnp.asarray(weight, jnp.float32), outputs)

  grad_fn = jax.grad(loss_sum_fn, has_aux=True)

  def summed_gradient(params, batch, key, constants):
    """The gradient of the loss sum, the weight it sums over and the batch's train metrics."""
    grads, (weight, outputs) = grad_fn(params, batch, key, constants)
    return grads, weight, task.train_metrics.single_from_model_output(**outputs)

  def whole_batch_gradient(params, batch, step_key, constants):
    if grad_accum_steps == 1:
      grads, weight, metrics = summed_gradient(params, batch, step_key, constants)
    else:  # each device sums its micro-batches' gradients; one reduction across devices after the loop
      check_micro_batches(jax.tree.leaves(batch)[0].shape[0], grad_accum_steps, mesh)
      grads, weight, metrics = accumulated_gradient(
        summed_gradient,
        task.train_metrics,
        params,
        batch,
        step_key,
        num_micro_batches=grad_accum_steps,
        mesh=mesh,
        specs=param_specs(params, mesh, state_sharding),
        trained=jax.tree_util.tree_map_with_path(lambda key, _: parameter_path(key) not in frozen, params),
        constants=constants,
      )
    weight = jnp.where(weight > 0, weight, 1.0)  # a batch with nothing to learn from gives no update
    return jax.tree.map(lambda g: g / weight.astype(g.dtype), grads), metrics

  def step(state: TrainState, metrics_so_far, batch, constants=None):
    if not hasattr(metrics_so_far, 'grad_norm'):  # started from task.train_metrics.empty()
      metrics_so_far = _add_grad_norm(metrics_so_far, clu_metrics.Average.empty())
    step_key = jax.random.fold_in(dropout_key, state.step)
    grads, metrics = whole_batch_gradient(state.params, batch, step_key, constants)
    metrics = _add_grad_norm(metrics, clu_metrics.Average.from_model_output(optax.global_norm(grads)))
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    ema_params = state.ema_params
    if ema_decay:
      ema_params = update_ema(ema_params, params, ema_decay, state.step, ema_warmup)
    new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state, ema_params=ema_params)
    return new_state, metrics_so_far.merge(metrics)

  in_shardings = (state_sharding, replicated(mesh), batch_sharding(mesh))
  if constants is not None:
    constants_sharding = state_shardings(constants, mesh)
    in_shardings = (*in_shardings, constants_sharding)
  compiled = jax.jit(
    step, in_shardings=in_shardings, out_shardings=(state_sharding, replicated(mesh)), donate_argnums=(0, 1)
  )
  if constants is None:
    return compiled
  constants = jax.device_put(constants, constants_sharding)

  def step_with_constants(state: TrainState, metrics_so_far, batch):
    return compiled(state, metrics_so_far, batch, constants)

  step_with_constants.lower = lambda state, metrics_so_far, batch: compiled.lower(
    state, metrics_so_far, batch, constants
  )
  step_with_constants.constants = constants  # as placed: what tests inspect
  return step_with_constants


def make_eval_step(task: Task, parts: ModelParts, mesh: Mesh, params_sharding=None):
  """``eval_step(params, batch) -> eval metrics`` of one batch, compiled once."""

  def step(params, batch):
    return task.eval_metrics.single_from_model_output(**task.eval_outputs(parts.merge(params), batch))

  params_sharding = replicated(mesh) if params_sharding is None else params_sharding
  return jax.jit(step, in_shardings=(params_sharding, batch_sharding(mesh)), out_shardings=replicated(mesh))
