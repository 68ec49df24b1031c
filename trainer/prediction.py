"""The prediction protocol: what ``predict.py`` and ``trainer.predictor`` ask of a task that answers on
a user's own inputs (images, sentences, clips).

It is optional and held by composition: a task that predicts holds one as ``task.prediction``; a task
whose ``prediction`` is ``None`` trains and evaluates, and ``predict.py`` says in one line that it
cannot predict. The trainer knows no family: each family writes its own subclass.
"""

import abc
import dataclasses
import pathlib
from typing import Any

from flax import nnx

from trainer.errors import InputError


@dataclasses.dataclass(frozen=True)
class PredictOptions:
  """What a user chooses about predictions (``predict.py``'s flags); a task ignores what is not its own."""

  top_k: int = 5  #: classifiers: the most probable classes shown
  class_names: list[str] | None = None  #: classifiers: from ``classes.json``; ``None``: indices
  beam_size: int | None = None  #: translators: ``None`` = the config's ``decode.beam_size``
  alpha: float | None = None  #: translators: ``None`` = the config's ``decode.alpha``
  batch_size: int = 64  #: most inputs run at once (batches are padded to a power of two up to it)


def prediction_rows(count: int, batch_size: int) -> int:
  """Rows a batch of ``count`` inputs is padded to: the next power of two, at most ``batch_size``,
  so that a few shapes are compiled whatever the number of inputs."""
  return min(1 << max(count - 1, 0).bit_length(), max(batch_size, 1))


class Prediction(abc.ABC):
  """Predictions on a user's inputs for one task; ``read_input`` and ``predict`` are what a family must
  write, every other method has a default."""

  def input_names(self, argument: str) -> list[str]:
    """The inputs one command-line argument names (images: a folder's image files); itself by default."""
    return [argument]

  @abc.abstractmethod
  def read_input(self, item) -> Any:
    """One input (a path or text as given, or an array), read and checked as evaluation reads its
    examples; an ``InputError`` names the problem in one line."""

  @abc.abstractmethod
  def predict(self, model: nnx.Module, inputs: list[Any], options: PredictOptions) -> list[dict[str, Any]]:
    """One prediction per input of ``read_input``, in order: JSON-able values, except keys starting
    with ``_`` (kept for ``explain``, never shown)."""

  def present(self, name: str, prediction: dict[str, Any]) -> str:
    """One prediction as plain text, one line (``name`` is the input as the user gave it)."""
    shown = {key: value for key, value in prediction.items() if not key.startswith('_')}
    return f'{name}: {shown}'

  def explain(
    self, model: nnx.Module, item: Any, prediction: dict[str, Any], path: pathlib.Path, title: str
  ) -> pathlib.Path:
    """A picture of the model's attention for one input (as ``read_input`` returned it), a PNG at ``path``."""
    del model, item, prediction, path, title
    raise InputError(f'{type(self).__name__} draws no attention picture of an input.')

  def class_names(self) -> list[str] | None:
    """The name of each class index, saved as ``classes.json`` when training starts; ``None`` (the
    default) for a task without classes."""
    return None

  def features(self, model: nnx.Module, inputs: list[Any], options: PredictOptions):
    """The pooled embedding of each input read, float32 ``[n, features]``; none by default."""
    del model, inputs, options
    raise InputError(f'{type(self).__name__} gives no features of an input.')

  def logits(self, model: nnx.Module, inputs: list[Any], options: PredictOptions):
    """The logits of each input read (a classifier's), float32 ``[n, classes]``; none by default."""
    del model, inputs, options
    raise InputError(f'{type(self).__name__} gives no logits of an input.')
