"""Run a sweep, write its table and draw its pictures.

  python ablate.py --config configs/vit_digits.py --workdir runs/ablation \\
      --axis model.posemb=none,learn1d,learn2d,sincos2d,relative \\
      [--axis model.posemb_injection=stem,every_layer,every_layer_shared] [--seeds 3]

Trains every combination of the ``--axis`` values (``path=value1,value2,...``, any config field,
the flag repeated for more axes) with each of ``--seeds`` seeds, one run after another, into
``<workdir>/<overrides>/`` (``posemb=learn1d,seed=0``); combinations that do not exist are
skipped and shown as N/A. Then writes ``results.json``, ``results.csv`` and ``results.md``
(printed) into the workdir and the pictures into ``<workdir>/plots/`` (``ablation.plots``).
Rerunning the same command trains only what is not finished and resumes an interrupted run.
Any config field can be overridden as in train.py (``--config.num_epochs=40``).

``--print_commands`` prints each run's ``python train.py ...`` command (for a cluster scheduler)
and exits; rerun ablate.py afterwards to collect the table. ``--plots_only`` redraws the pictures
of an existing workdir.
"""

import sys

from trainer.command_line import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/command_line/host_memory.py

from absl import app, flags
from ml_collections import config_flags

from trainer.command_line import cli
from trainer.command_line.cli import run_reporting_user_errors
from trainer.io import storage

_CONFIG = config_flags.DEFINE_config_file(
  'config', None, 'Path to an experiment config file.', lock_config=True
)
_WORKDIR = flags.DEFINE_string(
  'workdir', None, 'Directory of the sweep: one workdir per run, tables, plots/.'
)
_AXES = flags.DEFINE_multi_string(
  'axis',
  [],
  "A config field and its values, 'path=value1,value2,...'; repeat the flag to sweep several fields.",
)
_SEEDS = flags.DEFINE_integer('seeds', 1, 'Seeds per combination: config.seed, config.seed + 1, ...')
_PRINT_COMMANDS = flags.DEFINE_boolean(
  'print_commands', False, "Print every run's train.py command and exit."
)
_PLOTS_ONLY = flags.DEFINE_boolean('plots_only', False, 'Only redraw the pictures of an existing --workdir.')
flags.mark_flag_as_required('workdir')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  cli.quiet_library_logs()
  with cli.loading_libraries():  # JAX and TensorFlow: not for --help
    from ablation import plots, sweep, tables  # pylint: disable=g-import-not-at-top

  workdir = storage.as_path(_WORKDIR.value)
  if _PLOTS_ONLY.value:
    for path in run_reporting_user_errors(plots.plot_workdir, workdir):
      print(path)
    return
  if _CONFIG.value is None:
    raise app.UsageError('--config is required (except with --plots_only).')
  plan = run_reporting_user_errors(sweep.plan_sweep, _CONFIG.value, _AXES.value, _SEEDS.value, workdir)
  if _PRINT_COMMANDS.value:
    config_flag = flags.FLAGS['config']
    for command in sweep.train_commands(
      plan, config_flags.get_config_filename(config_flag), config_flags.get_override_values(config_flag)
    ):
      print(command)
    return
  summary = run_reporting_user_errors(sweep.run_sweep, plan)
  if summary is None:
    sys.exit(1)
  print(tables.write_results(workdir, summary), flush=True)
  for path in run_reporting_user_errors(plots.plot_workdir, workdir):
    print(f'wrote {path}')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
