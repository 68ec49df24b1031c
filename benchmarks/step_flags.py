"""The flags the throughput benchmarks share (``benchmarks.vit_throughput``, ``benchmarks.transformer_throughput``).

Importing this module defines them; each benchmark reads their ``.value`` in ``main``, and
``compile_and_time`` is where ``--flops_only`` stops a benchmark before it compiles.
"""

import json

from absl import flags

from attention.multi_head import ATTENTION_KERNELS

ATTENTION_KERNEL = flags.DEFINE_enum(
  'attention_kernel',
  'auto',
  list(ATTENTION_KERNELS),
  "model.attention_kernel: 'auto' (cuDNN's fused kernel on a GPU), 'fused' or 'explicit' (the einsums).",
)
FLOPS_ONLY = flags.DEFINE_boolean(
  'flops_only', False, "Print the step's FLOPs and parameters as JSON, and time nothing (any machine)."
)
PEAK_TFLOPS = flags.DEFINE_float(
  'peak_tflops',
  0.0,
  "The device's dense peak in TFLOP/s for --dtype, when benchmarks.step_cost does not know it.",
)
PROFILE_DIR = flags.DEFINE_string(
  'profile_dir', None, 'Write a jax.profiler trace of 5 more steps here and print where their time went.'
)


def compile_and_time(steps, count: int):
  """``(compiled step, seconds per step over count steps)`` of ``steps`` (a
  ``benchmarks.step_cost.SyntheticStep``); under ``--flops_only``, prints its FLOPs and parameters
  as JSON instead and returns ``None``, compiling nothing."""
  if FLOPS_ONLY.value:
    print(json.dumps({'flops_per_step': steps.flops, 'parameters': steps.parameters}))
    return None
  compiled = steps.compile()
  return compiled, steps.seconds_per_step(count)
