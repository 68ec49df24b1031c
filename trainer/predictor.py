"""Use a trained model from Python: ``predictor = load_predictor(workdir); predictor(inputs)``.

The parameters of one checkpoint are restored alone (``trainer.evaluation.restore_checkpoint``: no
optimizer state) onto the devices present now; the task is built from the data sizes the workdir
recorded, so no training or evaluation data is read. The prediction protocol of the workdir's task
(``task.prediction``, ``trainer.prediction.Prediction``) reads and prepares each input
(``read_input``: image files or arrays, sentences, clips), predicts (``predict``) and draws the
attention for one input (``explain``); this module knows no model family.

A path that is not a workdir (a weights folder or file from another library) is opened by a model
family: a top-level package of the project with a module ``path_opener`` (``PATH_OPENER``), whose
``opens(path)`` says whether the family reads it and ``open_predictor(path)`` returns a ``Predictor``
(``vit/path_opener.py``: timm and Hugging Face ViT weights). A new family adds its own module there.

  predictor = load_predictor('runs/vit_digits')
  predictor = load_predictor('vit_base_patch16_224.augreg2_in21k_ft_in1k/')   # a timm folder
  predictor(['digit.png'])          # [{'classes': [{'index': 7, 'name': '7', 'probability': 0.98}, ...]}]
  predictor.explain('digit.png', 'digit_attention.png')
"""

import importlib
import pathlib
import re
import weakref
from typing import Any, Sequence

import jax
import numpy as np
from flax import nnx

from trainer.errors import WorkdirError
from trainer.evaluation import restore_checkpoint
from trainer.io import storage
from trainer.io import workdir as workdir_lib
from trainer.prediction import PredictOptions, prediction_rows

__all__ = [
  'Predictor',
  'load_predictor',
  'compiled_logits',
  'compiled_features',
  'batched',
  'picture_name',
]

_COMPILED = weakref.WeakKeyDictionary()


def compiled_logits(model: nnx.Module):
  """``logits(inputs)``: the model's first output, compiled once per input shape (kept while the model lives)."""
  if model not in _COMPILED:
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, inputs: nnx.merge(graphdef, state)(inputs)[0])
    _COMPILED[model] = lambda inputs: forward(state, inputs)
  return _COMPILED[model]


_COMPILED_FEATURES = weakref.WeakKeyDictionary()


def compiled_features(model: nnx.Module):
  """``features(inputs)``: the model's ``intermediates['pre_logits']``, compiled once per input shape."""
  if model not in _COMPILED_FEATURES:
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, inputs: nnx.merge(graphdef, state)(inputs)[1]['pre_logits'])
    _COMPILED_FEATURES[model] = lambda inputs: forward(state, inputs)
  return _COMPILED_FEATURES[model]


def batched(function, inputs, batch_size: int, input_shape, prepare) -> np.ndarray:
  """``function`` (a compiled model output) over ``inputs`` in padded batches: float32 ``[n, ...]``."""
  rows = []
  for start in range(0, len(inputs), batch_size):
    chunk = inputs[start : start + batch_size]
    batch = np.zeros((prediction_rows(len(chunk), batch_size), *input_shape), np.float32)
    batch[: len(chunk)] = prepare(np.stack(chunk))
    rows.append(np.asarray(function(batch), np.float32)[: len(chunk)])
  return np.concatenate(rows) if rows else np.zeros((0,), np.float32)


def picture_name(position: int, name: str) -> str:
  """``003_digit.png``: the input's position and a file-name-safe part of its name."""
  stem = pathlib.PurePath(name).stem if len(name) < 256 and '\n' not in name else name
  safe = re.sub(r'[^A-Za-z0-9]+', '_', stem).strip('_')[:40] or 'input'
  return f'{position:03d}_{safe}.png'


class Predictor:
  """A restored model and its task; call it on a list of inputs (paths, text or arrays)."""

  def __init__(self, workdir: pathlib.Path, task, model, step: int, class_names: list[str] | None):
    if task.prediction is None:
      raise WorkdirError(
        f'{workdir}: its task ({type(task).__name__}) cannot predict: it has no prediction protocol '
        '(Task.prediction).'
      )
    self.workdir, self.task, self.model, self.step = workdir, task, model, step
    self.prediction = task.prediction
    self.class_names = class_names

  def options(self, **overrides) -> PredictOptions:
    """The prediction options: the saved class names and the config's batch size, then ``overrides``."""
    batch_size = min(int(self.task.config.get('eval_batch_size', 64)), 64)
    return PredictOptions(**{'class_names': self.class_names, 'batch_size': batch_size, **overrides})

  def input_names(self, argument: str) -> list[str]:
    """The inputs an argument names (a folder of images: its image files, in sorted order)."""
    return self.prediction.input_names(argument)

  def read(self, item) -> Any:
    """One input read and checked; an ``InputError`` names it and its problem."""
    return self.prediction.read_input(item)

  def predict(self, inputs: Sequence[Any], **options) -> list[dict[str, Any]]:
    """Predictions for inputs already ``read``, in order."""
    return self.prediction.predict(self.model, list(inputs), self.options(**options))

  def __call__(self, items: Sequence[Any], **options) -> list[dict[str, Any]]:
    """Reads every item, then predicts; a bad item raises ``InputError`` before any prediction."""
    if isinstance(items, (str, np.ndarray)):
      raise TypeError('Pass a list of inputs (one image array, sentence or path per element).')
    predictions = self.predict([self.read(item) for item in items], **options)
    return [{key: value for key, value in p.items() if not key.startswith('_')} for p in predictions]

  def present(self, name: str, prediction: dict[str, Any]) -> str:
    return self.prediction.present(name, prediction)

  def features(self, items: Sequence[Any], *, is_read: bool = False) -> np.ndarray:
    """The pooled pre-logits embedding of each input (a task that has one): float32 ``[n, features]``."""
    values = list(items) if is_read else [self.read(item) for item in items]
    return self.prediction.features(self.model, values, self.options())

  def logits(self, items: Sequence[Any], *, is_read: bool = False) -> np.ndarray:
    """The logits of each input (a classifier's): float32 ``[n, classes]``."""
    values = list(items) if is_read else [self.read(item) for item in items]
    return self.prediction.logits(self.model, values, self.options())

  def explain(
    self, item, path, *, prediction: dict[str, Any] | None = None, is_read: bool = False, **options
  ):
    """Draws the attention for one input as a PNG at ``path`` and returns the path; ``is_read``: ``item``
    came from ``read`` already (with its ``prediction``, when known)."""
    value = item if is_read else self.read(item)
    if prediction is None:
      prediction = self.predict([value], **options)[0]
    title = f'{self.workdir.name}, step {self.step}'
    return self.prediction.explain(self.model, value, prediction, storage.as_path(path), title)


def load_predictor(path, checkpoint: str | int = 'latest', params: str = 'raw', **options) -> Predictor:
  """A predictor over ``path``: checkpoint ``checkpoint`` ('latest', 'best' or a step) of a workdir
  (``params='ema'``: the moving average of its parameters, ``trainer/ema.py``), or weights a model
  family opens (``path_openers``; ``options`` go to its ``open_predictor``, e.g. a bare timm file's
  ``arch``)."""
  workdir = storage.as_path(path)
  if not _names_a_task(workdir):
    for opener in path_openers():
      if opener.opens(path):
        return opener.open_predictor(path, **options)
    if (workdir / workdir_lib.CONFIG_FILE).exists():
      raise WorkdirError(
        f'{workdir} is not a workdir written by train.py (its config.json names no task), nor weights '
        'that a model family reads.'
      )
  task, parts, params, step = restore_checkpoint(workdir, checkpoint, read_data=False, params=params)
  class_names = workdir_lib.load_class_names(workdir)
  return Predictor(workdir, task, parts.merge(params), int(step), class_names)


PATH_OPENER = 'path_opener'


def path_openers() -> list:
  """The ``path_opener`` modules of the project's top-level packages, in name order."""
  root = pathlib.Path(__file__).resolve().parents[1]
  names = sorted(
    p.parent.name for p in root.glob(f'*/{PATH_OPENER}.py') if (p.parent / '__init__.py').exists()
  )
  return [importlib.import_module(f'{name}.{PATH_OPENER}') for name in names]


def _names_a_task(path) -> bool:
  """A folder whose ``config.json`` names a task, as ``train.py`` writes it."""
  config = path / workdir_lib.CONFIG_FILE
  return config.exists() and 'task' in workdir_lib.load_config(path)


def missing_class_names_note(predictor: Predictor) -> str | None:
  """A one-line note when the task has classes but the workdir has no ``classes.json``."""
  if predictor.class_names is None and predictor.prediction.class_names() is not None:
    return f'note: {predictor.workdir / workdir_lib.CLASSES_FILE} is missing: classes are shown by index.'
  return None
