"""How fast a run trained: the training steps/s that ``train.py`` logged into a workdir's ``metrics.jsonl``.

  python -m benchmarks.train_rate --workdir runs/transformer_multi30k_long
  python -m benchmarks.train_rate --workdir runs/old_run --after_step 250 --up_to_step 1000

Each training line of ``metrics.jsonl`` (every ``log_every_steps``) holds the steps/s of the
interval since the line before it. Since ``469cd51`` that is training time only (compiling steps,
evaluations and checkpoint saves left out); before it, the wall time of the interval, all of that
included. This prints the median, the lowest and the highest of the intervals that end after
``--after_step`` and at or before ``--up_to_step``, and on its last line the numbers as JSON for
``records.record``. It reads the metrics of older versions' runs too: to compare two commits,
choose intervals with no evaluation or checkpoint in them, after the first (which compiles).
"""

import json
import pathlib
import statistics

from absl import app, flags

from trainer.io.metrics_io import read_metrics

_WORKDIR = flags.DEFINE_string('workdir', None, 'A workdir written by train.py.')
_AFTER = flags.DEFINE_integer('after_step', 0, 'Only intervals that end after this step.', lower_bound=0)
_UP_TO = flags.DEFINE_integer(
  'up_to_step', 0, 'Only intervals that end at or before this step (0: all).', lower_bound=0
)
flags.mark_flag_as_required('workdir')


def logged_rates(workdir: str, after: int, up_to: int) -> list[tuple[int, float]]:
  """``(step, steps/s)`` of each training line of ``workdir``'s ``metrics.jsonl`` in ``(after, up_to]``."""
  return [
    (entry['step'], float(entry['steps_per_sec']))
    for entry in read_metrics(workdir)
    if entry.get('split') == 'train'
    and 'steps_per_sec' in entry
    and entry['step'] > after
    and (not up_to or entry['step'] <= up_to)
  ]


def main(argv):
  del argv
  metrics_file = pathlib.Path(_WORKDIR.value) / 'metrics.jsonl'
  if not metrics_file.exists():
    raise app.UsageError(f'{metrics_file} does not exist: is {_WORKDIR.value} a workdir written by train.py?')
  try:
    rates = logged_rates(_WORKDIR.value, _AFTER.value, _UP_TO.value)
  except json.JSONDecodeError as error:
    raise app.UsageError(
      f'{metrics_file} has a line that is not JSON (a run cut off while writing it?): {error}'
    ) from None
  if not rates:
    raise app.UsageError(f'{metrics_file} logs no training steps/s in the steps asked for.')
  values = [rate for _, rate in rates]
  numbers = {'steps_per_second': statistics.median(values), 'min': min(values), 'max': max(values)}
  print(
    f'{len(rates)} logged intervals ending at steps {rates[0][0]}-{rates[-1][0]}: median {numbers["steps_per_second"]:.2f} '
    f'training steps/s ({numbers["min"]:.2f} to {numbers["max"]:.2f})'
  )
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  app.run(main)
