"""Packed against length-bucketed translation batches: padding and training tokens per second.

  python -m benchmarks.packing --workdir runs/transformer_multi30k --data_path PATH/TO/multi30k
  python -m benchmarks.packing --config configs/transformer_scan.py --workdir /tmp/scan_packing --steps 10

Reads the config's training data with the workdir's tokenizers (a workdir the config trained in,
or an empty folder, where they are trained as training does), and for each way of batching
(``data.packing`` False and True) prints the padding share of one epoch's batches (source and
target slots together) and the training throughput: the train step as training builds it
(``trainer.run_step.build_step``) run on the real batches of steps 0, 1, ... (made beforehand, so
the input pipeline is not timed), each batch shape compiled before timing, the two ways timed in
turns of 5 steps (so a shared machine's changing load falls on both alike). Tokens/s counts real
tokens only (source + target, and target alone, as the loss counts them). A packed step holds
``--packed_batch_size`` rows (default: as many as give the bucketed batch's pairs on average).
The last line is the numbers as JSON, for ``records.record``.
"""

from trainer.command_line import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/command_line/host_memory.py

import json
import pathlib
import time

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from seq2seq.packing import padding_fraction
from trainer.partitioning import global_batch, replicated
from trainer.run_step import build_step
from trainer.state import train_metrics
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
_TURN = 5  # steps timed in a row before the other way's turn


def _epoch_batches(task, batch_size: int) -> tuple[list[dict], int]:
  """Every batch of epoch 0 and the number of steps in it."""
  task.train_batches(batch_size=batch_size, seed=0, start_step=0, process_index=0, process_count=1)
  plan = task._training_batches[batch_size]  # pylint: disable=protected-access
  steps = plan._epoch_plan(0, 0)[2] if task.packing else plan.steps_per_epoch  # pylint: disable=protected-access
  return [plan.batch(0, step) for step in range(steps)], steps


def _real_tokens(batch) -> tuple[int, int]:
  return int(np.count_nonzero(batch['src'])), int(np.count_nonzero(batch['tgt_out']))


class _Steps:
  """The train step of one way of batching over its batches, each shape compiled and run once."""

  def __init__(self, config, task, batches: list[dict]):
    run_step = build_step(config, task, num_steps=config.total_steps)
    self.state, parts = run_step.init.create()
    step = run_step.train_step(parts)
    self.metrics = jax.device_put(train_metrics(task).empty(), replicated(run_step.mesh))
    self.batches = [global_batch(batch, run_step.mesh) for batch in batches]
    compiled, self.steps = {}, []
    for batch in self.batches:
      shapes = tuple((name, value.shape) for name, value in sorted(batch.items()))
      if shapes not in compiled:
        compiled[shapes] = step.lower(self.state, self.metrics, batch).compile()
        self.state, self.metrics = compiled[shapes](self.state, self.metrics, batch)  # untimed
      self.steps.append(compiled[shapes])
    jax.block_until_ready(self.state)
    self.seconds = 0.0

  def time(self, first: int, stop: int) -> None:
    """Runs batches ``first .. stop - 1`` and adds their time to ``seconds``."""
    start = time.perf_counter()
    for run, batch in zip(self.steps[first:stop], self.batches[first:stop]):
      self.state, self.metrics = run(self.state, self.metrics, batch)
    jax.block_until_ready(self.state)
    self.seconds += time.perf_counter() - start


def _pairs(batch) -> int:
  if 'tgt_segments' in batch:
    return int(batch['tgt_segments'].max(axis=1).sum())
  return int(np.count_nonzero(batch['tgt_out'][:, 0]))


def main(argv):
  del argv
  config = _CONFIG.value
  if _DATA_PATH.value:
    config.data.path = _DATA_PATH.value
  workdir = pathlib.Path(_WORKDIR.value)
  workdir.mkdir(parents=True, exist_ok=True)
  bucketed_batch_size = config.batch_size
  ways = {}
  for packing in (False, True):
    config = config.copy_and_resolve_references()
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
    config.batch_size = batch_size
    batches, steps = _epoch_batches(task, batch_size)
    timed = batches[: _STEPS.value]
    ways[packing] = dict(
      batch_size=batch_size,
      steps_per_epoch=steps,
      padding=np.mean([padding_fraction(batch) for batch in batches]),
      widths=f'{batches[0]["src"].shape[1]} + {batches[0]["tgt_in"].shape[1]}'
      if packing
      else 'bucket widths',
      tokens=np.sum([_real_tokens(batch) for batch in timed], axis=0),
      pairs=sum(_pairs(batch) for batch in timed),
      steps=_Steps(config, task, timed),
    )
  # Timed in turns of a few steps each, so that a shared machine's changing load falls on both.
  for first in range(0, _STEPS.value, _TURN):
    for way in ways.values():
      way['steps'].time(first, first + _TURN)
  numbers = {}
  for packing, way in ways.items():
    seconds = way['steps'].seconds
    count = len(way['steps'].batches)
    source, target = way['tokens']
    print(
      f'packing={packing}: {way["batch_size"]} rows of {way["widths"]} tokens, '
      f'{way["pairs"] / count / way["batch_size"]:.2f} pairs per row, {way["steps_per_epoch"]} steps per '
      f"epoch; padding {100 * way['padding']:.1f}% of the epoch's source and target slots"
    )
    print(
      f'  train step {seconds / count * 1e3:.0f} ms (steps 0-{count - 1}): {(source + target) / seconds:,.0f} '
      f'real tokens/s (source + target), {target / seconds:,.0f} target tokens/s, '
      f'{way["pairs"] / seconds:.1f} pairs/s'
    )
    numbers['packed' if packing else 'bucketed'] = {
      'rows': way['batch_size'],
      'padding': round(float(way['padding']), 4),
      'step_ms': round(seconds / count * 1e3, 1),
      'tokens_per_s': round(float(source + target) / seconds, 1),
      'target_tokens_per_s': round(float(target) / seconds, 1),
      'pairs_per_s': round(way['pairs'] / seconds, 2),
    }
  print(json.dumps(numbers))  # the numbers of a record (records/record.py)


if __name__ == '__main__':
  app.run(main)
