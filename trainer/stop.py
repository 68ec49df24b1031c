"""Stopping on SIGTERM or Ctrl-C, at the same step on every process.

A signal only sets a flag; the loop asks ``should_stop(step)`` after each step. With
one process the flag is the answer. With several, a signal may reach one host only
(a preempted machine), and a host that stops alone leaves the others waiting in a
collective for ever; so at agreed steps (every ``sync_every_steps``, and at the
last step) the processes exchange their flags and all stop if any was set. Between
those steps nobody stops, which keeps the exchange off the hot path.
"""

import signal

import jax
import numpy as np


class StopRequest:
  """Turns SIGTERM and SIGINT into a flag that every process agrees on before stopping."""

  def __init__(self, sync_every_steps: int = 1):
    self.sync_every_steps = max(int(sync_every_steps), 1)
    self.signal_name = None
    self._previous = {}

  def __enter__(self):
    for sig in (signal.SIGTERM, signal.SIGINT):
      try:
        self._previous[sig] = signal.signal(sig, self._handle)
      except ValueError:  # not the main thread: no handlers, training still works
        pass
    return self

  def _handle(self, signum, frame):
    del frame
    self.signal_name = signal.Signals(signum).name

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      # a command's start-up handler (``cli.interrupt_exits``) ends with the start-up
      signal.signal(sig, signal.default_int_handler if getattr(handler, 'until_training', False) else handler)
    self._previous = {}

  def should_stop(self, step: int) -> bool:
    """Whether to stop after ``step``; the same answer on every process."""
    if jax.process_count() == 1:
      return self.signal_name is not None
    if step % self.sync_every_steps:
      return False
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

    flags = multihost_utils.process_allgather(np.int32(self.signal_name is not None))
    if np.any(flags) and self.signal_name is None:
      self.signal_name = 'a stop signal on another process'
    return bool(np.any(flags))

  def reason(self) -> str:
    """``SIGTERM received``, or what made another process stop."""
    name = self.signal_name or 'a stop signal'
    return name if ' ' in name else f'{name} received'
