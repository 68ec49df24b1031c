"""Filters for what libraries log about things the trainer does on purpose or reports itself.

Installed once by the command lines (``trainer.command_line.cli.quiet_library_logs``), never on import: a
program that uses the trainer as a library keeps its own logging as it set it up.
"""

import logging
import sys


class ExpectedOrbaxWarnings(logging.Filter):
  """Drops orbax warnings about what we do on purpose: checkpoints between evaluations
  carry no metrics, and evaluation opens the checkpoints read-only."""

  def filter(self, record):
    message = record.getMessage()
    return not (
      'did not provide metrics' in message
      or 'read_only=True' in message
      or 'directory is read only' in message
    )


class DiskFullTracebacks(logging.Filter):
  """Drops the tracebacks orbax and asyncio log for each write that found the disk full:
  ``trainer.io.checkpoints.Checkpoints`` reports it in one line, and the ``CheckpointError`` keeps them
  as its cause."""

  def filter(self, record):
    from trainer.io import storage  # pylint: disable=g-import-not-at-top  (the command lines start without it)

    return not (
      'No space left' in record.getMessage() or (record.exc_info and storage.is_disk_full(record.exc_info[1]))
    )


def _quiet_cancelled_writes() -> None:
  """After a failed save, tensorstore finishes the writes orbax cancelled on an event loop
  orbax has closed; each prints a traceback that says nothing to the user."""
  hook = sys.unraisablehook
  if getattr(hook, 'quiet_cancelled_writes', False):
    return

  def unraisable(args):
    if not (isinstance(args.exc_value, RuntimeError) and str(args.exc_value) == 'Event loop is closed'):
      hook(args)

  unraisable.quiet_cancelled_writes = True
  sys.unraisablehook = unraisable


def install() -> None:
  """Adds the filters (once) and the hook that drops the cancelled writes' tracebacks."""
  absl = logging.getLogger('absl')
  if not any(isinstance(existing, ExpectedOrbaxWarnings) for existing in absl.filters):
    absl.addFilter(ExpectedOrbaxWarnings())
    for name in ('absl', 'asyncio'):
      logging.getLogger(name).addFilter(DiskFullTracebacks())
  _quiet_cancelled_writes()
