"""A stop signal in the middle of a ViT run, as a preemption sends it: for the tests that resume."""

import signal

from vit.input_pipeline import ImageData


def stop_at_batch(monkeypatch, index: int) -> None:
  """The training batches of a run that starts at step 0 raise SIGTERM before batch ``index``
  (counted from 0); a resumed run's batches are left alone."""
  original = ImageData.train_batches

  def interrupting_batches(self, **kwargs):
    for position, batch in enumerate(original(self, **kwargs)):
      if kwargs['start_step'] == 0 and position == index:
        signal.raise_signal(signal.SIGTERM)
      yield batch

  monkeypatch.setattr(ImageData, 'train_batches', interrupting_batches)
