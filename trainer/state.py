"""The training state and the jit-compiled train and evaluation steps.

The model is split once into a static graph definition, its parameters and its
other (constant) variables; the steps are pure functions of arrays, compiled
with ``jax.jit`` with explicit shardings and the old state's buffers donated.
"""

from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh

from trainer.partitioning import batch_sharding, replicated
from trainer.task import Task


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


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


def _split_micro_batches(batch, num_micro_batches: int):
  """``[B, ...]`` -> ``[k, B/k, ...]`` taking every k-th row, so each device keeps its own rows."""

  def split(x):
    x = x.reshape(x.shape[0] // num_micro_batches, num_micro_batches, *x.shape[1:])
    return jnp.swapaxes(x, 0, 1)

  return jax.tree.map(split, batch)


def make_train_step(
  task: Task,
  parts: ModelParts,
  optimizer: optax.GradientTransformation,
  mesh: Mesh,
  *,
  seed: int,
  grad_accum_steps: int = 1,
  state_sharding=None,
):
  """``step(state, metrics, batch) -> (state, metrics)``, compiled once.

  ``metrics`` accumulates the train metrics since the last report inside the
  compiled step (start from ``task.train_metrics.empty()``), which saves a few
  small dispatches per step. ``state_sharding`` (a tree like the state, from
  ``trainer.partitioning.state_shardings``) defaults to replicated.
  """
  dropout_key = jax.random.key(seed + 1)

  def loss_fn(params, batch, key):
    rngs = nnx.Rngs(dropout=key)  # made inside the traced function: NNX forbids mutating outer Rngs
    loss, outputs = task.loss_and_outputs(parts.merge(params), batch, rngs=rngs, deterministic=False)
    return loss, outputs

  def step(state: TrainState, metrics_so_far, batch):
    step_key = jax.random.fold_in(dropout_key, state.step)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if grad_accum_steps == 1:
      (_, outputs), grads = grad_fn(state.params, batch, step_key)
      metrics = task.train_metrics.single_from_model_output(**outputs)
    else:

      def micro_step(index, micro_batch):
        (_, outputs), grads = grad_fn(state.params, micro_batch, jax.random.fold_in(step_key, index))
        return grads, task.train_metrics.single_from_model_output(**outputs)

      def accumulate(carry, indexed_micro_batch):
        grads_sum, metrics = carry
        grads, micro_metrics = micro_step(*indexed_micro_batch)
        return (jax.tree.map(jnp.add, grads_sum, grads), metrics.merge(micro_metrics)), None

      micro_batches = _split_micro_batches(batch, grad_accum_steps)
      grads, metrics = micro_step(0, jax.tree.map(lambda x: x[0], micro_batches))
      remaining = (jnp.arange(1, grad_accum_steps), jax.tree.map(lambda x: x[1:], micro_batches))
      (grads, metrics), _ = jax.lax.scan(accumulate, (grads, metrics), remaining)
      grads = jax.tree.map(lambda g: g / grad_accum_steps, grads)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
    return new_state, metrics_so_far.merge(metrics)

  state_sharding = replicated(mesh) if state_sharding is None else state_sharding
  return jax.jit(
    step,
    in_shardings=(state_sharding, replicated(mesh), batch_sharding(mesh)),
    out_shardings=(state_sharding, replicated(mesh)),
    donate_argnums=(0, 1),
  )


def make_eval_step(task: Task, parts: ModelParts, mesh: Mesh, params_sharding=None):
  """``eval_step(params, batch) -> eval metrics`` of one batch, compiled once."""

  def step(params, batch):
    return task.eval_metrics.single_from_model_output(**task.eval_outputs(parts.merge(params), batch))

  params_sharding = replicated(mesh) if params_sharding is None else params_sharding
  return jax.jit(step, in_shardings=(params_sharding, batch_sharding(mesh)), out_shardings=replicated(mesh))
