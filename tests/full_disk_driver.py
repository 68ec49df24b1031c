"""Runs ``train.py``'s main on a tiny ViT with one kind of write failing for a full disk.

  python -m tests.full_disk_driver KIND WORKDIR

KIND is the write that finds the disk full: ``meta`` (orbax's JSON item of a checkpoint, from the
first checkpoint on: it fails while the arrays are still being written), ``metrics``
(``metrics.jsonl``, from step 3 on) or ``tensorboard`` (the training split's TensorBoard event file,
from step 3 on).
"""

import errno
import pathlib
import sys

from absl import app

import train
from trainer.command_line import cli

_ARGS = [
  '--config=configs/vit_digits.py',
  '--config.model.width=16',
  '--config.model.depth=1',
  '--config.model.num_heads=2',
  '--config.model.mlp_dim=32',
  '--config.model.patch_size=4',
  '--config.batch_size=32',
  '--config.eval_batch_size=64',
  '--config.num_epochs=0',
  '--config.total_steps=6',
  '--config.log_every_steps=1',
  '--config.eval_every_steps=6',
  '--config.checkpoint_every_steps=2',
]


def _full(*args, **kwargs):
  del args, kwargs
  raise OSError(errno.ENOSPC, 'No space left on device')


def _fail_opens_after_two(is_target) -> None:
  """Every open of a file for which ``is_target(path, mode)`` holds, from the third on, finds the disk full."""
  original_open = pathlib.Path.open
  calls = {'count': 0}

  def open_(self, mode='r', *args, **kwargs):
    if is_target(self, mode):
      calls['count'] += 1
      if calls['count'] > 2:
        _full()
    return original_open(self, mode, *args, **kwargs)

  pathlib.Path.open = open_


def _fill_disk_at(kind: str) -> None:
  if kind == 'meta':
    from orbax.checkpoint._src.handlers import json_checkpoint_handler

    handler = json_checkpoint_handler.JsonCheckpointHandler

    async def save(self, x, directory):
      del self, x, directory
      _full()

    handler._save_fn = save
  elif kind == 'metrics':
    _fail_opens_after_two(lambda path, mode: path.name == 'metrics.jsonl' and 'a' in mode)
  elif kind == 'tensorboard':
    # The training split's event file, once it holds its header: each logged step appends once.
    _fail_opens_after_two(
      lambda path, mode: (
        path.name.startswith('events.out.tfevents') and path.parent.name == 'train' and path.exists()
      )
    )
  else:
    raise ValueError(kind)


if __name__ == '__main__':
  _fill_disk_at(sys.argv[1])
  sys.argv = ['train.py', *_ARGS, f'--workdir={sys.argv[2]}']
  app.run(train.main, flags_parser=cli.parse_flags)
