"""``train_and_evaluate(config, workdir)``: the one training loop for every task.

Order of work: build the task (which validates the config and finds the data),
check and lock the workdir (``trainer/io/workdir_lock.py``), build the model and optimizer
state abstractly, then either restore the latest checkpoint into it or create it sharded
(with the task's initial parameters, ``Task.load_initial``; ``trainer/state_init.py``),
then train. Evaluation runs every
``eval_every_steps`` and at the end; a checkpoint is written every
``checkpoint_every_steps``, after each evaluation (with its metrics, for
keep-best), at the end, and on SIGTERM or Ctrl-C (``trainer/stop.py``), never
twice for one step, and never with a non-finite value: a non-finite loss, gradient
norm or state stops the run, naming the last good checkpoint. ``_Training`` holds the run and
steps it; the parts that resume, keep records, report progress, evaluate and save are one class
or function each, above it.
"""

import contextlib
import dataclasses
import pathlib
import time
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging
from clu import parameter_overview
from flax import nnx

from trainer import ema, validation
from trainer.errors import CheckpointError, DataError, TrainingDiverged, WorkdirError
from trainer.io import storage
from trainer.io import workdir as workdir_lib
from trainer.io.checkpoints import Checkpoints, count_non_finite
from trainer.io.metrics_io import make_writers
from trainer.io.workdir_lock import make_lock
from trainer.observe import observe_config, profiling, wandb_log
from trainer.observe.model_flops import ModelFlops
from trainer.observe.step_cost import Utilisation
from trainer.optim import describe_frozen, describe_weight_decay
from trainer.partitioning import Devices, check_batch_size, global_batch, replicated
from trainer.run_step import RunStep, build_step
from trainer.state import ModelParts, make_eval_step, train_metrics
from trainer.stop import StopRequest
from trainer.task import Task, load_task


@dataclasses.dataclass
class TrainResult:
  step: int
  interrupted: bool
  eval_metrics: dict[str, float]


def evaluate_params(
  task: Task,
  parts: ModelParts,
  params,
  split: str,
  mesh,
  batch_size: int,
  eval_step,
  output_dir: pathlib.Path | None = None,
) -> dict[str, float | str]:
  """Metrics of ``params`` on a whole split (every example counted once), each batch by ``eval_step``
  (``trainer.state.make_eval_step``); ``batch_size`` is checked against ``mesh`` already."""
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


def evaluate_splits(
  task: Task, parts: ModelParts, params, config, mesh, eval_step, output_dir: pathlib.Path | None = None
) -> dict[str, dict[str, float | str]]:
  """``{split: metrics}`` for each split an evaluation covers: ``config.eval_splits``, else ``eval_split``."""
  splits = observe_config.eval_splits(config) or (config.eval_split,)
  return {
    split: evaluate_params(task, parts, params, split, mesh, config.eval_batch_size, eval_step, output_dir)
    for split in splits
  }


def named_metrics(config, per_split: dict[str, dict]) -> dict:
  """One evaluation's metrics, ``{split: {name: value}}``, as written: ``<split>_<name>`` for each of
  ``eval_splits``; without them, the one split's names as they are."""
  if not observe_config.eval_splits(config):
    (metrics,) = per_split.values()
    return dict(metrics)
  return {f'{split}_{name}': value for split, metrics in per_split.items() for name, value in metrics.items()}


def _format(metrics: dict[str, Any]) -> str:
  return ' '.join(
    f'{name} {value:.4g}' for name, value in sorted(metrics.items()) if not isinstance(value, str)
  )


def _lock_workdir(workdir):
  """Process 0 locks the workdir; every process raises if it could not."""
  lock = make_lock(workdir)
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
  """The progress line: step, training metrics, steps/s, examples/s, the model FLOPs utilisation
  (where ``trainer.observe.step_cost.Utilisation`` knows the peak: ``MFU 41.2%``, ``mfu`` in ``metrics.jsonl``)
  and ETA.

  The rate counts training steps only, on training time only: the clock starts once the run's
  first step has compiled and run; the time of evaluations and checkpoint saves is left out, and
  so is every later step that compiles (the first of each new batch shape, such as a
  translator's new batch width), so throughput columns mean what they say. Work queued by
  counted steps is waited for before leaving time out, so it stays counted. The data
  pipeline's time is training time.

  Not clu's ``ReportProgress``: it puts its line in the work unit's notes (only
  logged at INFO locally, which the command lines quiet), never fires on its first
  call, has no examples/s, counts evaluations in its rate, and writes ``steps_per_sec``
  and ``uptime`` as records of their own in ``metrics.jsonl`` rather than beside the loss.
  """

  def __init__(self, num_steps: int, batch_size: int):
    self.num_steps, self.batch_size = num_steps, batch_size
    self.restart()

  def restart(self) -> None:
    """Starts the clock again with no step counted."""
    self._started, self._steps, self._flops, self._left_out_seconds = time.perf_counter(), 0, 0.0, 0.0

  def count_step(self, flops: float = 0.0) -> None:
    """One more step, of ``flops`` FLOPs per device (``trainer.observe.step_cost.Utilisation``; 0: not known)."""
    self._steps += 1
    self._flops += flops

  @contextlib.contextmanager
  def left_out(self, pending):
    """Time spent inside is not training time; ``pending`` (what the counted steps compute) is
    waited for first."""
    jax.block_until_ready(pending)
    started = time.perf_counter()
    try:
      yield
    finally:
      self._left_out_seconds += time.perf_counter() - started

  def steps_per_sec(self) -> float | None:
    """Counted steps per second of training time since the last call; ``None`` if none counted."""
    seconds = time.perf_counter() - self._started - self._left_out_seconds
    rate = self._steps / max(seconds, 1e-9) if self._steps else None
    self.flops_per_sec = self._flops / max(seconds, 1e-9)  # per device, over the same steps and time
    self.restart()
    return rate

  def line(self, step: int, values: dict[str, float]) -> str:
    shown = ' '.join(
      f'{name} {value:.4g}' for name, value in sorted(values.items()) if name not in ('steps_per_sec', 'mfu')
    )
    rate = values.get('steps_per_sec')
    if rate is None:
      return f'step {step}/{self.num_steps} | {shown} | steps/s: none yet (a compiling step is not counted)'
    eta = (self.num_steps - step) / max(rate, 1e-9)
    mfu = f', MFU {100 * values["mfu"]:.1f}%' if 'mfu' in values else ''
    return (
      f'step {step}/{self.num_steps} | {shown} | {rate:.2f} steps/s, '
      f'{rate * self.batch_size:.0f} examples/s{mfu} (training only) | ETA {eta:.0f}s'
    )


def _resume(config, workdir: pathlib.Path, init) -> tuple[Checkpoints, int, Any, ModelParts]:
  """The workdir's checkpoints (kept: ``keep_checkpoints`` latest and the best), the step to start
  from, the state and the model's parts: restored from the latest intact checkpoint into the
  abstract state (no random one is made first), else created."""
  best_metric = observe_config.checkpoint_metric(config)
  checkpoints = Checkpoints(
    workdir, keep=config.keep_checkpoints, best_metric=best_metric, best_mode=config.best_mode
  )
  start_step = checkpoints.latest_step() or 0
  if not start_step:
    return checkpoints, 0, *init.create()
  state = checkpoints.restore(start_step, init.abstract_state)
  logging.info('Resumed from the checkpoint at step %d.', start_step)
  return checkpoints, start_step, state, init.parts(init.rest())


class _Records:
  """What a run writes besides checkpoints: the workdir's account of the run, once at the start,
  then the training and evaluation metrics; lines are printed by process 0 alone."""

  def __init__(self, config, workdir: pathlib.Path, task: Task, params):
    self.is_main = jax.process_index() == 0
    if self.is_main:
      workdir_lib.save_config(workdir, config)
      workdir_lib.record_model_facts(workdir, task)
      if task.prediction is not None:
        workdir_lib.save_class_names(workdir, task.prediction.class_names())
      parameter_overview.log_parameter_overview(nnx.to_pure_dict(params))
      print(describe_weight_decay(config.optimizer, params), flush=True)
      if frozen_line := describe_frozen(config.optimizer, params):
        print(frozen_line, flush=True)
    self.writers = make_writers(
      workdir, self.is_main, wandb_log.make_writers(config, workdir) if self.is_main else None
    )

  def say(self, line: str) -> None:
    if self.is_main:
      print(line, flush=True)

  def closers(self) -> list:
    return [writer.close for writer in self.writers.values()]


class _TrainMetrics:
  """The training metrics since the last report: gathered by the steps, then written and printed
  with the rate; a non-finite loss or gradient norm stops the run."""

  def __init__(
    self, task: Task, mesh, progress: _Progress, utilisation: Utilisation | None, records: _Records
  ):
    self.task, self.mesh, self.records = task, mesh, records
    self.progress, self.utilisation = progress, utilisation
    self.pending = None

  def gathering(self):
    """The metrics the next step adds to (empty after a report)."""
    if self.pending is None:
      self.pending = jax.device_put(train_metrics(self.task).empty(), replicated(self.mesh))
    return self.pending

  def report(self, step: int, stop_diverged) -> None:
    if self.pending is None:
      return
    values = {name: float(value) for name, value in self.pending.compute().items()}
    self.pending = None
    for name, what in (('loss', 'Training loss'), ('grad_norm', 'The gradient norm')):
      if name in values and not np.isfinite(values[name]):
        stop_diverged(f'{what} became {values[name]} by step {step}')
    rate = self.progress.steps_per_sec()
    if rate is not None:
      values['steps_per_sec'] = rate
      if self.utilisation:
        values['mfu'] = self.utilisation.fraction(self.progress.flops_per_sec)
    self.records.writers['train'].write_scalars(step, values)
    self.records.say(self.progress.line(step, values))


class _Evaluation:
  """Metrics of the parameters on ``config.eval_splits`` (else ``eval_split``) and, where the state
  has one, of their moving average (names prefixed ``ema_``, ``trainer/ema.py``); the files a task
  writes (hypotheses) are the parameters'."""

  def __init__(self, config, workdir: pathlib.Path, task: Task, parts: ModelParts, mesh, params_sharding):
    self.config, self.workdir, self.task, self.parts, self.mesh = config, workdir, task, parts, mesh
    self.eval_step = make_eval_step(task, parts, mesh, params_sharding)
    self.last: dict[str, float] = {}
    self.step = None  # the step of ``last``

  def of_state(self, state) -> dict[str, dict[str, float | str]]:
    """``{split: metrics}``."""
    per_split = evaluate_splits(
      self.task, self.parts, state.params, self.config, self.mesh, self.eval_step, self.workdir
    )
    if state.ema_params is not None:
      averaged = evaluate_splits(
        self.task, self.parts, state.ema_params, self.config, self.mesh, self.eval_step
      )
      for split, metrics in averaged.items():
        per_split[split].update({ema.METRIC_PREFIX + name: value for name, value in metrics.items()})
    return per_split

  def run(self, step: int, state, records: _Records) -> None:
    """Evaluates, then writes and prints the metrics."""
    per_split = self.of_state(state)
    results = named_metrics(self.config, per_split)
    self.last = {name: value for name, value in results.items() if not isinstance(value, str)}
    self.step = step
    texts = {name: value for name, value in results.items() if isinstance(value, str)}
    records.writers['eval'].write_scalars(step, self.last)
    if texts:
      records.writers['eval'].write_texts(step, texts)
    for split, metrics in per_split.items():
      records.say(f'eval {split} at step {step}: ' + _format(metrics))

  def metrics_at(self, step: int) -> dict[str, float] | None:
    """The metrics of an evaluation at ``step`` (kept with its checkpoint, for keep-best), else ``None``."""
    return self.last if self.step == step else None


class _Saving:
  """The one place that saves: once per step, never a state with a non-finite value; a run that
  diverged stops, naming the last good checkpoint."""

  def __init__(self, checkpoints: Checkpoints, start_step: int):
    self.checkpoints = checkpoints
    self.saved_step = start_step or None

  def done_at(self, step: int) -> bool:
    return self.saved_step == step

  def save(
    self, step: int, state, metrics: dict[str, float] | None, reason: str, progress: _Progress
  ) -> None:
    if count_non_finite(state):
      self.stop_diverged(f'The parameters or optimizer state became non-finite by step {step}')
    logging.info('Saving checkpoint %d (%s).', step, reason)
    with progress.left_out(state):
      self.checkpoints.save(step, state, metrics=metrics)
    self.saved_step = step

  def stop_diverged(self, what: str) -> None:
    self.checkpoints.wait()
    last = self.checkpoints.latest_step()
    if last is None:
      kept = (
        f'No checkpoint has been saved yet (none in {self.checkpoints.directory}); '
        'a rerun starts from the beginning.'
      )
    else:
      kept = f'The last good checkpoint (step {last}) is kept in {self.checkpoints.directory}.'
    raise TrainingDiverged(f'{what}; stopped. {kept}')


class _Training:
  """One run: resumed or started, then stepped, its progress reported, evaluated and saved, each by
  the part above that does it."""

  def __init__(self, config, workdir: pathlib.Path, task: Task, run_step: RunStep, num_steps: int):
    self.config, self.workdir, self.task, self.num_steps = config, workdir, task, num_steps
    self.mesh = run_step.mesh
    checkpoints, self.start_step, self.state, self.parts = _resume(config, workdir, run_step.init)
    self.step = self.start_step
    self.records = _Records(config, workdir, task, self.state.params)
    self.train_step = run_step.train_step(self.parts)
    self.evaluation = _Evaluation(
      config, workdir, task, self.parts, self.mesh, run_step.init.state_sharding.params
    )
    self.saving = _Saving(checkpoints, self.start_step)
    self.batches = task.train_batches(
      batch_size=config.batch_size,
      seed=config.seed,
      start_step=self.start_step,
      process_index=jax.process_index(),
      process_count=jax.process_count(),
    )
    self.utilisation = Utilisation.of_run(  # None: no known peak
      config, jax.devices()[0].device_kind, lambda: ModelFlops.of_task(config, task, num_steps)
    )
    self.progress = _Progress(num_steps, config.batch_size)
    self.train_metrics = _TrainMetrics(task, self.mesh, self.progress, self.utilisation, self.records)
    self.compiled_shapes = set()
    self.step_flops = {}  # batch shapes -> FLOPs per device of a step, where the utilisation is shown
    self.profiler = profiling.StepProfiler(
      observe_config.profile_steps(config), workdir, self.records.is_main
    )

  def train_one_step(self) -> None:
    """One step; a step whose batch shapes are new compiles, and its time is left out of the rate."""
    metrics = self.train_metrics.gathering()
    batch = global_batch(next(self.batches), self.mesh)
    shapes = tuple(sorted((name, value.shape, str(value.dtype)) for name, value in batch.items()))
    if shapes in self.compiled_shapes:
      self.state, self.train_metrics.pending = self.train_step(self.state, metrics, batch)
      self.progress.count_step(self.step_flops.get(shapes, 0.0))
    else:
      with self.progress.left_out(self.state):
        if self.utilisation:
          self.step_flops[shapes] = self.utilisation.flops_of(self.train_step, self.state, metrics, batch)
        self.state, self.train_metrics.pending = self.train_step(self.state, metrics, batch)
        jax.block_until_ready(self.state)
      if not self.compiled_shapes:  # the run's first step: start-up ends here
        self.progress.restart()
      self.compiled_shapes.add(shapes)
    self.step += 1

  def report_progress(self) -> None:
    self.train_metrics.report(self.step, self.saving.stop_diverged)

  def evaluate(self) -> None:
    self.report_progress()
    with self.progress.left_out(self.state):
      self.evaluation.run(self.step, self.state, self.records)

  def maybe_save(self, reason: str) -> None:
    if self.saving.done_at(self.step):
      return
    self.report_progress()
    self.saving.save(self.step, self.state, self.evaluation.metrics_at(self.step), reason, self.progress)

  def run(self, stop: StopRequest) -> TrainResult:
    config = self.config
    while self.step < self.num_steps:
      self.profiler.before_step(self.step + 1, self.state)
      self.train_one_step()
      step = self.step
      if self.profiler.window_ends(step):
        with self.progress.left_out(self.state):
          self.profiler.stop()
      if step % config.log_every_steps == 0:
        self.report_progress()
      if step % config.eval_every_steps == 0 or step == self.num_steps:
        self.evaluate()
        self.maybe_save('evaluation')
      elif step % config.checkpoint_every_steps == 0:
        self.maybe_save('schedule')
      if step < self.num_steps and stop.should_stop(step):
        self.maybe_save('stop')
        self.saving.checkpoints.wait()
        print(
          f'{stop.reason()}: saved a checkpoint at step {step} in {self.saving.checkpoints.directory}; '
          'rerun the same command to resume.',
          flush=True,
        )
        return TrainResult(step=step, interrupted=True, eval_metrics=self.evaluation.last)
    if self.start_step >= self.num_steps:  # already trained: report the final metrics again
      per_split = self.evaluation.of_state(self.state)
      self.evaluation.last = named_metrics(config, per_split)
      evaluations = '; '.join(f'eval {split}: {_format(metrics)}' for split, metrics in per_split.items())
      print(f'already trained to step {self.start_step}; {evaluations}', flush=True)
    return TrainResult(step=self.step, interrupted=False, eval_metrics=self.evaluation.last)

  def close(self) -> None:
    try:
      self.profiler.stop()
      self.saving.checkpoints.wait()
      self.saving.checkpoints.close()
    finally:
      for close in self.records.closers():
        close()

  def close_after_error(self) -> None:
    """Closes what can be closed; the error that ended the run is the one reported, not these."""
    for close in [self.profiler.stop, self.saving.checkpoints.close, *self.records.closers()]:
      try:
        close()
      except Exception as error:  # pylint: disable=broad-except
        logging.info('While closing after an error: %s', error)


def _no_space_error(error: storage.NoSpace, workdir) -> CheckpointError:
  """The one line for a full disk met outside a checkpoint: what was being written, and what is intact."""
  checkpoints = Checkpoints(workdir, read_only=True)
  try:
    return CheckpointError(f'{error}; {checkpoints.intact_phrase()}')
  finally:
    checkpoints.close()


def train_and_evaluate(
  config: ml_collections.ConfigDict, workdir: str | storage.Path, task: Task | None = None
) -> TrainResult:
  """Trains ``config`` in ``workdir`` (resuming what is there); ``task``, if given, is ``load_task(config)``
  built already (a sweep builds each combination's once, to check it, and trains with it)."""
  workdir = storage.as_path(workdir)
  task = task or load_task(config)
  workdir_lib.check_same_identity(workdir, config, task.not_identity_fields)
  num_steps = validation.total_steps(config, task)
  validation.check_profile_steps(config, num_steps)
  validation.check_profile_workdir(config, workdir)
  wandb_log.check_available(config)
  run_step = build_step(config, task, num_steps)
  check_batch_size(config.eval_batch_size, run_step.mesh, 'eval_batch_size')
  task.check_training_data()
  workdir.mkdir(parents=True, exist_ok=True)
  lock = _lock_workdir(workdir)
  try:
    task.prepare(workdir)
    training = None
    try:
      training = _Training(config, workdir, task, run_step, num_steps)
      with StopRequest(sync_every_steps=config.log_every_steps) as stop:
        result = training.run(stop)
      training.close()
      return result
    except BaseException as error:
      if training is not None:
        training.close_after_error()  # the saves in flight end before what is intact is said
      if isinstance(error, storage.NoSpace):
        raise _no_space_error(error, workdir) from error
      raise
  finally:
    lock.release()
