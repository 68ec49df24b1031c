"""Where ``predict.py``'s start-up goes: its phases, one after another, in fresh processes.

  python -m benchmarks.predict_phases --workdir runs/vit_digits digit.png
  python -m benchmarks.predict_phases --workdir runs/vit_digits --collect_garbage digit.png

Each of ``--repeats`` fresh Python processes does what ``predict.py`` does before its first answer
and times each phase:

- ``import_jax``, ``import_flax``: the libraries alone;
- ``import_trainer``: ``trainer.predictor`` and what it imports (orbax, the rest of the trainer);
- ``load``: ``load_predictor``: the workdir's config, the task built from its recorded data sizes
  (no data read), the abstract model, the parameters restored;
- ``first_answer``: the inputs read, the forward pass compiled and run, the answer formatted;
- ``second_answer``: the same inputs again, compiled (what each later input costs);

then ``to_first_answer``, the phases up to the first answer; ``process_seconds``, the whole process
as this command saw it (besides the phases: the interpreter's start, the imports of ``absl`` and of
the command line's module, the re-execution for huge pages and the exit); and ``cpu_seconds``, the
process's CPU seconds up to its second answer. The process starts as ``predict.py`` does (with huge
pages for ``malloc`` where they help, ``trainer/command_line/host_memory.py``; library logs quiet)
and, as ``predict.py`` does, turns the garbage collector off while loading and freezes what loading
made; ``--collect_garbage`` leaves it on throughout, to show what that saves.
``benchmarks.predict_latency`` times ``predict.py`` itself from outside. It prints each number's
median and range over the processes, and on its last line the numbers as JSON for
``records.record``.
"""

import json
import statistics
import subprocess
import sys
import time

from absl import app, flags

from trainer.command_line import cli

_WORKDIR = flags.DEFINE_string('workdir', None, 'A workdir written by train.py.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Fresh processes to time.', lower_bound=1)
_COLLECT_GARBAGE = flags.DEFINE_bool(
  'collect_garbage', False, 'Leave the garbage collector on while loading (predict.py turns it off).'
)
_ONE_PROCESS = flags.DEFINE_bool(
  'one_process', False, 'Internal: time the phases in this process and print them.'
)
flags.mark_flag_as_required('workdir')

PHASES = ('import_jax', 'import_flax', 'import_trainer', 'load', 'first_answer', 'second_answer')
TO_FIRST_ANSWER = PHASES[: PHASES.index('first_answer') + 1]
TOP_K = 3  # predict.py's default


def time_phases(workdir: str, inputs: list[str], collect_garbage: bool) -> dict[str, float | str]:
  """The seconds of each phase of ``PHASES`` in this process (which must not have imported JAX yet),
  the process's CPU seconds so far (both interpreter starts of the huge-page re-execution included)
  and the first answer's text."""
  import gc  # pylint: disable=g-import-not-at-top
  import resource  # pylint: disable=g-import-not-at-top

  if 'jax' in sys.modules:
    raise RuntimeError('JAX is already imported: the phases must start in a fresh process.')
  seconds, started = {}, time.perf_counter()

  def phase_ends(name):
    nonlocal started
    now = time.perf_counter()
    seconds[name], started = now - started, now

  if not collect_garbage:
    gc.disable()
  import jax  # noqa: F401  (the phase is the import)

  phase_ends('import_jax')
  import flax.linen  # noqa: F401  (the phase is the import)

  phase_ends('import_flax')
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  phase_ends('import_trainer')
  predictor = load_predictor(workdir)
  phase_ends('load')
  if not collect_garbage:
    gc.freeze()
    gc.enable()
  answers = {}
  for phase in ('first_answer', 'second_answer'):
    names = [name for argument in inputs for name in predictor.input_names(argument)]
    read = [predictor.read(name) for name in names]
    predictions = predictor.predict(read, top_k=TOP_K)
    answers[phase] = [predictor.present(name, prediction) for name, prediction in zip(names, predictions)]
    phase_ends(phase)
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return {**seconds, 'cpu_seconds': usage.ru_utime + usage.ru_stime, 'answer': answers['first_answer'][0]}


def one_fresh_process(inputs: list[str]) -> dict[str, float | str]:
  """``time_phases`` in a fresh process of this module, and that process's seconds from its start to
  its end as the parent saw them (``process_seconds``)."""
  command = [
    sys.executable,
    '-m',
    'benchmarks.predict_phases',
    '--one_process',
    f'--workdir={_WORKDIR.value}',
  ]
  command += ['--collect_garbage'] * _COLLECT_GARBAGE.value + ['--', *inputs]
  started = time.perf_counter()
  process = subprocess.run(command, capture_output=True, text=True, check=False)
  ended = time.perf_counter()
  if process.returncode != 0:
    raise SystemExit(
      f'the timed process failed (status {process.returncode}): {process.stderr.strip()[-2000:]}'
    )
  return {**json.loads(process.stdout.strip().splitlines()[-1]), 'process_seconds': ended - started}


def main(argv):
  inputs = argv[1:]
  if not inputs:
    raise app.UsageError('Give one or more inputs for the workdir (image files, sentences or clips).')
  if _ONE_PROCESS.value:
    cli.quiet_library_logs()  # as predict.py
    print(json.dumps(time_phases(_WORKDIR.value, inputs, _COLLECT_GARBAGE.value)))
    return
  runs = []
  for run in range(_REPEATS.value):
    runs.append(one_fresh_process(inputs))
    runs[-1]['to_first_answer'] = sum(runs[-1][phase] for phase in TO_FIRST_ANSWER)
    print(
      f'run {run + 1}: first answer after {runs[-1]["to_first_answer"]:.2f} s in the process: {runs[-1]["answer"]}'
    )
  collector = 'on' if _COLLECT_GARBAGE.value else 'off while loading'
  print(f'medians of {len(runs)} fresh processes (garbage collector {collector}):')
  numbers = {}
  for name in (*PHASES, 'to_first_answer', 'cpu_seconds', 'process_seconds'):
    values = [one[name] for one in runs]
    numbers[name] = {'median': statistics.median(values), 'min': min(values), 'max': max(values)}
    print(f'  {name:16s} {numbers[name]["median"]:7.2f} s  ({min(values):.2f} to {max(values):.2f})')
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  if '--one_process' in sys.argv:  # as predict.py starts
    from trainer.command_line import host_memory  # pylint: disable=g-import-not-at-top

    host_memory.reexec_with_huge_page_malloc()
  app.run(main)
