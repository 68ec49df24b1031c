"""Predictions of a classifier whose model's first output is the logits: the most probable classes of
each input, and one line of text for them. The ViT's image predictions (``vit.prediction``) and the
video classifier's clip predictions (``video.prediction``) are both this, each with its own inputs.
"""

from typing import Any

import numpy as np

from trainer.prediction import Prediction, PredictOptions
from trainer.predictor import batched, compiled_logits


def top_classes(logits: np.ndarray, k: int, class_names: list[str] | None) -> list[dict[str, Any]]:
  """The ``k`` most probable classes of one row of logits ``[classes]``, most probable first: index,
  name (the index where there are no names) and softmax probability. Ties go to the lower index, as
  ``argmax`` (and so the accuracy evaluation computes)."""
  logits = np.asarray(logits, np.float64)
  probabilities = np.exp(logits - logits.max())
  probabilities /= probabilities.sum()
  order = np.argsort(-logits, kind='stable')[: max(k, 1)]
  return [
    {
      'index': int(index),
      'name': class_names[index] if class_names and index < len(class_names) else str(int(index)),
      'probability': float(probabilities[index]),
    }
    for index in order
  ]


def classify(model, inputs, options: PredictOptions, input_shape, prepare) -> list[dict[str, Any]]:
  """``{'classes': top_classes(...)}`` for each input, in padded batches of ``options.batch_size``
  (one compiled forward): ``prepare`` turns a stack of raw inputs into the model's float inputs."""
  logits = batched(compiled_logits(model), inputs, options.batch_size, input_shape, prepare)
  return [{'classes': top_classes(row, options.top_k, options.class_names)} for row in logits]


def present_classes(name: str, prediction: dict[str, Any]) -> str:
  """``name: 7 (98.1%), 1 (0.9%), ...`` for a classifier's prediction."""
  classes = ', '.join(
    f'{entry["name"]} ({100 * entry["probability"]:.1f}%)' for entry in prediction['classes']
  )
  return f'{name}: {classes}'


class ClassPrediction(Prediction):
  """A classifier's predictions on inputs of ``input_shape``: a family writes ``read_input`` (one raw
  input, as its data set holds them), ``prepare`` (a stack of them -> the model's float input) and
  ``explain``."""

  def __init__(self, input_shape: tuple[int, ...], class_names: list[str]):
    self.input_shape = tuple(input_shape)
    self._class_names = list(class_names)

  def prepare(self, inputs: np.ndarray) -> np.ndarray:
    """A stack of inputs as ``read_input`` returns them -> the model's float32 input."""
    raise NotImplementedError(f'{type(self).__name__} does not prepare its inputs.')

  def class_names(self) -> list[str]:
    return list(self._class_names)

  def predict(self, model, inputs, options):
    """The ``options.top_k`` most probable classes of each input: ``{'classes': [{index, name,
    probability}, ...]}``, the first being the argmax of the logits that evaluation scores."""
    return classify(model, inputs, options, self.input_shape, self.prepare)

  def logits(self, model, inputs, options):
    return batched(compiled_logits(model), inputs, options.batch_size, self.input_shape, self.prepare)

  def present(self, name, prediction):
    return present_classes(name, prediction)
