"""Train a model: ``python train.py --config configs/vit_digits.py --workdir runs/vit_digits``.

Any config field can be overridden, e.g. ``--config.model.posemb=sincos2d``.
Rerunning the same command resumes from the workdir's latest checkpoint.
"""

import sys

from trainer.command_line import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/command_line/host_memory.py

from absl import app, flags
from ml_collections import config_flags

from trainer import validation
from trainer.command_line import cli
from trainer.io import storage

_CONFIG = config_flags.DEFINE_config_file(
  'config', None, 'Path to an experiment config file.', lock_config=True
)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics and the resolved config.')
_DISTRIBUTED = flags.DEFINE_bool(
  'distributed',
  False,
  'Call jax.distributed.initialize() first (multi-host: '
  'TPU pods, SLURM, Open MPI, or JAX_COORDINATOR_ADDRESS etc. set).',
)
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  cli.quiet_library_logs()
  # The checks that need no data come first, so a mistake is reported before any is read.
  cli.run_reporting_user_errors(validation.check_trainer_fields, _CONFIG.value)
  workdir = storage.as_path(_WORKDIR.value)
  cli.run_reporting_user_errors(validation.check_workdir, workdir)
  with cli.loading_libraries():  # the trainer and TensorFlow load in seconds: not for --help
    import jax  # pylint: disable=g-import-not-at-top

    from trainer.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top

  with cli.interrupt_exits('starting', 'no checkpoint was written or changed'):
    if _DISTRIBUTED.value:
      jax.distributed.initialize()
    result = cli.run_reporting_user_errors(train_and_evaluate, _CONFIG.value, workdir)
  if result.interrupted:
    sys.exit(1)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
