"""Evaluate a checkpoint: ``python evaluate.py --workdir runs/vit_digits [--checkpoint best] [--split test]``.

Prints the metrics as one JSON object on the last line of stdout and writes the
same object to ``<workdir>/eval_<split>_step<N>.json``. A workdir that may only be read (a shared
results folder) still gets its metrics printed; each file that could not be written is one
``note: could not write ...`` line on stderr.

For a ViT, ``--fewshot SOURCE --shots 1,5,10,25`` prints few-shot linear accuracies instead
(``vit.fewshot``): SOURCE is a data source ('digits', 'idx', 'folder', 'tfds') read from
``--fewshot_path``, or 'same' for the workdir's own data.
"""

import json

from trainer import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/host_memory.py

from absl import app, flags

from trainer import cli, validation

_WORKDIR = flags.DEFINE_string('workdir', None, 'A workdir written by train.py.')
_CHECKPOINT = flags.DEFINE_string('checkpoint', 'latest', "'latest', 'best', or a step number.")
_SPLIT = flags.DEFINE_string('split', None, "Split to evaluate; default: the config's eval_split.")
_BATCH_SIZE = flags.DEFINE_integer(
  'batch_size', None, "Evaluation batch size; default: the config's.", lower_bound=1
)
_AVERAGE_LAST = flags.DEFINE_integer(
  'average_last',
  1,
  'Average the parameters of the last N kept checkpoints up to --checkpoint before evaluating.',
  lower_bound=1,
)
_FEWSHOT = flags.DEFINE_string(
  'fewshot', None, "ViT only: few-shot linear evaluation on this data source ('same': the workdir's)."
)
_FEWSHOT_PATH = flags.DEFINE_string('fewshot_path', None, "The few-shot data set's path (data.path).")
_SHOTS = flags.DEFINE_list('shots', ['1', '5', '10', '25'], 'Examples per class for --fewshot.')
_FEWSHOT_SEEDS = flags.DEFINE_integer(
  'fewshot_seeds', 5, 'Draws of the k-shot examples to average.', lower_bound=1
)
flags.mark_flag_as_required('workdir')


def _parse_shots(values: list[str]) -> tuple[int, ...]:
  from trainer.errors import ConfigError  # pylint: disable=g-import-not-at-top

  if not values or not all(value.isdigit() and int(value) >= 1 for value in values):
    raise ConfigError(f'--shots must be whole numbers >= 1 separated by commas, got {",".join(values)!r}.')
  return tuple(int(value) for value in values)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  cli.quiet_library_logs()
  if _SPLIT.value is not None:
    cli.run_reporting_user_errors(validation.check_split_name, _SPLIT.value, '--split')
  if _FEWSHOT.value is not None:
    from vit.fewshot import evaluate_workdir_fewshot  # pylint: disable=g-import-not-at-top

    shots = cli.run_reporting_user_errors(_parse_shots, _SHOTS.value)
    result = cli.run_reporting_user_errors(
      evaluate_workdir_fewshot,
      _WORKDIR.value,
      _CHECKPOINT.value,
      _FEWSHOT.value,
      _FEWSHOT_PATH.value,
      shots,
      _FEWSHOT_SEEDS.value,
    )
    print(json.dumps(result, sort_keys=True))
    return
  from trainer.evaluation import evaluate_workdir  # pylint: disable=g-import-not-at-top

  result = cli.run_reporting_user_errors(
    evaluate_workdir, _WORKDIR.value, _CHECKPOINT.value, _SPLIT.value, _BATCH_SIZE.value, _AVERAGE_LAST.value
  )
  print(json.dumps(result, sort_keys=True))


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
