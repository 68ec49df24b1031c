"""The cost of a teacher: a distillation config's compiled train step timed with its teacher and without.

  python -m benchmarks.distill_step                      # configs/vit_digits_distill.py, teacher runs/vit_digits
  python -m benchmarks.distill_step --config configs/vit_digits_distill.py --rounds 5 --steps 50

Both steps are built as training builds them (``trainer.run_step.build_step``; the teacher's
variables are the task's ``training_constants``), on one real training batch already on the
devices, so it measures the step, not the input pipeline. The two are timed in alternating rounds
of ``--steps`` steps after their compilation; it prints each one's median milliseconds per step and
their ratio.
"""

import statistics
import time

import jax
import ml_collections
from absl import app, flags
from ml_collections import config_flags

from trainer.partitioning import global_batch
from trainer.run_step import build_step
from trainer.state import train_metrics
from trainer.task import load_task

_CONFIG = config_flags.DEFINE_config_file(
  'config', 'configs/vit_digits_distill.py', 'a config with a teacher'
)
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'alternating rounds')
_STEPS = flags.DEFINE_integer('steps', 50, 'steps per round')


def _timed_step(config: ml_collections.ConfigDict):
  """``run(n) -> seconds`` for ``n`` steps of ``config``'s compiled train step (compiled here)."""
  task = load_task(config)
  task.check_training_data()
  batch = next(
    task.train_batches(batch_size=config.batch_size, seed=0, start_step=0, process_index=0, process_count=1)
  )
  run_step = build_step(config, task, num_steps=1000)
  batch = global_batch(batch, run_step.mesh)
  state, parts = run_step.init.create()
  step = run_step.train_step(parts)
  held = {'state': state, 'metrics': train_metrics(task).empty()}

  def run(count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
      held['state'], held['metrics'] = step(held['state'], held['metrics'], batch)
    jax.block_until_ready(held['state'])
    return time.perf_counter() - started

  run(2)  # compiles
  return run


def main(argv):
  del argv
  with_teacher = _CONFIG.value
  if not with_teacher.get('distill', {}).get('teacher'):
    raise app.UsageError('the config has no distill.teacher to time.')
  alone = with_teacher.copy_and_resolve_references()
  alone.distill.teacher = ''
  alone.model.distill_token = False
  runs = {'with its teacher': _timed_step(with_teacher), 'alone': _timed_step(alone)}
  times = {name: [] for name in runs}
  for _ in range(_ROUNDS.value):
    for name, run in runs.items():
      times[name].append(1000 * run(_STEPS.value) / _STEPS.value)
  medians = {name: statistics.median(values) for name, values in times.items()}
  for name, value in medians.items():
    print(f'student step {name}: {value:.2f} ms (median of {_ROUNDS.value} rounds of {_STEPS.value} steps)')
  print(f'ratio: {medians["with its teacher"] / medians["alone"]:.2f}')


if __name__ == '__main__':
  app.run(main)
