"""Start-up to the first answer of ``predict.py``: what a user waits for after pressing Enter.

  python -m benchmarks.predict_latency --workdir runs/vit_digits digit.png
  python -m benchmarks.predict_latency --workdir runs/transformer_scan "jump twice"

Runs ``predict.py --workdir W INPUT...`` ``--repeats`` times as a fresh process and prints, for each
run, the seconds from starting the process to its first line on stdout (the first answer), and to its
end, and the CPU seconds the process used (user and system, all its threads: on a machine shared with
other jobs the wall-clock seconds grow with their load, the CPU seconds much less); then the median of
each. The inputs are whatever the workdir's task reads (image files, sentences, clips).

The numbers, with their machine and load: docs/results.md ("Predict start-up").
"""

import json
import resource
import statistics
import subprocess
import sys
import time

from absl import app, flags

_WORKDIR = flags.DEFINE_string('workdir', None, 'A workdir written by train.py.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Fresh processes to time.', lower_bound=1)
flags.mark_flag_as_required('workdir')


def time_one_run(workdir: str, inputs: list[str]) -> tuple[float, float, float, str]:
  """(seconds to the first stdout line, seconds to the end, CPU seconds, that line) of one ``predict.py``
  process."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  process = subprocess.Popen(
    [sys.executable, 'predict.py', f'--workdir={workdir}', '--', *inputs],
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  first_line = process.stdout.readline()
  first = time.perf_counter() - start
  _, errors = process.communicate()
  total = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
  if process.returncode != 0 or not first_line:
    raise SystemExit(f'predict.py failed (status {process.returncode}): {errors.strip().splitlines()[-1:]}')
  return first, total, cpu, first_line.rstrip('\n')


def main(argv):
  inputs = argv[1:]
  if not inputs:
    raise app.UsageError('Give one or more inputs for the workdir (image files, sentences or clips).')
  firsts, totals, cpus = [], [], []
  for run in range(_REPEATS.value):
    first, total, cpu, answer = time_one_run(_WORKDIR.value, inputs)
    firsts.append(first)
    totals.append(total)
    cpus.append(cpu)
    print(
      f'run {run + 1}: first answer after {first:.2f} s, done after {total:.2f} s, {cpu:.2f} CPU s: {answer}',
      flush=True,
    )
  print(
    f'median of {len(firsts)}: first answer after {statistics.median(firsts):.2f} s, '
    f'done after {statistics.median(totals):.2f} s, {statistics.median(cpus):.2f} CPU s'
  )
  numbers = {
    name: {'median': statistics.median(values), 'min': min(values), 'max': max(values)}
    for name, values in (('first_answer_seconds', firsts), ('end_seconds', totals), ('cpu_seconds', cpus))
  }
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  app.run(main)
