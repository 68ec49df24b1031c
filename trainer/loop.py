"""``train_and_evaluate(config, workdir)``: the one training loop for every task.

Order of work: build the task (which validates the config and finds the data),
check and lock the workdir (``trainer/workdir_lock.py``), build the model and optimizer
state abstractly, then either restore the latest checkpoint into it or create it sharded
(with the task's initial parameters, ``Task.load_initial``; ``trainer/state_init.py``),
then train. Evaluation runs every
``eval_every_steps`` and at the end; a checkpoint is written every
``checkpoint_every_steps``, after each evaluation (with its metrics, for
keep-best), at the end, and on SIGTERM or Ctrl-C (``trainer/stop.py``), never
twice for one step. ``_Training`` holds the run; its methods report progress,
evaluate and save, each in one place.
"""

import dataclasses
import math
import pathlib
import time
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging
from clu import parameter_overview
from flax import nnx

from trainer import workdir as workdir_lib
from trainer.checkpoints import Checkpoints
from trainer.devices import Devices
from trainer.errors import DataError, TrainingDiverged, WorkdirError
from trainer.metrics_io import make_writers
from trainer.optim import make_optimizer
from trainer.partitioning import check_batch_size, global_batch, make_mesh, replicated
from trainer.state import ModelParts, make_eval_step, make_train_step
from trainer.state_init import StateInit
from trainer.stop import StopRequest
from trainer.task import Task, load_task
from trainer.workdir_lock import WorkdirLock


@dataclasses.dataclass
class TrainResult:
  step: int
  interrupted: bool
  eval_metrics: dict[str, float]


def total_steps(config: ml_collections.ConfigDict, task: Task) -> int:
  """``config.total_steps``, or ``config.num_epochs`` over the task's training examples."""
  if config.get('total_steps'):
    return int(config.total_steps)
  if config.get('num_epochs'):
    return math.ceil(config.num_epochs * task.num_train_examples() / config.batch_size)
  raise ValueError('Set config.total_steps or config.num_epochs.')


def evaluate_params(
  task: Task,
  parts: ModelParts,
  params,
  split: str,
  mesh,
  batch_size: int,
  eval_step=None,
  output_dir: pathlib.Path | None = None,
) -> dict[str, float | str]:
  """Metrics of ``params`` on a whole split (every example counted once)."""
  check_batch_size(batch_size, mesh, 'eval_batch_size')
  eval_step = eval_step or make_eval_step(task, parts, mesh)
  totals = None
  for local in task.eval_batches(
    split, batch_size=batch_size, process_index=jax.process_index(), process_count=jax.process_count()
  ):
    metrics = eval_step(params, global_batch(local, mesh))
    totals = metrics if totals is None else totals.merge(metrics)
  if totals is None:
    raise DataError(f'Split {split!r} has no examples.')
  results = {name: float(value) for name, value in totals.compute().items()}
  results.update(task.extra_evaluation(parts.merge(params), split, output_dir, Devices(mesh)))
  return results


def _format(metrics: dict[str, Any]) -> str:
  return ' '.join(
    f'{name} {value:.4g}' for name, value in sorted(metrics.items()) if not isinstance(value, str)
  )


def _lock_workdir(workdir: pathlib.Path) -> WorkdirLock:
  """Process 0 locks the workdir; every process raises if it could not."""
  lock = WorkdirLock(workdir)
  error = None
  if jax.process_index() == 0:
    try:
      lock.acquire()
    except WorkdirError as refused:
      error = refused
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

    if np.any(multihost_utils.process_allgather(np.int32(error is not None))) and error is None:
      error = WorkdirError(f'{workdir} is being trained by another process (process 0 says which).')
  if error is not None:
    raise error
  return lock


class _Progress:
  """The progress line: step, training metrics, steps/s, examples/s and ETA.

  Not clu's ``ReportProgress``: it puts its line in the work unit's notes (only
  logged at INFO locally, which the command lines quiet), never fires on its first
  call, has no examples/s, and writes ``steps_per_sec`` and ``uptime`` as records of
  their own in ``metrics.jsonl`` rather than beside the loss.
  """

  def __init__(self, step: int, num_steps: int, batch_size: int):
    self.num_steps, self.batch_size = num_steps, batch_size
    self._since = (time.perf_counter(), step)

  def steps_per_sec(self, step: int) -> float:
    now = time.perf_counter()
    rate = (step - self._since[1]) / max(now - self._since[0], 1e-9)
    self._since = (now, step)
    return rate

  def line(self, step: int, values: dict[str, float]) -> str:
    rate = values['steps_per_sec']
    eta = (self.num_steps - step) / max(rate, 1e-9)
    shown = ' '.join(
      f'{name} {value:.4g}' for name, value in sorted(values.items()) if name != 'steps_per_sec'
    )
    return (
      f'step {step}/{self.num_steps} | {shown} | {rate:.2f} steps/s, '
      f'{rate * self.batch_size:.0f} examples/s | ETA {eta:.0f}s'
    )


class _Training:
  """The state of one run and the three things done to it besides stepping:
  reporting progress, evaluating and saving."""

  def __init__(self, config, workdir: pathlib.Path, task: Task, mesh, optimizer, num_steps: int):
    self.config, self.workdir, self.task, self.mesh, self.num_steps = config, workdir, task, mesh, num_steps
    self.checkpoints = Checkpoints(
      workdir, keep=config.keep_checkpoints, best_metric=config.best_metric, best_mode=config.best_mode
    )
    self.start_step = self.checkpoints.latest_step() or 0
    init = StateInit(task, optimizer, mesh, config.seed)
    self.state_sharding = init.state_sharding
    if self.start_step:  # restored into the abstract state: no random one is made first
      self.state = self.checkpoints.restore(self.start_step, init.abstract_state)
      self.parts = init.parts(init.rest())
      logging.info('Resumed from the checkpoint at step %d.', self.start_step)
    else:
      self.state, self.parts = init.create()
    self.is_main = jax.process_index() == 0
    if self.is_main:
      workdir_lib.save_config(workdir, config)
      parameter_overview.log_parameter_overview(nnx.to_pure_dict(self.state.params))
    self.writers = make_writers(workdir, self.is_main)

    self.train_step = make_train_step(
      task,
      self.parts,
      optimizer,
      mesh,
      seed=config.seed,
      grad_accum_steps=config.grad_accum_steps,
      state_sharding=self.state_sharding,
    )
    self.eval_step = make_eval_step(task, self.parts, mesh, self.state_sharding.params)
    self.batches = task.train_batches(
      batch_size=config.batch_size,
      seed=config.seed,
      start_step=self.start_step,
      process_index=jax.process_index(),
      process_count=jax.process_count(),
    )
    self.step = self.start_step
    self.pending_metrics = None
    self.last_eval: dict[str, float] = {}
    self.evaluated_step = None
    self.saved_step = self.start_step or None
    self.progress = _Progress(self.step, num_steps, config.batch_size)

  def train_one_step(self) -> None:
    if self.pending_metrics is None:
      self.pending_metrics = jax.device_put(self.task.train_metrics.empty(), replicated(self.mesh))
    self.state, self.pending_metrics = self.train_step(
      self.state, self.pending_metrics, global_batch(next(self.batches), self.mesh)
    )
    self.step += 1

  def report_progress(self) -> None:
    """Writes and prints the training metrics since the last report; stops on a NaN loss."""
    if self.pending_metrics is None:
      return
    values = {name: float(value) for name, value in self.pending_metrics.compute().items()}
    self.pending_metrics = None
    self._check_finite(values.get('loss'))
    values['steps_per_sec'] = self.progress.steps_per_sec(self.step)
    self.writers['train'].write_scalars(self.step, values)
    if self.is_main:
      print(self.progress.line(self.step, values), flush=True)

  def _check_finite(self, loss: float | None) -> None:
    if loss is None or np.isfinite(loss):
      return
    self.checkpoints.wait()
    last = self.checkpoints.latest_step()
    if last is None:
      kept = (
        f'No checkpoint has been saved yet (none in {self.checkpoints.directory}); '
        'a rerun starts from the beginning.'
      )
    else:
      kept = f'The last good checkpoint (step {last}) is kept in {self.checkpoints.directory}.'
    raise TrainingDiverged(f'Training loss became {loss} by step {self.step}; stopped. {kept}')

  def evaluate(self) -> None:
    """Metrics of the current parameters on ``config.eval_split``, written and printed."""
    self.report_progress()
    results = evaluate_params(
      self.task,
      self.parts,
      self.state.params,
      self.config.eval_split,
      self.mesh,
      self.config.eval_batch_size,
      self.eval_step,
      self.workdir,
    )
    self.last_eval = {name: value for name, value in results.items() if not isinstance(value, str)}
    self.evaluated_step = self.step
    texts = {name: value for name, value in results.items() if isinstance(value, str)}
    self.writers['eval'].write_scalars(self.step, self.last_eval)
    if texts:
      self.writers['eval'].write_texts(self.step, texts)
    if self.is_main:
      print(f'eval {self.config.eval_split} at step {self.step}: ' + _format(self.last_eval), flush=True)

  def maybe_save(self, reason: str) -> None:
    """The one place that saves: once per step, with the metrics of an evaluation at that step."""
    if self.saved_step == self.step:
      return
    self.report_progress()
    metrics = self.last_eval if self.evaluated_step == self.step else None
    logging.info('Saving checkpoint %d (%s).', self.step, reason)
    self.checkpoints.save(self.step, self.state, metrics=metrics)
    self.saved_step = self.step

  def run(self, stop: StopRequest) -> TrainResult:
    config, split = self.config, self.config.eval_split
    while self.step < self.num_steps:
      self.train_one_step()
      step = self.step
      if step % config.log_every_steps == 0:
        self.report_progress()
      if step % config.eval_every_steps == 0 or step == self.num_steps:
        self.evaluate()
        self.maybe_save('evaluation')
      elif step % config.checkpoint_every_steps == 0:
        self.maybe_save('schedule')
      if step < self.num_steps and stop.should_stop(step):
        self.maybe_save('stop')
        self.checkpoints.wait()
        print(
          f'{stop.reason()}: saved a checkpoint at step {step} in {self.checkpoints.directory}; '
          'rerun the same command to resume.',
          flush=True,
        )
        return TrainResult(step=step, interrupted=True, eval_metrics=self.last_eval)
    if self.start_step >= self.num_steps:  # already trained: report the final metrics again
      self.last_eval = evaluate_params(
        self.task,
        self.parts,
        self.state.params,
        split,
        self.mesh,
        config.eval_batch_size,
        self.eval_step,
        self.workdir,
      )
      print(
        f'already trained to step {self.start_step}; eval {split}: ' + _format(self.last_eval), flush=True
      )
    return TrainResult(step=self.step, interrupted=False, eval_metrics=self.last_eval)

  def close(self) -> None:
    try:
      self.checkpoints.wait()
      self.checkpoints.close()
    finally:
      for writer in self.writers.values():
        writer.flush()


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | pathlib.Path) -> TrainResult:
  workdir = pathlib.Path(workdir)
  task = load_task(config)
  workdir_lib.check_same_identity(workdir, config)
  mesh = make_mesh(**config.get('mesh', {}))
  check_batch_size(config.batch_size, mesh)
  check_batch_size(config.eval_batch_size, mesh, 'eval_batch_size')
  num_steps = total_steps(config, task)
  optimizer = make_optimizer(config.optimizer, num_steps)
  task.check_training_data()
  workdir.mkdir(parents=True, exist_ok=True)
  lock = _lock_workdir(workdir)
  try:
    task.prepare(workdir)
    training = _Training(config, workdir, task, mesh, optimizer, num_steps)
    try:
      with StopRequest(sync_every_steps=config.log_every_steps) as stop:
        return training.run(stop)
    finally:
      training.close()
  finally:
    lock.release()
