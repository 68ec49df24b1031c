"""Packed against length-bucketed translation batches: padding and training tokens per second.

  python -m benchmarks.packing --workdir runs/transformer_multi30k --data_path PATH/TO/multi30k
  python -m benchmarks.packing --config configs/transformer_scan.py --workdir /tmp/scan_packing --steps 10

Reads the config's training data with the workdir's tokenizers (a workdir the config trained in,
or an empty folder, where they are trained as training does), and for each way of batching
(``data.packing`` False and True) prints the padding share of one epoch's batches (source and
target slots together) and the training throughput: the project's train step run on the real
batches of steps 0, 1, ... (made beforehand, so the input pipeline is not timed), each batch shape
compiled before timing; tokens/s counts real tokens only (source + target, and target alone, as
the loss counts them). A packed step holds ``--packed_batch_size`` rows (default: as many as give
the bucketed batch's pairs on average).
"""

from trainer import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/host_memory.py

import pathlib
import time

import jax
import numpy as np
from absl import app, flags
from flax import nnx
from ml_collections import config_flags

from seq2seq.packing import padding_fraction
from trainer.optim import make_optimizer
from trainer.partitioning import global_batch, make_mesh, replicated
from trainer.state import ModelParts, TrainState, make_train_step, train_metrics
from trainer.task import load_task

_CONFIG = config_flags.DEFINE_config_file(
  'config', 'configs/transformer_multi30k.py', 'A translation config.'
)
_WORKDIR = flags.DEFINE_string(
  'workdir', None, 'Where the tokenizers are (or are trained into).', required=True
)
_DATA_PATH = flags.DEFINE_string('data_path', None, 'Overrides config.data.path.')
_STEPS = flags.DEFINE_integer('steps', 30, 'Timed steps for each way of batching.')
_PACKED_BATCH_SIZE = flags.DEFINE_integer('packed_batch_size', 0, 'Rows of a packed batch (0: as above).')


def _epoch_batches(task, batch_size: int) -> tuple[list[dict], int]:
  """Every batch of epoch 0 and the number of steps in it."""
  task.train_batches(batch_size=batch_size, seed=0, start_step=0, process_index=0, process_count=1)
  plan = task._training_batches[batch_size]  # pylint: disable=protected-access
  steps = plan._epoch_plan(0, 0)[2] if task.packing else plan.steps_per_epoch  # pylint: disable=protected-access
  return [plan.batch(0, step) for step in range(steps)], steps


def _real_tokens(batch) -> tuple[int, int]:
  return int(np.count_nonzero(batch['src'])), int(np.count_nonzero(batch['tgt_out']))


def _throughput(task, batches: list[dict], config) -> float:
  """Seconds per step over ``batches``, after compiling each of their shapes."""
  mesh = make_mesh()
  parts = ModelParts(task.make_model(nnx.Rngs(params=0)))
  optimizer = make_optimizer(config.optimizer, 1000)
  state = jax.device_put(
    TrainState(step=np.int32(0), params=parts.params, opt_state=optimizer.init(parts.params)),
    replicated(mesh),
  )
  step = make_train_step(task, parts, optimizer, mesh, seed=0)
  metrics = jax.device_put(train_metrics(task).empty(), replicated(mesh))
  device_batches = [global_batch(batch, mesh) for batch in batches]
  compiled, steps = {}, []
  for batch in device_batches:
    shapes = tuple((name, value.shape) for name, value in sorted(batch.items()))
    if shapes not in compiled:
      compiled[shapes] = step.lower(state, metrics, batch).compile()
      state, metrics = compiled[shapes](state, metrics, batch)  # the first call of a shape, untimed
    steps.append(compiled[shapes])
  jax.block_until_ready(state)
  start = time.perf_counter()
  for run, batch in zip(steps, device_batches):
    state, metrics = run(state, metrics, batch)
  jax.block_until_ready(state)
  return (time.perf_counter() - start) / len(device_batches)


def main(argv):
  del argv
  config = _CONFIG.value
  if _DATA_PATH.value:
    config.data.path = _DATA_PATH.value
  workdir = pathlib.Path(_WORKDIR.value)
  workdir.mkdir(parents=True, exist_ok=True)
  bucketed_batch_size = config.batch_size
  for packing in (False, True):
    config.data.packing = packing
    task = load_task(config)
    task.prepare(workdir)
    batch_size = bucketed_batch_size
    if packing and _PACKED_BATCH_SIZE.value:
      batch_size = _PACKED_BATCH_SIZE.value
    elif packing:  # rows that hold a bucketed batch's pairs on average
      batches, _ = _epoch_batches(task, 1)
      pairs_per_row = sum(_pairs(batch) for batch in batches) / len(batches)
      batch_size = max(1, round(bucketed_batch_size / pairs_per_row))
    batches, steps = _epoch_batches(task, batch_size)
    padding = np.mean([padding_fraction(batch) for batch in batches])
    timed = batches[: _STEPS.value]
    seconds = _throughput(task, timed, config)
    source, target = np.sum([_real_tokens(batch) for batch in timed], axis=0) / len(timed)
    pairs = sum(_pairs(batch) for batch in timed) / len(timed)
    widths = f'{batches[0]["src"].shape[1]} + {batches[0]["tgt_in"].shape[1]}' if packing else 'bucket widths'
    print(
      f'packing={packing}: {batch_size} rows of {widths} tokens, {pairs / batch_size:.2f} pairs per row, '
      f"{steps} steps per epoch; padding {100 * padding:.1f}% of the epoch's source and target slots"
    )
    print(
      f'  train step {seconds * 1e3:.0f} ms (steps 0-{len(timed) - 1}): {(source + target) / seconds:,.0f} real '
      f'tokens/s (source + target), {target / seconds:,.0f} target tokens/s, {pairs / seconds:.1f} pairs/s'
    )


def _pairs(batch) -> int:
  if 'tgt_segments' in batch:
    return int(batch['tgt_segments'].max(axis=1).sum())
  return int(np.count_nonzero(batch['tgt_out'][:, 0]))


if __name__ == '__main__':
  app.run(main)
