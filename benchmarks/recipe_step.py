"""What a recipe's extras cost a step: the compiled train step alone, with EMA, and with its teacher.

  python -m benchmarks.recipe_step                       # configs/vit_digits_distill.py, teacher runs/vit_digits
  python -m benchmarks.recipe_step --config configs/vit_digits_distill.py --rounds 5 --steps 50 --ema_decay 0.9999

The config must name a teacher (``distill.teacher``). Three steps are built from it as training
builds them (``benchmarks.step_cost.ConfigStep``; the teacher's variables are the task's
``training_constants``): the student alone (no teacher, no distillation token, no EMA), the student
with an EMA of its parameters (``ema.decay``), and the student with its teacher. Each runs on one
real training batch already on the devices, so this measures the step, not the input pipeline.
They are timed in alternating rounds of ``--steps`` steps after their compilation; it prints each
one's median milliseconds per step, the ratios to the student alone, and on its last line the
numbers as JSON for ``records.record``.
"""

import json

import ml_collections
from absl import app, flags
from ml_collections import config_flags

from benchmarks.step_cost import ConfigStep, alternating_rounds

_CONFIG = config_flags.DEFINE_config_file(
  'config', 'configs/vit_digits_distill.py', 'a config with a teacher'
)
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'alternating rounds', lower_bound=1)
_STEPS = flags.DEFINE_integer('steps', 50, 'steps per round', lower_bound=1)
_EMA_DECAY = flags.DEFINE_float('ema_decay', 0.9999, 'the EMA decay of the "with EMA" step')


def _variants(config: ml_collections.ConfigDict) -> dict[str, ml_collections.ConfigDict]:
  """The three configs timed, by the name their numbers carry."""
  alone = config.copy_and_resolve_references()
  alone.distill.teacher = ''
  alone.model.distill_token = False
  alone.ema.decay = 0.0
  with_ema = alone.copy_and_resolve_references()
  with_ema.ema.decay = _EMA_DECAY.value
  with_teacher = config.copy_and_resolve_references()
  with_teacher.ema.decay = 0.0
  return {'alone': alone, 'ema': with_ema, 'teacher': with_teacher}


def main(argv):
  del argv
  config = _CONFIG.value
  if not config.get('distill', {}).get('teacher'):
    raise app.UsageError('the config has no distill.teacher to time.')
  if not 0.0 < _EMA_DECAY.value < 1.0:
    raise app.UsageError(f'--ema_decay must be in (0, 1), got {_EMA_DECAY.value}.')
  steps = {name: ConfigStep(variant) for name, variant in _variants(config).items()}
  numbers = alternating_rounds(steps, _ROUNDS.value, _STEPS.value)
  for name in ('ema', 'teacher'):
    numbers[f'{name}.ratio'] = round(numbers[f'{name}.step_ms'] / numbers['alone.step_ms'], 3)
  print(f'medians of {_ROUNDS.value} alternating rounds of {_STEPS.value} steps, batch {config.batch_size}:')
  print(f'  the student alone: {numbers["alone.step_ms"]:.2f} ms a step')
  print(
    f'  with EMA (decay {_EMA_DECAY.value}): {numbers["ema.step_ms"]:.2f} ms, {numbers["ema.ratio"]:.3f} times'
  )
  print(f'  with its teacher: {numbers["teacher.step_ms"]:.2f} ms, {numbers["teacher.ratio"]:.3f} times')
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  app.run(main)
