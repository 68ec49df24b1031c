"""What freezing parameters saves a train step: the step with ``optimizer.frozen`` against the same
step training every parameter.

  python -m benchmarks.frozen_step             # the linear probe of configs/vit_digits_finetune.py
  python -m benchmarks.frozen_step --config configs/vit_digits_finetune.py \
    '--frozen=^(?!head\\.)' --rounds 5 --steps 30

The train step takes frozen parameters as constants (``trainer/state.py``): it computes no gradient
for them, so the backward pass stops where nothing trainable is left below it. The other step is the
config with nothing frozen, which computes every gradient, as a step that zeroed the frozen ones
afterwards would. Both are built as training builds them (``benchmarks.step_cost.ConfigStep``) from
freshly initialised parameters (``init_from`` is not read: the starting values do not change what a
step computes) and run on one real training batch. It prints each step's FLOPs (XLA's cost
analysis of the compiled step) and its median milliseconds over alternating rounds of ``--steps``
steps, the ratios, and on its last line the numbers as JSON for ``records.record``. The frozen
set is ``--frozen``, else the config's ``optimizer.frozen``, else the linear probe's (all but the
head).
"""

import json

from absl import app, flags
from ml_collections import config_flags

from benchmarks.step_cost import ConfigStep, alternating_rounds
from trainer.errors import UserError
from trainer.optim import describe_frozen

_CONFIG = config_flags.DEFINE_config_file('config', 'configs/vit_digits_finetune.py', 'the run to time')
_FROZEN = flags.DEFINE_string(
  'frozen',
  None,
  "the parameters to freeze (optimizer.frozen); default: the config's, or all but the head's if it has none",
)
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'alternating rounds', lower_bound=1)
_STEPS = flags.DEFINE_integer('steps', 30, 'steps per round', lower_bound=1)
LINEAR_PROBE = r'^(?!head\.)'


def main(argv):
  del argv
  frozen = _CONFIG.value.copy_and_resolve_references()
  pattern = frozen.optimizer.frozen if _FROZEN.value is None else _FROZEN.value
  if _FROZEN.value is None and not pattern:
    pattern = LINEAR_PROBE
  if not pattern:
    raise app.UsageError('--frozen is empty: name the parameters to freeze (a regular expression).')
  frozen.optimizer.frozen = pattern
  if 'init_from' in frozen:
    frozen.init_from.path = ''  # the starting values do not change what a step computes
  trained = frozen.copy_and_resolve_references()
  trained.optimizer.frozen = ''
  try:
    steps = {'frozen': ConfigStep(frozen), 'trained': ConfigStep(trained)}
  except UserError as error:  # a pattern that is no regular expression, or freezes nothing or all
    raise app.UsageError(str(error)) from None
  print(describe_frozen(frozen.optimizer, steps['frozen'].state.params))
  numbers = alternating_rounds(steps, _ROUNDS.value, _STEPS.value)
  for name, step in steps.items():
    numbers[f'{name}.flops_per_step'] = step.compiled_flops()
  numbers['flops_ratio'] = round(numbers['trained.flops_per_step'] / numbers['frozen.flops_per_step'], 3)
  numbers['time_ratio'] = round(numbers['trained.step_ms'] / numbers['frozen.step_ms'], 3)
  print(f'medians of {_ROUNDS.value} alternating rounds of {_STEPS.value} steps, batch {frozen.batch_size}:')
  for name, what in (('frozen', f"frozen '{pattern}'"), ('trained', 'every parameter trained')):
    flops, milliseconds = numbers[f'{name}.flops_per_step'], numbers[f'{name}.step_ms']
    print(f'  {what}: {flops / 1e6:,.0f} MFLOPs, {milliseconds:.2f} ms a step')
  print(
    f'  every parameter trained over frozen: {numbers["flops_ratio"]:.3f} times the FLOPs, '
    f'{numbers["time_ratio"]:.3f} times the time'
  )
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  app.run(main)
