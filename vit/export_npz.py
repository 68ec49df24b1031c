"""Writes a ViT checkpoint of ours as an ``.npz`` in the official (google-research/vision_transformer) layout.

  python -m vit.export_npz --workdir runs/vit_mnist --out vit_mnist.npz [--checkpoint best]

The file loads back into our ViT (``--config.init_from.path=vit_mnist.npz``) with the same
parameters, and into other code that reads that layout.
"""

import pathlib

from absl import app, flags

from trainer import cli


def export(workdir: str, out: str, checkpoint: str = 'latest') -> str:
  from trainer.evaluation import restore_checkpoint  # pylint: disable=g-import-not-at-top  (JAX: not for --help)
  from vit.checkpoint_npz import write_official_npz  # pylint: disable=g-import-not-at-top

  which = int(checkpoint) if checkpoint.isdigit() else checkpoint
  _, parts, params, step = restore_checkpoint(pathlib.Path(workdir), which, read_data=False)
  write_official_npz(parts.merge(params), out)
  return f'wrote step {step} of {workdir} to {out}'


def run() -> None:
  """The command; its flags are defined here, so importing ``export`` defines none."""
  workdir = flags.DEFINE_string('workdir', None, 'A workdir written by train.py with a ViT config.')
  out = flags.DEFINE_string('out', None, 'The .npz file to write.')
  checkpoint = flags.DEFINE_string('checkpoint', 'latest', "'latest', 'best', or a step number.")
  flags.mark_flags_as_required(['workdir', 'out'])

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
    cli.quiet_library_logs()
    print(cli.run_reporting_user_errors(export, workdir.value, out.value, checkpoint.value))

  app.run(main)


if __name__ == '__main__':
  run()
