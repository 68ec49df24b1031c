"""Writes a ViT checkpoint of ours as an ``.npz`` in the official (google-research/vision_transformer) layout.

  python -m vit.weights.export_npz --workdir runs/vit_mnist --out vit_mnist.npz [--checkpoint best] [--params ema]

The file loads back into our ViT (``--config.init_from.path=vit_mnist.npz``) with the same
parameters, and into other code that reads that layout. ``--params ema`` writes the moving average
of the parameters (``trainer/ema.py``) instead.
"""

from absl import app, flags

from trainer.command_line import cli


def export(workdir: str, out: str, checkpoint: str = 'latest', params: str = 'raw') -> str:
  from trainer.evaluation import restore_checkpoint  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  from vit.weights.checkpoint_npz import write_official_npz  # pylint: disable=g-import-not-at-top

  which = int(checkpoint) if checkpoint.isdigit() else checkpoint
  _, parts, chosen, step = restore_checkpoint(workdir, which, read_data=False, params=params)
  write_official_npz(parts.merge(chosen), out)
  what = ' (the moving average of the parameters)' if params == 'ema' else ''
  return f'wrote step {step} of {workdir}{what} to {out}'


def run() -> None:
  """The command; its flags are defined here, so importing ``export`` defines none."""
  workdir = flags.DEFINE_string('workdir', None, 'A workdir written by train.py with a ViT config.')
  out = flags.DEFINE_string('out', None, 'The .npz file to write.')
  checkpoint = flags.DEFINE_string('checkpoint', 'latest', "'latest', 'best', or a step number.")
  params = flags.DEFINE_enum('params', 'raw', ['raw', 'ema'], "'ema': the moving average (config.ema).")
  flags.mark_flags_as_required(['workdir', 'out'])

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
    cli.quiet_library_logs()
    print(cli.run_reporting_user_errors(export, workdir.value, out.value, checkpoint.value, params.value))

  app.run(main)


if __name__ == '__main__':
  run()
