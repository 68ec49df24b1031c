"""What a compiled train step costs, for the benchmark commands: its time, the utilisation, where its time goes.

- ``CompiledSteps``: a compiled train step and its state, run and timed.
- ``ConfigStep``: a config's train step built as training builds it, on one real training batch
  already on the devices, and its compiled FLOPs; ``alternating_rounds`` times several such steps
  in turn.
- ``SyntheticStep``: a config's train step on one synthetic batch, with its model FLOPs and
  parameter count known before it is compiled (the throughput benchmarks).
- ``ModelFlops`` (``trainer.observe.model_flops``): the FLOPs of a train step as the model computes
  them, counted on a plain CPU copy of the step, whichever device, kernels, scanning,
  rematerialisation and micro-batches the timed step runs with.
- ``utilisation``: the model's FLOPs per step per second against the device's
  dense peak (model FLOPs utilisation, MFU), as one line. The peaks (``peak_tflops``) are the
  vendors' dense (no sparsity) tensor-core numbers for bfloat16; other devices and dtypes need
  ``--peak_tflops``.
- ``cudnn_attention_calls``: how many of cuDNN's fused attention kernels the compiled step calls,
  forward and backward: whether cuDNN took the attention (where it refuses, ``attention_kernel``
  ``auto`` runs the explicit path and ``fused`` XLA's implementation). XLA's cost analysis counts no FLOPs for these
  calls, so a step that makes them reports fewer FLOPs than the same step with
  ``attention_kernel='explicit'``; ``ModelFlops`` counts them.
- ``profile_and_summarise``: a ``jax.profiler`` trace of a few steps (open it in TensorBoard's
  profile plugin or Perfetto) and a table of the ops that took the most time, with their times as
  numbers for a record
  (``summarise_trace``): device kernels on a GPU, XLA's thunks on a CPU.

``compiled_flops``, ``program_flops``, ``peak_tflops`` and ``summarise_trace`` live in
``trainer/observe/step_cost.py``, which the training loop's progress line and profiles use too.
"""

import pathlib
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections

from trainer.observe.model_flops import ModelFlops
from trainer.observe.step_cost import (
  compiled_flops,
  op_times,
  op_times_table,
  peak_tflops,
  program_flops,
  summarise_trace,
)
from trainer.partitioning import global_batch, replicated
from trainer.run_step import build_step
from trainer.state import train_metrics
from trainer.task import load_task

__all__ = [
  'CompiledSteps',
  'ConfigStep',
  'SyntheticStep',
  'alternating_rounds',
  'compiled_flops',
  'cost_report',
  'cudnn_attention_calls',
  'ModelFlops',
  'model_flops_utilisation',
  'op_times',
  'peak_tflops',
  'profile_and_summarise',
  'program_flops',
  'summarise_trace',
  'utilisation',
]


class CompiledSteps:
  """A compiled train step and the state it advances: run it, time it, profile it."""

  def __init__(self, compiled, state, metrics, batch):
    self.compiled, self.state, self.metrics, self.batch = compiled, state, metrics, batch

  def run(self, count: int) -> float:
    """Runs ``count`` steps; returns their seconds."""
    start = time.perf_counter()
    for _ in range(count):
      self.state, self.metrics = self.compiled(self.state, self.metrics, self.batch)
    jax.block_until_ready(self.state)
    return time.perf_counter() - start

  def seconds_per_step(self, steps: int, warmup: int = 3) -> float:
    """Mean seconds of ``steps`` steps, after ``warmup`` untimed ones."""
    self.run(warmup)
    return self.run(steps) / steps


class ConfigStep(CompiledSteps):
  """The train step of a run of ``config`` (``trainer.run_step.build_step``, the task's
  ``training_constants`` passed in), compiled on one real training batch already on the devices, so
  that its time is the step's, not the input pipeline's."""

  def __init__(self, config: ml_collections.ConfigDict, num_steps: int = 1000):
    task = load_task(config)
    task.check_training_data()
    batch = next(
      task.train_batches(batch_size=config.batch_size, seed=0, start_step=0, process_index=0, process_count=1)
    )
    run_step = build_step(config, task, num_steps=num_steps)
    state, parts = run_step.init.create()
    super().__init__(
      run_step.train_step(parts), state, train_metrics(task).empty(), global_batch(batch, run_step.mesh)
    )
    self.run(2)  # compiles

  def compiled_flops(self) -> float:
    """The FLOPs of one step, from XLA's cost analysis of the compiled step."""
    return compiled_flops(self.compiled.lower(self.state, self.metrics, self.batch).compile())


class SyntheticStep(CompiledSteps):
  """The train step of ``config`` on one synthetic batch (``host_batch``, the global batch, put on
  the devices) and the task ``make_task(config)`` builds. Its model FLOPs (``flops``) and parameter
  count (``parameters``) are known before ``compile()``, so that a FLOPs-only run compiles no step."""

  def __init__(self, config: ml_collections.ConfigDict, make_task: Callable, host_batch: dict[str, Any]):
    task = make_task(config)
    run_step = build_step(config, task, num_steps=1000)
    state, parts = run_step.init.create()
    self._step = run_step.train_step(parts)
    batch = global_batch(host_batch, run_step.mesh)
    metrics = jax.device_put(train_metrics(task).empty(), replicated(run_step.mesh))
    self.flops = ModelFlops(config, make_task, num_steps=1000)(metrics, batch)
    self.parameters = sum(p.size for p in jax.tree.leaves(state.params))
    super().__init__(None, state, metrics, batch)

  def compile(self):
    """Compiles the step; returns the compiled step, which ``run`` then runs."""
    self.compiled = self._step.lower(self.state, self.metrics, self.batch).compile()
    return self.compiled


def alternating_rounds(steps: dict[str, CompiledSteps], rounds: int, count: int) -> dict[str, float]:
  """Times each of ``steps`` for ``count`` steps per round, in turn, ``rounds`` times, so that the
  machine's drift falls on all alike; returns ``NAME.step_ms`` (the median of the rounds' mean
  milliseconds a step), ``NAME.step_ms_min`` and ``NAME.step_ms_max``."""
  times = {name: [] for name in steps}
  for _ in range(rounds):
    for name, step in steps.items():
      times[name].append(1000 * step.run(count) / count)
  numbers = {}
  for name, values in times.items():
    numbers[f'{name}.step_ms'] = round(statistics.median(values), 2)
    numbers[f'{name}.step_ms_min'] = round(min(values), 2)
    numbers[f'{name}.step_ms_max'] = round(max(values), 2)
  return numbers


# cuDNN's fused attention custom calls in optimised HLO: __cudnn$fmhaSoftmax, __cudnn$fmhaScaleBiasSoftmax,
# __cudnn$fmhaSoftmaxBackward, ... (XLA's names; FP8 variants spell it fhma).
_CUDNN_ATTENTION_TARGET = re.compile(r'custom_call_target="__cudnn\$\w*(?:fmha|fhma)(\w*)"')


def cudnn_attention_calls(compiled) -> dict[str, int]:
  """The cuDNN fused attention kernels that ``compiled`` calls: ``{'forward': n, 'backward': m}``."""
  targets = _CUDNN_ATTENTION_TARGET.findall(compiled.as_text())
  backward = sum('Backward' in target for target in targets)
  return {'forward': len(targets) - backward, 'backward': backward}


def model_flops_utilisation(flops_per_step: float, seconds_per_step: float, peak: float, devices: int = 1):
  """The MFU: the step's FLOPs per second over the peak (TFLOP/s) of ``devices`` devices."""
  return flops_per_step / seconds_per_step / 1e12 / (peak * devices)


def cost_report(compiled, flops: float, seconds: float, dtype: str, peak_override: float = 0.0):
  """What the benchmarks print and record of a timed step: (lines, numbers). The lines name the
  devices, give the achieved TFLOP/s and MFU (``utilisation``) and the cuDNN attention calls; the
  numbers hold the FLOPs, TFLOP/s, those calls and, where the peak is known, the MFU."""
  device_kind, devices = jax.devices()[0].device_kind, jax.device_count()
  calls = cudnn_attention_calls(compiled)
  lines = [
    f'devices: {devices} x {device_kind}',
    f'cost: {utilisation(flops, seconds, device_kind, dtype, peak_override, devices)}',
    f'cuDNN fused attention calls in the step: {calls["forward"]} forward, {calls["backward"]} backward',
  ]
  numbers = {
    'flops_per_step': flops,
    'tflops_per_second': flops / seconds / 1e12,
    'cudnn_attention_forward_calls': calls['forward'],
    'cudnn_attention_backward_calls': calls['backward'],
  }
  peak = peak_override or peak_tflops(device_kind, dtype)
  if peak:
    numbers['model_flops_utilisation'] = model_flops_utilisation(flops, seconds, peak, devices)
  return lines, numbers


def utilisation(
  flops_per_step: float,
  seconds_per_step: float,
  device_kind: str,
  dtype: str,
  peak_override: float = 0.0,
  devices: int = 1,
) -> str:
  """One line: achieved TFLOP/s, and the MFU when the peak of one device is known (``peak_override``
  > 0 sets it); ``flops_per_step`` are the whole step's, on ``devices`` devices."""
  achieved = flops_per_step / seconds_per_step / 1e12
  line = f'{flops_per_step / 1e9:.1f} GFLOPs/step (XLA cost analysis of the model), {achieved:.2f} TFLOP/s'
  if devices > 1:
    line += f' on {devices} devices'
  peak = peak_override or peak_tflops(device_kind, dtype)
  if peak:
    mfu = model_flops_utilisation(flops_per_step, seconds_per_step, peak, devices)
    line += f', model FLOPs utilisation {100 * mfu:.1f}% of {peak:g} TFLOP/s'
    line += ' per device' if devices > 1 else ''
  else:
    line += f' (no known peak for {device_kind!r} in {dtype}: pass --peak_tflops for the utilisation)'
  return line


def profile_and_summarise(
  run_steps: Callable[[int], None], trace_dir: str, steps: int, top: int = 15
) -> tuple[str, dict[str, Any]]:
  """Traces ``run_steps(steps)`` into ``trace_dir``; returns a table of the costliest ops per step, and
  the numbers for a record: the traced step's milliseconds end to end, all ops' milliseconds per
  step (in flight at once, each counted in full) and the ``top`` ops' (``ops.NAME``)."""
  jax.profiler.start_trace(trace_dir)
  try:
    start = time.perf_counter()
    run_steps(steps)
    traced_ms = (time.perf_counter() - start) / steps * 1e3
  finally:
    jax.profiler.stop_trace()
  traces = sorted(pathlib.Path(trace_dir).glob('plugins/profile/*/*.trace.json.gz'))
  if not traces:
    return f'no trace was written under {trace_dir}', {'traced_ms_per_step': traced_ms}
  times, on_device = op_times(traces[-1], steps)  # the trace read once, for the table and the numbers
  numbers = {
    'traced_ms_per_step': traced_ms,
    'ops_ms_per_step': sum(times.values()),
    'ops': dict(list(times.items())[:top]),
  }
  text = op_times_table(times, on_device, top) + f'\n  {traced_ms:9.2f} ms  per traced step, end to end'
  return text, numbers
