"""How much the key/value cache speeds up decoding: cached vs uncached beam or greedy search.

  python -m benchmarks.decode_speed       # beam 4, variant small, batch 32, 20 source tokens, 50 output tokens
  python -m benchmarks.decode_speed --beam_size 1 --variant base --batch_size 64

Both searches are compiled once, checked to give the same output, then timed over
``--repeats`` runs (the median is shown). Every sentence decodes exactly
``--output_length`` tokens (no hypothesis ends at EOS), with a randomly initialised model:
the speed does not depend on the weights. The uncached search reruns the decoder over the
whole output buffer at every step; the cached one runs one position per step against the
stored keys and values.
"""

import json
import statistics
import time

from trainer.command_line import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/command_line/host_memory.py

import jax
import numpy as np
from absl import app, flags
from flax import nnx

from seq2seq.architectures import make_translator
from seq2seq.decoding import beam_search, greedy_search
from seq2seq.model import decode_variant

_VARIANT = flags.DEFINE_string('variant', 'small', 'Model variant (seq2seq.model.VARIANTS).')
_VOCAB_SIZE = flags.DEFINE_integer('vocab_size', 8000, 'Shared vocabulary size.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 32, 'Sentences decoded together.')
_SOURCE_LENGTH = flags.DEFINE_integer('source_length', 20, 'Source tokens per sentence.')
_OUTPUT_LENGTH = flags.DEFINE_integer('output_length', 50, 'Tokens decoded per sentence.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed runs of each search after compiling.')
_BEAM_SIZE = flags.DEFINE_integer('beam_size', 4, 'Beam size; 1 times greedy search.')


def _median_seconds(function, src) -> float:
  jax.block_until_ready(function(src))  # compile
  times = []
  for _ in range(_REPEATS.value):
    start = time.perf_counter()
    jax.block_until_ready(function(src))
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def main(argv):
  del argv
  shape = decode_variant(_VARIANT.value)
  section = dict(
    variant=_VARIANT.value, share_embeddings=True, max_length=max(256, _OUTPUT_LENGTH.value), dropout=0.0
  )
  model = make_translator(
    section, source_vocab_size=_VOCAB_SIZE.value, target_vocab_size=_VOCAB_SIZE.value, rngs=nnx.Rngs(0)
  )
  rng = np.random.default_rng(0)
  src = rng.integers(4, _VOCAB_SIZE.value, size=(_BATCH_SIZE.value, _SOURCE_LENGTH.value)).astype(np.int32)
  # The output buffer holds source length + extra + 1 positions; all of them are decoded.
  extra = _OUTPUT_LENGTH.value - 1 - _SOURCE_LENGTH.value
  settings = dict(max_extra_length=extra, eos_id=None)
  if _BEAM_SIZE.value == 1:
    search = 'greedy search'
    cached = jax.jit(lambda s: greedy_search(model, s, **settings))
    uncached = jax.jit(lambda s: greedy_search(model, s, use_cache=False, **settings))
  else:
    search = f'beam search, beam {_BEAM_SIZE.value}'
    cached = jax.jit(lambda s: beam_search(model, s, beam_size=_BEAM_SIZE.value, **settings)[0])
    uncached = jax.jit(
      lambda s: beam_search(model, s, beam_size=_BEAM_SIZE.value, use_cache=False, **settings)[0]
    )
  assert cached(src).shape[1] == _OUTPUT_LENGTH.value
  np.testing.assert_array_equal(cached(src), uncached(src))
  cached_seconds = _median_seconds(cached, src)
  uncached_seconds = _median_seconds(uncached, src)
  print(
    f'{search}, {jax.devices()[0].device_kind}, variant {_VARIANT.value} ({shape["features"]} features, '
    f'{shape["decoder_layers"]} decoder layers), batch {_BATCH_SIZE.value}, source {_SOURCE_LENGTH.value} '
    f'tokens, {_OUTPUT_LENGTH.value} output tokens'
  )
  print(f'cached:   {cached_seconds * 1e3:8.1f} ms per batch')
  print(f'uncached: {uncached_seconds * 1e3:8.1f} ms per batch')
  print(f'speed-up: {uncached_seconds / cached_seconds:.1f}x')
  numbers = {
    'cached_seconds': cached_seconds,
    'uncached_seconds': uncached_seconds,
    'speedup': uncached_seconds / cached_seconds,
  }
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  app.run(main)
