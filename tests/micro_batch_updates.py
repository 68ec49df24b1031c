"""One plain-SGD step on one batch, taken whole and in micro-batches, for each family's tests that
gradient accumulation gives the whole batch's update (plain SGD: no Adam normalisation to hide a
wrong gradient scale)."""

import jax
import numpy as np
import optax
from flax import nnx

from trainer.partitioning import global_batch, make_mesh
from trainer.state import ModelParts, TrainState, make_train_step
from trainer.task import Task


def _one_step(task: Task, parts: ModelParts, host_params, batch, grad_accum_steps: int):
  mesh = make_mesh()
  optimizer = optax.sgd(1.0)
  state = TrainState(
    step=np.int32(0), params=jax.tree.map(np.copy, host_params), opt_state=optimizer.init(host_params)
  )
  step = make_train_step(task, parts, optimizer, mesh, seed=0, grad_accum_steps=grad_accum_steps)
  state, metrics = step(state, task.train_metrics.empty(), global_batch(batch, mesh))
  return jax.tree.map(np.asarray, state.params), metrics.compute()


def assert_micro_batches_give_the_whole_batch(task: Task, batch, micro_batches: int, metric_names) -> None:
  """The parameters and train metrics after one step are those of the whole batch (a prepared
  ``task`` whose model has no dropout)."""
  parts = ModelParts(task.make_model(nnx.Rngs(params=0)))
  host_params = jax.tree.map(np.array, parts.params)
  whole, whole_metrics = _one_step(task, parts, host_params, batch, 1)
  accumulated, accumulated_metrics = _one_step(task, parts, host_params, batch, micro_batches)
  moved = [np.max(np.abs(a - b)) for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(host_params))]
  assert max(moved) > 1e-3  # the step did something
  for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(accumulated)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  for name in metric_names:
    np.testing.assert_allclose(whole_metrics[name], accumulated_metrics[name], rtol=1e-5)
