"""``jax.profiler`` traces of chosen training steps (``config.profile_steps``), and where their time went.

Each run of consecutive step numbers is one window, traced into
``<workdir>/profile/steps_<first>-<last>/`` (``plugins/profile/<time>/`` holds the XSpace
``.xplane.pb`` and the Chrome-format ``.trace.json.gz``): ``tensorboard --logdir <workdir>/profile``
shows each window as a run in its profile tab, and https://ui.perfetto.dev opens the ``.json.gz``.
When a window ends, the main process prints the ops that took the most time per step
(``trainer.observe.step_cost.summarise_trace``). Step ``s`` is the ``s``-th train step, as the progress
line counts them; a window holding a step that compiles traces the compilation too.
"""

import pathlib

import jax

from trainer.observe.step_cost import summarise_trace


def windows(steps) -> list[tuple[int, int]]:
  """``(first, last)`` of each run of consecutive numbers in increasing ``steps``."""
  found = []
  for step in steps:
    if found and step == found[-1][1] + 1:
      found[-1] = (found[-1][0], step)
    else:
      found.append((step, step))
  return found


class StepProfiler:
  """Starts a trace before the first step of each window and stops it after the last.

  The loop calls ``before_step(s, state)`` before train step ``s``, and after it, when ``window_ends(s)``,
  ``stop()`` once the steps' work is done (it leaves writing the trace out of the steps/s).
  """

  def __init__(self, steps, workdir: pathlib.Path, print_summary: bool):
    self.windows = windows(steps)
    self.directory = workdir / 'profile'
    self.print_summary = print_summary
    self._folder, self._last, self._traced = None, 0, 0

  def before_step(self, step: int, pending) -> None:
    """Starts the trace of the window ``step`` is in, unless one is running, once ``pending`` (the
    work of the steps before) is done; counts a traced step."""
    if self._folder is None:
      for first, last in self.windows:
        if first <= step <= last:  # a resumed run may enter a window past its first step
          jax.block_until_ready(pending)
          self._folder, self._last, self._traced = self.directory / f'steps_{step}-{last}', last, 0
          jax.profiler.start_trace(str(self._folder))
          break
    if self._folder is not None:
      self._traced += 1

  def window_ends(self, step: int) -> bool:
    return self._folder is not None and step >= self._last

  def stop(self) -> None:
    """Ends a trace in progress (at a window's end, or when the run stops inside one) and prints where
    the traced steps' time went."""
    if self._folder is None:
      return
    folder, traced = self._folder, self._traced
    self._folder = None
    jax.profiler.stop_trace()
    if not self.print_summary:
      return
    traces = sorted(folder.glob('plugins/profile/*/*.trace.json.gz'))
    if traces:
      print(f'profile of {traced} step(s) in {folder}; {summarise_trace(traces[-1], traced)}', flush=True)
    else:
      print(f'profile of {traced} step(s) in {folder}: no Chrome-format trace to summarise', flush=True)
