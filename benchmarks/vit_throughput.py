"""Training throughput of a ViT through the project's own train step, in images per second.

  python -m benchmarks.vit_throughput                 # width 192, depth 6, 3 heads, patch 4, 32x32x3, batch 128
  python -m benchmarks.vit_throughput --grad_accum_steps 4   # the same update as 4 micro-batches of 32
  XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-individual_dot \
    python -m benchmarks.vit_throughput --grad_accum_steps 4   # and XLA's matmuls done by Eigen
  python -m benchmarks.vit_throughput --dtype bfloat16 --batch_size 256
  python -m benchmarks.vit_throughput --ema_decay 0.9999   # with a moving average of the parameters
  python -m benchmarks.vit_throughput --variant B/16 --image_size 224 --num_classes 1000 \
    --dtype bfloat16 --batch_size 256 --profile_dir /tmp/vit_b16_trace   # an accelerator's numbers
  python -m benchmarks.vit_throughput --variant B/16 --image_size 224 --num_classes 1000 \
    --dtype bfloat16 --batch_size 256 --attention_pad_multiple 64   # 197 tokens padded to 256 for cuDNN

The second and third lines compute the same update as the first, up to float rounding: micro-batches
shrink the scratch memory that XLA:CPU allocates afresh each step (the benchmark prints it; the
accumulation is the trainer's own, ``--config.grad_accum_steps=4`` for ``train.py``), and the flag
moves most matmuls from YNNPACK to Eigen. What each gave, on which CPU, and why neither is a default:
docs/results.md ("Training throughput on a CPU") and docs/performance.md ("CPU comparison with timm").

Times the compiled train step (forward, backward, AdamW update) on random images
already on the device, so it measures the model, not the input pipeline; with
``--image_folder``, also times the input pipeline alone on that folder. The first
steps (compilation) are excluded. It also prints the step's FLOPs from XLA's cost analysis
(``trainer.observe.model_flops``), how many of cuDNN's fused attention kernels the step
calls (``--attention_kernel`` chooses), and, on a device whose peak it knows (``benchmarks/step_cost.py``) or with ``--peak_tflops``,
the model FLOPs utilisation; ``--profile_dir`` writes a ``jax.profiler`` trace of a few more
steps and prints where their time went, op by op. Like ``train.py``, it re-executes itself once
with glibc's huge-page malloc (``trainer/command_line/host_memory.py``).
"""

import json
import time

from trainer.command_line import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/command_line/host_memory.py

import numpy as np
from absl import app, flags

from attention.layers import REMAT_POLICIES
from benchmarks import step_flags
from benchmarks.step_cost import SyntheticStep, cost_report, profile_and_summarise
from benchmarks.synthetic_tasks import SyntheticImageTask
from configs.common import trainer_config
from vit.input_pipeline import default_data_config, load_image_data
from vit.model import model_section

_BATCH = flags.DEFINE_integer('batch_size', 128, 'Global batch size.')
_VARIANT = flags.DEFINE_string(
  'variant', 'custom', "A ViT variant such as 'B/16' (vit.model.VARIANTS); 'custom' uses the flags below."
)
_IMAGE_SIZE = flags.DEFINE_integer('image_size', 32, 'Height and width of the random square images.')
_NUM_CLASSES = flags.DEFINE_integer('num_classes', 10, 'Classes of the classifier head.')
_WIDTH = flags.DEFINE_integer('width', 192, 'Model width.')
_DEPTH = flags.DEFINE_integer('depth', 6, 'Number of encoder blocks.')
_HEADS = flags.DEFINE_integer('heads', 3, 'Attention heads.')
_MLP = flags.DEFINE_integer('mlp_dim', 768, 'MLP hidden width.')
_PATCH = flags.DEFINE_integer('patch', 4, 'Patch size.')
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'], 'Compute dtype.')
_STEPS = flags.DEFINE_integer('steps', 20, 'Timed steps.')
_SCAN = flags.DEFINE_boolean('scan_layers', False, 'Scan the encoder over depth (model.scan_layers).')
_REMAT = flags.DEFINE_enum('remat', 'none', list(REMAT_POLICIES), 'Rematerialisation policy (model.remat).')
_PAD_MULTIPLE = flags.DEFINE_integer(
  'attention_pad_multiple',
  0,
  "Pad the fused attention call's tokens to a multiple of this, padded keys masked "
  '(model.attention_pad_multiple; 0 = off): cuDNN trains on no odd length such as 197.',
  lower_bound=0,
)
_GRAD_ACCUM = flags.DEFINE_integer(
  'grad_accum_steps', 1, 'Micro-batches per step (the same update, less memory).'
)
_EMA_DECAY = flags.DEFINE_float(
  'ema_decay', 0.0, 'Keep a moving average of the parameters in the step (config.ema.decay; 0 = off).'
)
_IMAGE_FOLDER = flags.DEFINE_string(
  'image_folder',
  None,
  'Optional root/<split>/<class>/ image folder (e.g. CIFAR-10): also time the input pipeline on it.',
)


def main(argv):
  del argv
  config = trainer_config()
  config.model = model_section({})
  config.model.update(
    variant=_VARIANT.value,
    width=_WIDTH.value,
    depth=_DEPTH.value,
    num_heads=_HEADS.value,
    mlp_dim=_MLP.value,
    patch_size=_PATCH.value,
    dtype=_DTYPE.value,
    scan_layers=_SCAN.value,
    remat=_REMAT.value,
    attention_kernel=step_flags.ATTENTION_KERNEL.value,
    attention_pad_multiple=_PAD_MULTIPLE.value,
  )
  config.update(batch_size=_BATCH.value, grad_accum_steps=_GRAD_ACCUM.value)
  config.ema.decay = _EMA_DECAY.value
  rng = np.random.default_rng(0)
  batch = {
    'image': rng.normal(size=(_BATCH.value, _IMAGE_SIZE.value, _IMAGE_SIZE.value, 3)).astype(np.float32),
    'label': rng.integers(0, _NUM_CLASSES.value, _BATCH.value).astype(np.int32),
  }
  steps = SyntheticStep(config, lambda c: SyntheticImageTask(c, _IMAGE_SIZE.value, _NUM_CLASSES.value), batch)
  if (timed := step_flags.compile_and_time(steps, _STEPS.value)) is None:
    return
  (compiled, seconds), flops, num_params = timed, steps.flops, steps.parameters
  images_per_sec = _BATCH.value / seconds
  model = config.model
  shape = (
    f'variant {model.variant}'
    if model.variant != 'custom'
    else f'width {model.width}, depth {model.depth}, heads {model.num_heads}, mlp {model.mlp_dim}, '
    f'patch {model.patch_size}'
  )
  print(
    f'model: {shape}, {_IMAGE_SIZE.value}x{_IMAGE_SIZE.value}x3, {num_params / 1e6:.2f}M parameters, '
    f'{_DTYPE.value}, batch {_BATCH.value}, scan_layers {_SCAN.value}, remat {_REMAT.value}, '
    f'ema_decay {_EMA_DECAY.value:g}, attention_kernel {step_flags.ATTENTION_KERNEL.value}, '
    f'attention_pad_multiple {_PAD_MULTIPLE.value}'
  )
  cost_lines, cost_numbers = cost_report(compiled, flops, seconds, _DTYPE.value, step_flags.PEAK_TFLOPS.value)
  print('\n'.join(cost_lines))
  scratch_bytes = compiled.memory_analysis().temp_size_in_bytes
  print(f'scratch memory of the step: {scratch_bytes / 1e9:.2f} GB')
  print(f'train step: {seconds * 1e3:.1f} ms/step, {images_per_sec:.1f} images/s')
  numbers = {
    'images_per_second': images_per_sec,
    'ms_per_step': seconds * 1e3,
    'parameters': num_params,
    'scratch_bytes': scratch_bytes,
    **cost_numbers,
  }
  if step_flags.PROFILE_DIR.value:
    profile_text, numbers['profile'] = profile_and_summarise(steps.run, step_flags.PROFILE_DIR.value, steps=5)
    print(profile_text)
  if _IMAGE_FOLDER.value:
    data_config = default_data_config()
    data_config.update(source='folder', path=_IMAGE_FOLDER.value)
    data_config.augment.update(crop_padding=4, flip=True)
    data = load_image_data(data_config)
    batches = data.train_batches(batch_size=_BATCH.value, seed=0)
    next(batches)
    start = time.perf_counter()
    for _ in range(_STEPS.value):
      next(batches)
    pipeline_ms = (time.perf_counter() - start) / _STEPS.value * 1e3
    print(
      f'input pipeline ({data.image_shape} images, crop + flip, prefetched): {pipeline_ms:.2f} ms/batch, '
      f'{_BATCH.value / pipeline_ms * 1e3:.0f} images/s'
    )
    numbers['input_pipeline_images_per_second'] = _BATCH.value / pipeline_ms * 1e3
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  app.run(main)
