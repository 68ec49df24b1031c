"""Training throughput of the translator through the project's own train step, in tokens per second.

  python -m benchmarks.transformer_throughput                      # Transformer-base, float32, 32 x 64 + 64 tokens
  python -m benchmarks.transformer_throughput --dtype bfloat16 --batch_size 384 \
    --profile_dir /tmp/transformer_base_trace                      # an accelerator's numbers
  python -m benchmarks.transformer_throughput --variant tiny --batch_size 8 --length 16 --steps 2

Vaswani et al.'s base model (``seq2seq.model.VARIANTS['base']``: 512 wide, 6 + 6 layers,
8 heads, MLP 2048) with one shared vocabulary of ``--vocab_size`` pieces (37,000 for their
WMT14 English-German), trained with the real translation task's loss on random token ids,
every sentence ``--length`` tokens on both sides (no padding), AdamW, label smoothing 0.1.
The step is compiled once and timed after 3 warm-up steps; it prints source + target tokens
per second, the step's FLOPs from XLA's cost analysis (``trainer.observe.model_flops``), the
cuDNN fused attention calls of the step (``--attention_kernel`` chooses) and, on a device whose peak
``benchmarks/step_cost.py`` knows (or with ``--peak_tflops``), the model FLOPs utilisation.
Vaswani et al. trained on batches of about 25,000 source and 25,000 target tokens.
Its numbers on a GPU: ``benchmarks/gpu_records.sh``; decoding speed is ``benchmarks.decode_speed``.
"""

from trainer.command_line import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/command_line/host_memory.py

import json

import numpy as np
from absl import app, flags

from benchmarks import step_flags
from benchmarks.step_cost import SyntheticStep, cost_report, profile_and_summarise
from benchmarks.synthetic_tasks import SyntheticTranslation
from configs.common import trainer_config
from seq2seq.model import model_section
from seq2seq.tokenizer import PAD_ID

_VARIANT = flags.DEFINE_string('variant', 'base', 'Model variant (seq2seq.model.VARIANTS).')
_VOCAB_SIZE = flags.DEFINE_integer('vocab_size', 37000, 'Shared vocabulary size.')
_BATCH = flags.DEFINE_integer('batch_size', 32, 'Sentence pairs per step (global).')
_LENGTH = flags.DEFINE_integer('length', 64, 'Tokens per source and per target sentence.')
_DTYPE = flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'], 'Compute dtype.')
_STEPS = flags.DEFINE_integer('steps', 10, 'Timed steps.')


def main(argv):
  del argv
  config = trainer_config()
  config.label_smoothing = 0.1
  config.model = model_section({})
  config.model.update(
    variant=_VARIANT.value,
    share_embeddings=True,
    max_length=max(256, _LENGTH.value),
    dtype=_DTYPE.value,
    attention_kernel=step_flags.ATTENTION_KERNEL.value,
  )
  config.batch_size = _BATCH.value
  rng = np.random.default_rng(0)

  def tokens():  # ids of real pieces: never padding
    return rng.integers(PAD_ID + 1, _VOCAB_SIZE.value, (_BATCH.value, _LENGTH.value)).astype(np.int32)

  target = tokens()
  batch = {'src': tokens(), 'tgt_in': np.roll(target, 1, axis=1), 'tgt_out': target}
  steps = SyntheticStep(config, lambda c: SyntheticTranslation(c, _VOCAB_SIZE.value), batch)
  if (timed := step_flags.compile_and_time(steps, _STEPS.value)) is None:
    return
  (compiled, seconds), flops, num_params = timed, steps.flops, steps.parameters
  tokens_per_step = 2 * _BATCH.value * _LENGTH.value
  print(
    f'model: Transformer {_VARIANT.value}, vocabulary {_VOCAB_SIZE.value}, {num_params / 1e6:.1f}M parameters, '
    f'{_DTYPE.value}, batch {_BATCH.value} x ({_LENGTH.value} + {_LENGTH.value}) tokens, '
    f'attention_kernel {step_flags.ATTENTION_KERNEL.value}'
  )
  cost_lines, cost_numbers = cost_report(compiled, flops, seconds, _DTYPE.value, step_flags.PEAK_TFLOPS.value)
  print('\n'.join(cost_lines))
  print(
    f'train step: {seconds * 1e3:.1f} ms/step, {tokens_per_step / seconds:,.0f} tokens/s '
    f'(source + target), {_BATCH.value / seconds:.1f} sentence pairs/s'
  )
  numbers = {
    'tokens_per_second': tokens_per_step / seconds,
    'sentence_pairs_per_second': _BATCH.value / seconds,
    'ms_per_step': seconds * 1e3,
    'parameters': num_params,
    **cost_numbers,
  }
  if step_flags.PROFILE_DIR.value:
    profile_text, numbers['profile'] = profile_and_summarise(steps.run, step_flags.PROFILE_DIR.value, steps=5)
    print(profile_text)
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  app.run(main)
