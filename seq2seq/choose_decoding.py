"""Chooses a translator's checkpoint averaging, beam size and length penalty on one split, then scores
the choice on another.

  python -m seq2seq.choose_decoding --workdir runs/rnn_multi30k_long --choose_on holdout \
      --average_last 1,5 --beam_sizes 1,4,8 --alphas 0.6,1.0,1.4 --report_on val

For each ``--average_last N`` the parameters are restored once (the mean of the last N kept
checkpoints, as ``evaluate.py`` averages them; 1: the last alone). ``--choose_on`` is translated
with each setting (greedy once: a length penalty changes nothing without a beam) and each setting's
sacreBLEU is printed; the highest wins (a tie goes to fewer checkpoints averaged, then the smaller
beam, then the smaller alpha). Only then is
``--report_on`` translated, once, with the winner: the split reported never takes part in the
choice. ``holdout`` is the split a run trained with ``--config.data.holdout=N`` set aside from its
training pairs. The last line of stdout is one JSON object: the table, the choice and the scores
on ``--report_on``; ``<workdir>/decoding_<choose_on>_step<N>.json`` keeps it.
"""

import itertools
import json

from absl import app, flags

from trainer.command_line import cli
from trainer.errors import ConfigError
from trainer.io import storage


def settings(beam_sizes: list[int], alphas: list[float]) -> list[tuple[int, float]]:
  """``(beam_size, alpha)`` pairs in the order of the tie rule; greedy once, with the first alpha."""
  pairs = itertools.product(sorted(set(beam_sizes)), sorted(set(alphas)))
  return [(beam, alpha) for beam, alpha in pairs if beam > 1 or alpha == min(alphas)]


def parse_settings(
  average_last: list[str], beam_sizes: list[str], alphas: list[str]
) -> tuple[list[int], list[tuple[int, float]]]:
  """The checkpoint counts and the ``(beam_size, alpha)`` settings the flags name; one line if bad."""
  try:
    counts = [int(value) for value in average_last]
    beams, penalties = [int(value) for value in beam_sizes], [float(value) for value in alphas]
  except ValueError as error:
    raise ConfigError(
      f'--average_last and --beam_sizes take whole numbers, --alphas numbers ({error}).'
    ) from None
  if not counts or min(counts) < 1:
    raise ConfigError(f'--average_last {average_last}: give checkpoint counts >= 1.')
  if not beams or not penalties or min(beams) < 1 or min(penalties) < 0:
    raise ConfigError(
      f'--beam_sizes {beam_sizes} and --alphas {alphas}: give beam sizes >= 1 and alphas >= 0.'
    )
  return sorted(set(counts)), settings(beams, penalties)


def choose(
  workdir, choose_on: str, report_on: str | None, tried, checkpoint='latest', average_last=(1,)
) -> dict:
  """The table of ``tried`` settings with each checkpoint count of ``average_last`` on ``choose_on``,
  the winner, and its scores on ``report_on``."""
  from seq2seq.task import Translation  # pylint: disable=g-import-not-at-top  (JAX: after the flags)
  from trainer.evaluation import restore_checkpoint  # pylint: disable=g-import-not-at-top
  from trainer.partitioning import (
    Devices,  # pylint: disable=g-import-not-at-top
    make_mesh,  # pylint: disable=g-import-not-at-top
  )

  if report_on == choose_on:
    raise ConfigError(f'--report_on is {report_on!r}, the split the setting is chosen on; name another.')
  mesh, devices = make_mesh(), None
  models, table, step = {}, [], None
  for count in average_last:
    task, parts, params, step = restore_checkpoint(workdir, checkpoint, mesh, count)
    if not isinstance(task, Translation):
      raise ConfigError(f'{workdir} holds a {type(task).__name__}, not a translator.')
    if devices is None:
      splits = task.eval_split_names()
      for flag, split in (('--choose_on', choose_on), ('--report_on', report_on)):
        if split is not None and split not in splits:
          raise ConfigError(f'{flag} is {split!r}; this data has the splits {", ".join(splits)}.')
      devices = Devices(mesh)
    models[count] = (task, parts.merge(params))
    for beam_size, alpha in tried:
      scores = _scores(*models[count], devices, beam_size, alpha, choose_on)
      name = f'avg{count}_beam{beam_size}_alpha{alpha:g}'.replace('.', 'p')  # a record's key
      table.append(dict(name=name, averaged_checkpoints=count, beam_size=beam_size, alpha=alpha, **scores))
      print(
        f'{choose_on}: last {count} averaged, beam {beam_size}, alpha {alpha:g}: bleu {scores["bleu"]:.2f}',
        flush=True,
      )
  best = max(table, key=lambda row: row['bleu'])  # the first of equals: the tie rule's order
  chosen = {name: best[name] for name in ('averaged_checkpoints', 'beam_size', 'alpha')}
  result = dict(workdir=str(workdir), step=int(step), choose_on=choose_on, table=table, chosen=chosen)
  if report_on is not None:
    result['report_on'] = report_on
    task, model = models[chosen['averaged_checkpoints']]
    result['reported'] = _scores(task, model, devices, chosen['beam_size'], chosen['alpha'], report_on)
  return result


def _scores(task, model, devices, beam_size: int, alpha: float, split: str) -> dict:
  """``split`` translated with this beam and length penalty, scored (``Translation.extra_evaluation``)."""
  with task.config.decode.unlocked():
    task.config.decode.update(beam_size=beam_size, alpha=alpha)
  scores = task.extra_evaluation(model, split, None, devices)
  return {name: value for name, value in scores.items() if not isinstance(value, str)}


def _define_flags() -> dict:
  """The command's flags, defined when it runs (importing the module for its functions defines none)."""
  defined = dict(
    workdir=flags.DEFINE_string('workdir', None, 'A translator workdir written by train.py.'),
    checkpoint=flags.DEFINE_string('checkpoint', 'latest', "'latest', 'best', or a step number."),
    average_last=flags.DEFINE_list(
      'average_last', ['1'], 'Checkpoint counts to try: the parameters averaged over the last N kept.'
    ),
    choose_on=flags.DEFINE_string('choose_on', 'holdout', 'The split the setting is chosen on.'),
    report_on=flags.DEFINE_string('report_on', None, 'The split the chosen setting is scored on (optional).'),
    beam_sizes=flags.DEFINE_list('beam_sizes', ['1', '4'], 'Beam sizes to try (1: greedy).'),
    alphas=flags.DEFINE_list('alphas', ['0.6', '1.0'], 'Length penalties to try with each beam above 1.'),
  )
  flags.mark_flag_as_required('workdir')
  return defined


def main(argv, given: dict):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  cli.quiet_library_logs()
  value = {name: flag.value for name, flag in given.items()}
  counts, tried = cli.run_reporting_user_errors(
    parse_settings, value['average_last'], value['beam_sizes'], value['alphas']
  )
  workdir = storage.as_path(value['workdir'])
  with cli.interrupt_exits('choosing the decoding', 'the checkpoints are untouched'):
    result = cli.run_reporting_user_errors(
      choose, workdir, value['choose_on'], value['report_on'], tried, value['checkpoint'], counts
    )
  from trainer.io import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

  name = f'decoding_{result["choose_on"]}_step{result["step"]}.json'
  workdir_lib.write_or_say(workdir / name, (json.dumps(result, indent=2) + '\n').encode())
  print(json.dumps(result, sort_keys=True))


if __name__ == '__main__':
  command_flags = _define_flags()
  app.run(lambda argv: main(argv, command_flags), flags_parser=cli.parse_flags)
