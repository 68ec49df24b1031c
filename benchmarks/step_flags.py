"""The flags the throughput benchmarks share (``benchmarks.vit_throughput``, ``benchmarks.transformer_throughput``).

Importing this module defines them; each benchmark reads their ``.value`` in ``main``.
"""

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
