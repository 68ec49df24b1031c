"""``train_and_evaluate(config, workdir)``: the one training loop for every task.

Order of work: build the task (which validates the config and finds the data),
check the workdir, build the model, restore the latest checkpoint if there is
one, then train. Evaluation runs every ``eval_every_steps`` and at the end; a
checkpoint is written every ``checkpoint_every_steps``, after each evaluation
(with its metrics, for keep-best), at the end, and on SIGTERM or Ctrl-C.
"""

import dataclasses
import math
import pathlib
import signal
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from clu import parameter_overview
from flax import nnx

from trainer import workdir as workdir_lib
from trainer.checkpoints import Checkpoints, abstract_like
from trainer.metrics_io import make_writers
from trainer.optim import make_optimizer
from trainer.partitioning import check_batch_size, global_batch, make_mesh, replicated
from trainer.state import ModelParts, TrainState, make_eval_step, make_train_step
from trainer.task import Task, load_task


@dataclasses.dataclass
class TrainResult:
  step: int
  interrupted: bool
  eval_metrics: dict[str, float]


class _StopRequest:
  """Turns SIGTERM and SIGINT into a flag the loop checks after each step."""

  def __init__(self):
    self.signal_name = None
    self._previous = {}

  def __enter__(self):
    for sig in (signal.SIGTERM, signal.SIGINT):
      try:
        self._previous[sig] = signal.signal(sig, self._handle)
      except ValueError:  # not the main thread: no handlers, training still works
        pass
    return self

  def _handle(self, signum, frame):
    del frame
    self.signal_name = signal.Signals(signum).name

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def total_steps(config: ml_collections.ConfigDict, task: Task) -> int:
  """``config.total_steps``, or ``config.num_epochs`` over the task's training examples."""
  if config.get('total_steps'):
    return int(config.total_steps)
  if config.get('num_epochs'):
    return math.ceil(config.num_epochs * task.num_train_examples() / config.batch_size)
  raise ValueError('Set config.total_steps or config.num_epochs.')


def evaluate_params(task: Task, parts: ModelParts, params, split: str, mesh, batch_size: int,
                    eval_step=None, output_dir: pathlib.Path | None = None) -> dict[str, float | str]:
  """Metrics of ``params`` on a whole split (every example counted once)."""
  check_batch_size(batch_size, mesh, 'eval_batch_size')
  eval_step = eval_step or make_eval_step(task, parts, mesh)
  totals = None
  for local in task.eval_batches(split, batch_size=batch_size, process_index=jax.process_index(),
                                 process_count=jax.process_count()):
    metrics = eval_step(params, global_batch(local, mesh))
    totals = metrics if totals is None else totals.merge(metrics)
  if totals is None:
    raise ValueError(f'Split {split!r} has no examples.')
  results = {name: float(value) for name, value in totals.compute().items()}
  results.update(task.extra_evaluation(parts.merge(params), split, output_dir))
  return results


def _format(metrics: dict[str, Any]) -> str:
  return ' '.join(f'{name} {value:.4g}' for name, value in sorted(metrics.items()) if not isinstance(value, str))


def _check_finite(metrics: dict[str, float], step: int, checkpoints: Checkpoints) -> None:
  loss = metrics.get('loss')
  if loss is not None and not np.isfinite(loss):
    raise FloatingPointError(
        f'Training loss became {loss} by step {step}; stopped. The last good checkpoint '
        f'(step {checkpoints.latest_step()}) is kept in {checkpoints.directory}.')


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | pathlib.Path) -> TrainResult:
  workdir = pathlib.Path(workdir)
  task = load_task(config)
  workdir_lib.check_same_identity(workdir, config)
  mesh = make_mesh()
  check_batch_size(config.batch_size, mesh)
  check_batch_size(config.eval_batch_size, mesh, 'eval_batch_size')
  if config.batch_size % config.grad_accum_steps:
    raise ValueError(f'batch_size ({config.batch_size}) must be divisible by grad_accum_steps '
                     f'({config.grad_accum_steps}).')
  num_steps = total_steps(config, task)
  optimizer = make_optimizer(config.optimizer, num_steps)
  workdir.mkdir(parents=True, exist_ok=True)
  task.prepare(workdir)

  parts = ModelParts(task.make_model(nnx.Rngs(params=config.seed)))
  state = TrainState(step=jnp.zeros((), jnp.int32), params=parts.params,
                     opt_state=optimizer.init(parts.params))
  state = jax.device_put(state, replicated(mesh))
  parts.params = None  # the state holds them from now on

  checkpoints = Checkpoints(workdir, keep=config.keep_checkpoints, best_metric=config.best_metric,
                            best_mode=config.best_mode)
  start_step = checkpoints.latest_step() or 0
  if start_step:
    state = checkpoints.restore(start_step, abstract_like(state, replicated(mesh)))
    logging.info('Resumed from the checkpoint at step %d.', start_step)
  is_main = jax.process_index() == 0
  if is_main:
    workdir_lib.save_config(workdir, config)
    parameter_overview.log_parameter_overview(nnx.to_pure_dict(state.params))
  writers = make_writers(workdir, is_main)

  train_step = make_train_step(task, parts, optimizer, mesh, seed=config.seed,
                               grad_accum_steps=config.grad_accum_steps)
  eval_step = make_eval_step(task, parts, mesh)
  batches = task.train_batches(batch_size=config.batch_size, seed=config.seed, start_step=start_step,
                               process_index=jax.process_index(), process_count=jax.process_count())

  pending_metrics = None
  last_eval: dict[str, float] = {}
  step = start_step
  timer = (time.perf_counter(), step)

  def flush_train_metrics():
    nonlocal pending_metrics, timer
    if pending_metrics is None:
      return
    values = {name: float(value) for name, value in pending_metrics.compute().items()}
    pending_metrics = None
    _check_finite(values, step, checkpoints)
    now = time.perf_counter()
    steps_per_sec = (step - timer[1]) / max(now - timer[0], 1e-9)
    timer = (now, step)
    values['steps_per_sec'] = steps_per_sec
    writers['train'].write_scalars(step, values)
    if is_main:
      eta = (num_steps - step) / max(steps_per_sec, 1e-9)
      shown = ' '.join(f'{name} {value:.4g}' for name, value in sorted(values.items())
                       if name != 'steps_per_sec')
      print(f'step {step}/{num_steps} | {shown} | {steps_per_sec:.2f} steps/s, '
            f'{steps_per_sec * config.batch_size:.0f} examples/s | ETA {eta:.0f}s', flush=True)

  def evaluate_and_save():
    nonlocal last_eval
    flush_train_metrics()
    results = evaluate_params(task, parts, state.params, config.eval_split, mesh,
                              config.eval_batch_size, eval_step, workdir)
    last_eval = {name: value for name, value in results.items() if not isinstance(value, str)}
    texts = {name: value for name, value in results.items() if isinstance(value, str)}
    writers['eval'].write_scalars(step, last_eval)
    if texts:
      writers['eval'].write_texts(step, texts)
    if is_main:
      print(f'eval {config.eval_split} at step {step}: ' + _format(last_eval), flush=True)
    checkpoints.save(step, state, metrics=last_eval)

  interrupted = False
  try:
    with _StopRequest() as stop:
      while step < num_steps:
        if pending_metrics is None:
          pending_metrics = jax.device_put(task.train_metrics.empty(), replicated(mesh))
        state, pending_metrics = train_step(state, pending_metrics, global_batch(next(batches), mesh))
        step += 1
        if step % config.log_every_steps == 0:
          flush_train_metrics()
        if step % config.eval_every_steps == 0 or step == num_steps:
          evaluate_and_save()
        elif step % config.checkpoint_every_steps == 0:
          flush_train_metrics()
          checkpoints.save(step, state)
        if stop.signal_name and step < num_steps:
          flush_train_metrics()
          checkpoints.save(step, state)
          checkpoints.wait()
          print(f'{stop.signal_name} received: saved a checkpoint at step {step} in {checkpoints.directory}; '
                'rerun the same command to resume.', flush=True)
          interrupted = True
          break
      if start_step >= num_steps:  # already trained: report the final metrics again
        last_eval = evaluate_params(task, parts, state.params, config.eval_split, mesh,
                                    config.eval_batch_size, eval_step, workdir)
        print(f'already trained to step {start_step}; eval {config.eval_split}: ' + _format(last_eval),
              flush=True)
  finally:
    checkpoints.wait()
    checkpoints.close()
    for writer in writers.values():
      writer.flush()
  return TrainResult(step=step, interrupted=interrupted, eval_metrics=last_eval)
