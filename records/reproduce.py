"""Rerun recorded results and compare: ``python -m records.reproduce NAME | --list | --all --max-minutes M``.

  python -m records.reproduce --list                   # every record: its command and expected time
  python -m records.reproduce vit_digits               # rerun it; new numbers beside the record's
  python -m records.reproduce vit_digits --override=--config.total_steps=20   # a short check
  python -m records.reproduce --all --max-minutes 30   # the records whose time fits, shortest first

A rerun runs the record's command as ``records.record`` does (a scratch checkout, fresh ``runs/``)
and prints each of the record's numbers beside the new one (those its ``compared`` field names, when
it has one, are the ones compared: a median of several runs, not their range; without one, all
but a sweep's timings, ``*.cost.train_examples_per_second``). A number is flagged (``OUTSIDE``)
when it moved by more than the spread the record states for it (a seed spread, the difference
between CPU kinds), or, where the record states none, when it differs at the digits the record
gives. The exit status is 1 when a number is flagged or a command failed. ``--override FLAG`` adds
FLAG to every part of the command that takes ``--config`` (a shorter run to check that the command
still works; its numbers are not the record's). ``--write`` replaces the record with the rerun (not
with ``--override``). A record measured on an accelerator is rerun only on a machine with one:
``--all`` leaves it out elsewhere, and naming it there is an error.
"""

import argparse
import math
import re
import sys
from typing import Any

from records import store


def duration(seconds: float | None) -> str:
  if seconds is None:
    return 'unknown'
  minutes, seconds = divmod(round(seconds), 60)
  hours, minutes = divmod(minutes, 60)
  if hours:
    return f'{hours} h {minutes} min'
  return f'{minutes} min {seconds} s' if minutes else f'{seconds} s'


def with_overrides(command: str, overrides: list[str]) -> str:
  """``command`` with ``overrides`` added to each of its ``&&``-joined parts that takes ``--config``."""
  if not overrides:
    return command
  parts = command.split(' && ')
  if not any('--config' in part.split() or '--config=' in part for part in parts):
    raise store.RecordError('--override: no part of the command takes --config')
  return ' && '.join(
    part + ''.join(f' {override}' for override in overrides)
    if '--config' in part.split() or '--config=' in part
    else part
    for part in parts
  )


def stated_decimals(value: float) -> int:
  text = repr(float(value))
  if 'e' in text:
    return 16
  return len(text.partition('.')[2].rstrip('0'))


def within(metric: str, old: Any, new: Any, spread: dict[str, Any]) -> bool:
  if new is None:
    return False
  if metric in spread:
    return abs(new - old) <= spread[metric]['value'] + 1e-12
  if isinstance(old, bool) or isinstance(old, int):
    return new == old
  return math.isclose(round(new, stated_decimals(old)), old, rel_tol=0, abs_tol=1e-12)


SWEEP_TIMING = '.cost.train_examples_per_second'  # a sweep run's examples/s (ablation.sweep.run_cost)


def comparison(record: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], bool]:
  """The lines that set the record's numbers beside the new ones, and whether all are within spread."""
  spread = record.get('spread') or {}
  compared = record.get(
    'compared', [metric for metric in record['numbers'] if not metric.endswith(SWEEP_TIMING)]
  )
  lines = [f'{"metric":<28} {"record":>14} {"rerun":>14}  spread']
  all_within = True
  for metric, old in record['numbers'].items():
    value = new.get(metric)
    if metric not in compared:
      shown = '' if value is None else f'{value:.6g}'
      lines.append(f'{metric:<28} {old:>14.6g} {shown:>14}  (recorded, not compared)')
      continue
    ok = within(metric, old, value, spread)
    all_within &= ok
    stated = f'{spread[metric]["value"]:g} ({spread[metric]["why"]})' if metric in spread else 'none stated'
    shown = 'missing' if value is None else f'{value:.6g}'
    lines.append(f'{metric:<28} {old:>14.6g} {shown:>14}  {stated}{"" if ok else "   OUTSIDE"}')
  for metric in sorted(set(new) - set(record['numbers'])):
    lines.append(f'{metric:<28} {"":>14} {new[metric]:>14.6g}  (not in the record)')
  return lines, all_within


def list_records(all_records: list[dict[str, Any]]) -> None:
  for record in all_records:
    machine = record['machine'].get('label') or record['machine'].get('cpu') or 'unknown machine'
    print(
      f'{record["name"]}  [{record["source"]}, {duration(record["wall_seconds"])} on {machine}, '
      f'commit {(record["commit"] or "unknown")[:10]}]\n    {record["command"]}'
    )


def accelerator_missing(record: dict[str, Any], here: dict[str, Any]) -> str | None:
  """Why ``record`` cannot be rerun on the machine ``here`` (``store.machine()``): it was measured on an
  accelerator and this machine has none; ``None`` when it can."""
  recorded_on = record['machine'].get('accelerator')
  if recorded_on and not here.get('accelerator'):
    return f'measured on {accelerator_names(recorded_on)}; this machine has no accelerator'
  return None


def accelerator_names(listed: str) -> str:
  """The devices of ``nvidia-smi -L``'s lines, without their numbers and UUIDs: ``NVIDIA H200``."""
  names = [re.sub(r'^GPU \d+: | \(UUID: [^)]*\)$', '', line.strip()) for line in listed.split(';')]
  return ', '.join(
    f'{names.count(name)} x {name}' if names.count(name) > 1 else name for name in dict.fromkeys(names)
  )


def rerun(record: dict[str, Any], overrides: list[str], write: bool) -> bool:
  command = with_overrides(store.command_today(record['command']), overrides)
  print(f'=== {record["name"]}: {command}', flush=True)
  started_from = store.commit()
  measured = store.measure(command, record.get('numbers_file'), exit_status=record.get('exit_status', 0))
  lines, ok = comparison(record, measured['numbers'])
  print(
    f'=== {record["name"]}: {duration(measured["wall_seconds"])} ({duration(measured["cpu_seconds"])} of CPU, '
    f'load average {measured["load_average"]["min"]}-{measured["load_average"]["max"]}); '
    f'the record: {duration(record["wall_seconds"])}'
  )
  print('\n'.join(lines))
  if overrides:
    print('(with --override: a check that the command runs, not the recorded result)')
  if write:
    kept = {key: record[key] for key in store.CARRIED_ON_RERUN if key in record}
    print(f'wrote {store.write(store.new_record(record["name"], command, measured, started_from, **kept))}')
  return ok


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('names', nargs='*', help='records to rerun (results/NAME.json)')
  parser.add_argument('--list', action='store_true', help='list every record with its command and time')
  parser.add_argument('--all', action='store_true', help='rerun every record whose time fits --max-minutes')
  parser.add_argument('--max-minutes', type=float, help='with --all: the time the reruns may take together')
  parser.add_argument('--override', action='append', default=[], help='a --config.* flag for a shorter run')
  parser.add_argument('--write', action='store_true', help='replace each record with its rerun')
  args = parser.parse_args(argv)
  if args.write and args.override:
    parser.error('--write records the command as recorded; it cannot be combined with --override')
  if args.all and args.names:
    parser.error('give record names or --all, not both')
  if args.all and args.max_minutes is None:
    parser.error('--all needs --max-minutes')
  all_records = store.load_all()
  if args.list:
    list_records(all_records)
    return
  here = store.machine()
  if args.all:
    runnable = [record for record in all_records if not accelerator_missing(record, here)]
    if len(runnable) < len(all_records):
      print(f'{len(all_records) - len(runnable)} records need an accelerator, which this machine lacks')
    chosen, budget = [], args.max_minutes * 60
    for record in sorted(runnable, key=lambda record: record['wall_seconds'] or math.inf):
      if record['wall_seconds'] is not None and record['wall_seconds'] <= budget:
        chosen.append(record)
        budget -= record['wall_seconds']
    skipped = len(runnable) - len(chosen)
    print(f'{len(chosen)} records fit {args.max_minutes:g} minutes by their recorded times; {skipped} do not')
  elif args.names:
    try:
      chosen = [store.load(name) for name in args.names]
    except store.RecordError as error:
      raise SystemExit(str(error)) from None
    for record in chosen:
      if why := accelerator_missing(record, here):
        raise SystemExit(f'{record["name"]}: {why}')
  else:
    parser.error('give record names, --list or --all --max-minutes M')
  failed = []
  for record in chosen:
    try:
      if not rerun(record, args.override, args.write):
        failed.append(record['name'])
    except store.RecordError as error:
      print(f'=== {record["name"]}: {error}', flush=True)
      failed.append(record['name'])
  if failed:
    print(f'outside the record or failed: {", ".join(failed)}')
    sys.exit(1)


if __name__ == '__main__':
  main(sys.argv[1:])
