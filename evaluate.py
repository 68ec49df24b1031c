"""Evaluate a checkpoint: ``python evaluate.py --workdir runs/vit_digits [--checkpoint best] [--split test]``.

``--params ema`` evaluates the moving average of the parameters that a run with ``config.ema.decay``
kept (``trainer/ema.py``) instead of the parameters.

Prints the metrics as one JSON object on the last line of stdout and writes the
same object to ``<workdir>/eval_<split>_step<N>.json``. A workdir that may only be read (a shared
results folder) still gets its metrics printed; each file that could not be written is one
``note: could not write ...`` line on stderr.

A ViT's few-shot linear accuracies have their own command: ``python -m vit.fewshot --workdir W``.
"""

import json

from trainer.command_line import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/command_line/host_memory.py

from absl import app, flags

from trainer import validation
from trainer.command_line import cli
from trainer.io import storage

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
_PARAMS = flags.DEFINE_enum(
  'params', 'raw', ['raw', 'ema'], "'raw': the trained parameters; 'ema': their moving average (config.ema)."
)
flags.mark_flag_as_required('workdir')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  cli.quiet_library_logs()
  if _SPLIT.value is not None:
    cli.run_reporting_user_errors(validation.check_split_name, _SPLIT.value, '--split')
  with cli.loading_libraries():
    from trainer.evaluation import evaluate_workdir  # pylint: disable=g-import-not-at-top

  with cli.interrupt_exits('evaluating', 'the checkpoints are untouched'):
    result = cli.run_reporting_user_errors(
      evaluate_workdir,
      storage.as_path(_WORKDIR.value),
      _CHECKPOINT.value,
      _SPLIT.value,
      _BATCH_SIZE.value,
      _AVERAGE_LAST.value,
      _PARAMS.value,
    )
  print(json.dumps(result, sort_keys=True))


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
