"""Checkpoints with orbax: asynchronous, atomic, the N latest plus the best by an evaluation metric.

A checkpoint holds the whole training state (step, parameters, optimizer state).
The dropout randomness and the data position are functions of the step and the
seed, so restoring the step restores them too.
"""

import logging
import pathlib
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers


class _ExpectedOrbaxWarnings(logging.Filter):
  """Drops orbax warnings about what we do on purpose: checkpoints between evaluations
  carry no metrics, and evaluation opens the checkpoints read-only."""

  def filter(self, record):
    message = record.getMessage()
    return not ('did not provide metrics' in message or 'read_only=True' in message
                or 'directory is read only' in message)


logging.getLogger('absl').addFilter(_ExpectedOrbaxWarnings())


class Checkpoints:

  def __init__(self, workdir: str | pathlib.Path, *, keep: int = 3, best_metric: str | None = None,
               best_mode: str = 'max', asynchronous: bool = True, read_only: bool = False):
    if best_mode not in ('max', 'min'):
      raise ValueError(f"best_mode must be 'max' or 'min', got {best_mode!r}.")
    self.best_metric = best_metric
    self.best_mode = best_mode
    policies = [checkpoint_managers.LatestN(n=keep)]
    if best_metric:
      policies.append(checkpoint_managers.BestN(
          get_metric_fn=lambda metrics: metrics[best_metric], reverse=best_mode == 'min', n=1,
          keep_checkpoints_without_metrics=False))
    options = ocp.CheckpointManagerOptions(
        preservation_policy=checkpoint_managers.AnyPreservationPolicy(policies),
        # best_fn makes orbax store each checkpoint's metrics; the policies above decide what is kept.
        best_fn=(lambda metrics: metrics[best_metric]) if best_metric else None, best_mode=best_mode,
        enable_async_checkpointing=asynchronous, read_only=read_only, create=not read_only)
    self.directory = pathlib.Path(workdir).absolute() / 'checkpoints'
    self.manager = ocp.CheckpointManager(self.directory, options=options)

  def all_steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def best_step(self) -> int | None:
    """The kept step with the best ``best_metric`` (ties: the later step)."""
    scored = []
    for step in self.all_steps():
      metrics = self.manager.metrics(step)
      if metrics and self.best_metric in metrics:
        scored.append((metrics[self.best_metric] * (1 if self.best_mode == 'max' else -1), step))
    return max(scored)[1] if scored else None

  def resolve(self, which: str | int) -> int:
    """'latest', 'best' or a step number -> a step that exists, else a clear error."""
    steps = self.all_steps()
    if not steps:
      raise FileNotFoundError(f'No checkpoints in {self.directory}.')
    if which == 'latest':
      return steps[-1]
    if which == 'best':
      step = self.best_step()
      if step is None:
        raise ValueError(f'No checkpoint in {self.directory} has the metric {self.best_metric!r}.')
      return step
    try:
      step = int(which)
    except ValueError:
      raise ValueError(f"Checkpoint must be 'latest', 'best' or a step number, got {which!r}.") from None
    if step not in steps:
      raise ValueError(f'No checkpoint for step {step} in {self.directory}; saved steps: {steps}.')
    return step

  def save(self, step: int, state: Any, metrics: dict[str, float] | None = None) -> None:
    self.manager.save(step, args=ocp.args.StandardSave(state), metrics=metrics, force=True)

  def restore(self, step: int, abstract_state: Any) -> Any:
    """Restores onto the shardings named in ``abstract_state`` (any device count)."""
    return self.manager.restore(step, args=ocp.args.StandardRestore(abstract_state))

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.close()


def abstract_like(state: Any, sharding) -> Any:
  """Shape/dtype/sharding stand-ins for ``state``, to restore into without allocating twice."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state)
