"""What freezing parameters saves a train step: the step with ``optimizer.frozen`` against the same
step training every parameter.

  python -m benchmarks.frozen_step                       # the linear probe of configs/vit_digits_finetune.py
  python -m benchmarks.frozen_step --config configs/vit_digits_finetune.py '--frozen=^(?!head\\.)' --rounds 5 --steps 30

The train step takes frozen parameters as constants (``trainer/state.py``): it computes no gradient
for them, so the backward pass stops where nothing trainable is left below it. The other step is the
config with nothing frozen, which computes every gradient, as a step that zeroed the frozen ones
afterwards would. Both are built as training builds them (``benchmarks.step_cost.ConfigStep``) from
freshly initialised parameters (``init_from`` is not read: the starting values do not change what a
step computes) and run on one real training batch. It prints each step's FLOPs (XLA's cost analysis of the compiled step) and its
median milliseconds over alternating rounds of ``--steps`` steps, the ratios, and on its last line
the numbers as JSON for ``benchmarks.record``.
"""

import json
import statistics

from absl import app, flags
from ml_collections import config_flags

from benchmarks.step_cost import ConfigStep
from trainer.optim import describe_frozen

_CONFIG = config_flags.DEFINE_config_file('config', 'configs/vit_digits_finetune.py', 'the run to time')
_FROZEN = flags.DEFINE_string(
  'frozen', r'^(?!head\.)', "the parameters to freeze (optimizer.frozen); default: all but the head's"
)
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'alternating rounds')
_STEPS = flags.DEFINE_integer('steps', 30, 'steps per round')


def main(argv):
  del argv
  if not _FROZEN.value:
    raise app.UsageError('--frozen is empty: name the parameters to freeze (a regular expression).')
  frozen = _CONFIG.value.copy_and_resolve_references()
  frozen.optimizer.frozen = _FROZEN.value
  if 'init_from' in frozen:
    frozen.init_from.path = ''  # the starting values do not change what a step computes
  trained = frozen.copy_and_resolve_references()
  trained.optimizer.frozen = ''
  steps = {'frozen': ConfigStep(frozen), 'trained': ConfigStep(trained)}
  print(describe_frozen(frozen.optimizer, steps['frozen'].state.params))
  times = {name: [] for name in steps}
  for _ in range(_ROUNDS.value):
    for name, step in steps.items():
      times[name].append(1000 * step.run(_STEPS.value) / _STEPS.value)
  numbers = {}
  for name, step in steps.items():
    numbers[f'{name}.flops_per_step'] = step.compiled_flops()
    numbers[f'{name}.step_ms'] = round(statistics.median(times[name]), 2)
    numbers[f'{name}.step_ms_min'] = round(min(times[name]), 2)
    numbers[f'{name}.step_ms_max'] = round(max(times[name]), 2)
  numbers['flops_ratio'] = round(numbers['trained.flops_per_step'] / numbers['frozen.flops_per_step'], 3)
  numbers['time_ratio'] = round(numbers['trained.step_ms'] / numbers['frozen.step_ms'], 3)
  print(f'medians of {_ROUNDS.value} alternating rounds of {_STEPS.value} steps, batch {frozen.batch_size}:')
  for name, what in (('frozen', f"frozen '{_FROZEN.value}'"), ('trained', 'every parameter trained')):
    print(
      f'  {what}: {numbers[f"{name}.flops_per_step"] / 1e6:,.0f} MFLOPs, {numbers[f"{name}.step_ms"]:.2f} ms a step'
    )
  print(f'  every parameter trained over frozen: {numbers["flops_ratio"]:.3f} times the FLOPs, '
        f'{numbers["time_ratio"]:.3f} times the time')
  print(json.dumps(numbers))  # the numbers for benchmarks.record


if __name__ == '__main__':
  app.run(main)
