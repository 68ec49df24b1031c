"""Run a command and record its result: ``python -m records.record NAME [options] -- COMMAND``.

  python -m records.record vit_digits -- \\
      'python train.py --config configs/vit_digits.py --workdir runs/vit_digits && python evaluate.py --workdir runs/vit_digits'
  python -m records.record vit_throughput -- python -m benchmarks.vit_throughput
  python -m records.record posemb --numbers_file runs/posemb/results.json -- \\
      python ablate.py --config configs/vit_digits_ablation.py --workdir runs/posemb --axis model.posemb=none,sincos2d

The command runs in a scratch copy of the checkout's layout (links to its files, an empty ``runs/``),
so a workdir left from an earlier run cannot make it resume; a command that fails records nothing
and leaves its scratch copy where the error says, with what the run measured: when only the
numbers file was named wrongly, ``--from_kept FOLDER`` records that run without running it again.
Its numbers are the JSON object on the last line of its stdout, or the JSON file ``--numbers_file``
names (relative to the checkout). Named files, ``--numbers_file NAME=PATH`` repeated, give several
measurements of one command, each one's numbers prefixed with its name (a lowercase name of letters,
digits and ``_``; a single path that starts so, ``seed=0/results.json``, is written
``./seed=0/results.json``):

  python -m records.record long --numbers_file end=runs/end.json --numbers_file average=runs/avg.json \\
      -- 'python train.py --config C --workdir runs/long && python evaluate.py --workdir runs/long > runs/end.json &&
          python evaluate.py --workdir runs/long --average_last 5 > runs/avg.json'

``results/NAME.json`` (records/store.py) then holds the command, commit, date, machine, wall and
CPU seconds, load average and numbers; a record of the same name that it replaces passes on what it
says about presentation, spread and comparison (``what``, ``cells``, ``parts``, ``spread``, ``compared``,
``numbers_file``).
"""

import argparse
import re
import sys

from records import store

NAMED_FILE = re.compile(r'^(?P<name>[a-z0-9_]+)=(?P<path>[^=].*)$')


def parse_numbers_files(texts: list[str]) -> str | dict[str, str] | None:
  """One ``PATH``, or ``NAME=PATH`` for each of several files."""
  if len(texts) <= 1 and not any(NAMED_FILE.match(text) for text in texts):
    return texts[0] if texts else None
  named = {}
  for text in texts:
    match = NAMED_FILE.match(text)
    if not match:
      raise SystemExit(
        f'--numbers_file {text!r}: with several files, name each one: NAME=PATH, NAME of a-z, 0-9 and _'
      )
    if match['name'] in named:
      raise SystemExit(f'--numbers_file {text!r}: the name {match["name"]!r} is given twice')
    named[match['name']] = match['path']
  return named


def parse_spread(texts: list[str], why: str | None) -> dict[str, dict]:
  spread = {}
  for text in texts:
    metric, equals, value = text.partition('=')
    try:
      spread[metric] = {'value': float(value), 'why': why}
    except ValueError:
      raise SystemExit(f'--spread {text!r}: give METRIC=NUMBER, e.g. accuracy=0.0056') from None
    if not equals or not metric:
      raise SystemExit(f'--spread {text!r}: give METRIC=NUMBER, e.g. accuracy=0.0056')
  return spread


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(
    description=__doc__.split('\n')[0], usage='%(prog)s NAME [options] -- COMMAND'
  )
  parser.add_argument('name', help='the record, results/NAME.json')
  parser.add_argument('command', nargs='+', help='the command; one quoted word may hold && and VAR=value')
  parser.add_argument(
    '--numbers_file',
    action='append',
    default=[],
    help='a JSON file the command writes, read for the numbers; NAME=PATH, repeated, for several',
  )
  parser.add_argument('--spread', action='append', default=[], help='METRIC=VALUE a rerun may move by')
  parser.add_argument('--spread_why', help='what the spread is (e.g. "seeds 0-2")')
  parser.add_argument('--machine_label', help='a short name for this machine in the tables (e.g. CPU-A)')
  parser.add_argument('--note', help='what else a reader needs to know (e.g. "shared with another run")')
  parser.add_argument(
    '--from_kept',
    help='the folder a failed recording kept: record that run (its times, its numbers read now) without running again',
  )
  parser.add_argument(
    '--exit_status',
    type=int,
    help='the status the result exits with, when not 0 (benchmarks.compile_for: 1, a step that does not fit)',
  )
  args = parser.parse_args(argv)
  path = store.path_of(args.name)  # checks the name before anything runs
  command = store.command_text(args.command)
  carried = {}
  if path.exists():
    replaced = store.load(args.name)
    carried = {key: value for key, value in replaced.items() if key in store.CARRIED_ON_RERUN}
    if carried.get('numbers_file') and not args.numbers_file and replaced['command'] != command:
      raise SystemExit(  # before the run: the old command's file is seldom the new one's
        f"{args.name}: the command is not the record's, whose numbers were read from "
        f'{carried["numbers_file"]}; give --numbers_file for this command'
      )
  numbers_file = parse_numbers_files(args.numbers_file) or carried.get('numbers_file')
  exit_status = carried.get('exit_status', 0) if args.exit_status is None else args.exit_status
  try:
    if args.from_kept:
      measured, started_from = store.measured_from_kept(args.from_kept, command, numbers_file, exit_status)
    else:
      started_from = store.commit()
      measured = store.measure(command, numbers_file, exit_status=exit_status)
  except store.RecordError as error:
    raise SystemExit(f'{args.name}: {error}') from None
  fields = dict(carried, note=args.note)
  if numbers_file:
    fields['numbers_file'] = numbers_file
  fields.pop('exit_status', None)
  if exit_status:
    fields['exit_status'] = exit_status
  if args.spread:
    fields['spread'] = parse_spread(args.spread, args.spread_why)
  record = store.new_record(args.name, command, measured, started_from, **fields)
  record['machine']['label'] = args.machine_label
  print(f'wrote {store.write(record)}')


if __name__ == '__main__':
  main(sys.argv[1:])
