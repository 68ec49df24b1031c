"""How fast a run trained: the training steps/s that ``train.py`` logged into a workdir's ``metrics.jsonl``.

  python -m benchmarks.train_rate --workdir runs/transformer_multi30k_long
  python -m benchmarks.train_rate --workdir runs/old_run --after_step 250 --up_to_step 1000

Each training line of ``metrics.jsonl`` (every ``log_every_steps``) holds the steps/s of the
interval since the line before it. Since ``469cd51`` that is training time only (compiling steps,
evaluations and checkpoint saves left out); before it, the wall time of the interval, all of that
included. This prints the median, the lowest and the highest of the intervals that end after
``--after_step`` and at or before ``--up_to_step``, and on its last line the numbers as JSON for
``benchmarks.record``. It reads the metrics of older versions' runs too: to compare two commits,
choose intervals with no evaluation or checkpoint in them, after the first (which compiles).
"""

import json
import pathlib
import statistics

from absl import app, flags

_WORKDIR = flags.DEFINE_string('workdir', None, 'A workdir written by train.py.')
_AFTER = flags.DEFINE_integer('after_step', 0, 'Only intervals that end after this step.', lower_bound=0)
_UP_TO = flags.DEFINE_integer(
  'up_to_step', 0, 'Only intervals that end at or before this step (0: all).', lower_bound=0
)
flags.mark_flag_as_required('workdir')


def logged_rates(metrics_file: pathlib.Path, after: int, up_to: int) -> list[tuple[int, float]]:
  """``(step, steps/s)`` of each training line of ``metrics_file`` in ``(after, up_to]``."""
  rates = []
  for number, line in enumerate(metrics_file.read_text().splitlines(), 1):
    try:
      entry = json.loads(line)
    except json.JSONDecodeError:
      raise ValueError(
        f'{metrics_file}, line {number}, is not JSON (a run cut off while writing it?)'
      ) from None
    if entry.get('split') != 'train' or 'steps_per_sec' not in entry:
      continue
    if entry['step'] > after and (not up_to or entry['step'] <= up_to):
      rates.append((entry['step'], float(entry['steps_per_sec'])))
  return rates


def main(argv):
  del argv
  metrics_file = pathlib.Path(_WORKDIR.value) / 'metrics.jsonl'
  if not metrics_file.exists():
    raise app.UsageError(f'{metrics_file} does not exist: is {_WORKDIR.value} a workdir written by train.py?')
  try:
    rates = logged_rates(metrics_file, _AFTER.value, _UP_TO.value)
  except ValueError as error:
    raise app.UsageError(str(error)) from None
  if not rates:
    raise app.UsageError(f'{metrics_file} logs no training steps/s in the steps asked for.')
  values = [rate for _, rate in rates]
  numbers = {'steps_per_second': statistics.median(values), 'min': min(values), 'max': max(values)}
  print(
    f'{len(rates)} logged intervals ending at steps {rates[0][0]}-{rates[-1][0]}: median {numbers["steps_per_second"]:.2f} '
    f'training steps/s ({numbers["min"]:.2f} to {numbers["max"]:.2f})'
  )
  print(json.dumps(numbers))  # the numbers for benchmarks.record


if __name__ == '__main__':
  app.run(main)
