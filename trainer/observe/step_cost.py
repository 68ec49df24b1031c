"""What a compiled step costs: its FLOPs, the device's peak, the utilisation, and where a trace's time went.

- ``compiled_flops``: the floating-point operations of one call of a compiled function, from
  XLA's own cost analysis of the optimised program (every matmul, convolution and elementwise
  op it will run, the backward pass and the optimizer update included), not from a formula. For
  a program partitioned over devices it is the FLOPs of one device's part. On a GPU it is too
  low: XLA turns the matmuls into cuBLAS calls and the attention into cuDNN calls (custom calls),
  whose FLOPs its analysis leaves out.
- ``program_flops``: the same analysis of a lowered program, before optimisation, for all devices
  together: every matmul as written. JAX offers it for its built-in CPU backend only, not for the
  GPU and TPU plugins (``jax.stages.Lowered.cost_analysis``), so the model's FLOPs are counted on a
  CPU copy of the step (``trainer.observe.model_flops``).
  Neither count goes through a loop more than once (``scan_layers``, micro-batches).
- ``peak_tflops``: the vendors' dense (no sparsity) tensor-core peaks for bfloat16; other devices
  and dtypes need the peak given (``config.peak_tflops``, the benchmarks' ``--peak_tflops``).
- ``Utilisation``: the model FLOPs utilisation (MFU) of training steps, for the progress line, from
  the model's FLOPs (``trainer.observe.model_flops``).
- ``op_times``, ``op_times_table``, ``summarise_trace``: the time of each op in a ``jax.profiler``
  trace, and a table of those that took the most: device kernels on a GPU, XLA's thunks on a CPU.
"""

import collections
import gzip
import json
import pathlib
import re

import jax
from absl import logging

# Dense bfloat16 tensor-core peaks in TFLOP/s, from the vendors' data sheets (the SXM parts
# unless the name says otherwise). Checked in order: the first key found in
# ``device.device_kind`` wins, so the more specific names come first.
BFLOAT16_PEAK_TFLOPS = (
  ('H100 PCIe', 756.0),
  ('H100', 989.4),
  ('H200', 989.4),
  ('A100', 312.0),
)

# Events that wrap others (the executable, the thunk executor, thread-pool waits): counting
# them would count their children twice. (``end: NAME`` events close asynchronous ops; see
# ``summarise_trace``.)
_WRAPPER_EVENTS = re.compile(
  r'^(\$|ThunkExecutor|SlinkyThreadPool|PjitFunction|CommonPjRt|Handle inputs|ParseArguments)'
)


def compiled_flops(compiled) -> float:
  """FLOPs of one call of ``compiled`` (a ``jax.stages.Compiled``), from XLA's cost analysis."""
  analysis = compiled.cost_analysis()
  if isinstance(analysis, list | tuple):  # older JAX returns one dict per device program
    analysis = analysis[0]
  flops = float(analysis.get('flops', 0.0)) if analysis else 0.0
  if flops <= 0:
    raise RuntimeError('XLA reported no FLOPs for the compiled step; this backend has no cost analysis.')
  return flops


def program_flops(lowered) -> float:
  """FLOPs of one call of ``lowered`` (a ``jax.stages.Lowered`` for the CPU), all devices together,
  from XLA's cost analysis of the program before optimisation."""
  flops = float((lowered.cost_analysis() or {}).get('flops', 0.0))
  if flops <= 0:
    raise RuntimeError(
      'XLA reported no FLOPs for the lowered program; JAX analyses lowered CPU programs only.'
    )
  return flops


def peak_tflops(device_kind: str, dtype: str) -> float | None:
  """The dense peak of ``device_kind`` for ``dtype`` in TFLOP/s, or ``None`` when we do not know it."""
  if dtype != 'bfloat16':
    return None
  for name, tflops in BFLOAT16_PEAK_TFLOPS:
    if name in device_kind:
      return tflops
  return None


class Utilisation:
  """Model FLOPs utilisation of training steps: the model's FLOPs of each step over the time taken.

  ``flops_of`` is asked once per new batch shape, before that shape's first step runs. With a
  ``count_model_flops`` (``trainer.observe.model_flops.ModelFlops``) it counts the model's FLOPs on a
  CPU copy of the step; without one, XLA's count of the compiled step (``compiled_flops``: too low on
  a GPU, and a loop's body counted once), which lowers and compiles the jitted step, and JAX keeps
  that compilation for the call that follows, so nothing is compiled twice.
  """

  def __init__(self, peak_tflops_per_device: float, count_model_flops=None):
    self.peak_tflops = peak_tflops_per_device
    self.count_model_flops = count_model_flops

  @classmethod
  def of_run(cls, config, device_kind: str, make_model_count=None) -> 'Utilisation | None':
    """For a run of ``config`` on ``device_kind``: its ``peak_tflops``, else the known bfloat16 peak
    when ``model.dtype`` is bfloat16; ``None`` when neither gives a peak. ``make_model_count``: a
    function of no arguments that makes the model's count (called only when a peak is known)."""
    model = config.get('model') or {}
    peak = config.get('peak_tflops') or peak_tflops(device_kind, model.get('dtype', ''))
    if not peak:
      return None
    utilisation = cls(float(peak))
    if make_model_count is not None:
      try:
        utilisation.count_model_flops = make_model_count()
      except Exception as error:  # pylint: disable=broad-except  (a diagnostic must not stop the run)
        utilisation.without_model_count(error)
    return utilisation

  def flops_of(self, jitted, state, metrics, batch) -> float:
    """FLOPs of one device's part of ``jitted(state, metrics, batch)``; the arguments are not consumed."""
    if self.count_model_flops is not None:
      try:
        return self.count_model_flops(metrics, batch) / jax.device_count()
      except Exception as error:  # pylint: disable=broad-except  (a diagnostic must not stop the run)
        self.without_model_count(error)
    return compiled_flops(jitted.lower(state, metrics, batch).compile())

  def without_model_count(self, error: Exception) -> None:
    """Falls back to XLA's count of the compiled step, saying why once."""
    self.count_model_flops = None
    logging.warning(
      "The model's FLOPs could not be counted on a CPU copy of the step (%s: %s); the MFU uses XLA's "
      'count of the compiled step, too low on a GPU and with scanned layers or micro-batches.',
      type(error).__name__,
      error,
    )

  def fraction(self, flops_per_second_per_device: float) -> float:
    """The MFU: achieved FLOP/s of one device over its peak."""
    return flops_per_second_per_device / (self.peak_tflops * 1e12)


def op_times(trace_file: pathlib.Path, steps: int) -> tuple[dict[str, float], bool]:
  """The milliseconds per step of each op in a Chrome-format trace, grouped by name, most first, and
  whether they are a GPU's device kernels (else a CPU's host ops).

  On a GPU only the device's own events (kernels) count; on a CPU the host threads' events
  do, less the wrappers. Numbered instances (``fusion.12``) are grouped as ``fusion``.

  XLA:CPU runs some ops asynchronously (Eigen's matmuls, ``dot``): their event covers only the
  launch, and a later ``end: NAME`` event marks when the work finished. An op is counted from
  its start to its ``end:`` event where it has one, so an asynchronous matmul gets its real
  span rather than the launch's microseconds. Ops that run at the same time share the cores
  and are each counted in full, so on a CPU the spans can add up to more than the step took.
  """
  with gzip.open(trace_file) as f:
    events = json.load(f)['traceEvents']
  process_names = {
    e['pid']: e['args'].get('name', '')
    for e in events
    if e.get('ph') == 'M' and e.get('name') == 'process_name'
  }
  device_pids = {pid for pid, name in process_names.items() if '/device:' in name}

  def counted(event):
    if event.get('ph') != 'X' or 'dur' not in event:
      return False
    if device_pids:
      return event['pid'] in device_pids
    return not _WRAPPER_EVENTS.match(event['name'])

  ops = sorted(filter(counted, events), key=lambda e: e['ts'])
  by_name = collections.Counter()
  for name, microseconds in _op_spans(ops):
    by_name[re.sub(r'\.\d+$', '', name)] += microseconds / 1e3
  return {name: ms / steps for name, ms in by_name.most_common()}, bool(device_pids)


def summarise_trace(trace_file: pathlib.Path, steps: int, top: int = 15) -> str:
  """The ops that took the most time per step in a trace (``op_times``), as a table."""
  return op_times_table(*op_times(trace_file, steps), top)


def op_times_table(times: dict[str, float], on_device: bool, top: int = 15) -> str:
  """The ``top`` ops of ``op_times``'s milliseconds per step, with their shares, as a table."""
  total = sum(times.values())
  lines = [f'where the time goes ({"device kernels" if on_device else "host ops"}, ms per step):']
  for name, ms in list(times.items())[:top]:
    lines.append(f'  {ms:9.2f} ms  {100 * ms / max(total, 1e-9):5.1f}%  {name[:100]}')
  lines.append(f'  {total:9.2f} ms  in all (ops in flight at the same time each count in full)')
  return '\n'.join(lines)


def _op_spans(ops):
  """``[name, microseconds]`` per op event (sorted by start), ending at its ``end: NAME`` event if any."""
  spans = []
  not_ended = collections.defaultdict(collections.deque)  # (pid, name) -> (index in spans, start)
  for event in ops:
    name = event['name']
    if name.startswith('end: '):
      waiting = not_ended[event['pid'], name.removeprefix('end: ')]
      if waiting:
        index, start = waiting.popleft()
        spans[index][1] = max(spans[index][1], event['ts'] + event['dur'] - start)
    else:
      not_ended[event['pid'], name].append((len(spans), event['ts']))
      spans.append([name, event['dur']])
  return spans
