"""The explorer's views as arrays and pictures, for any predictor (``trainer.predictor.Predictor``):
an image's classes and attention, a sentence's hypotheses and alignments, a clip's attention, and the
test set's pooled features in two dimensions.

Inputs are read by the task's prediction protocol (``read_input``) as ``predict.py`` reads them; the
model runs through functions compiled once per model graph and input shape, so every checkpoint of a
run (same graph) reuses them. The pictures come from the families' ``pictures`` modules, the ones
``predict.py --explain`` and ``ablate.py`` save.
"""

import dataclasses
import functools
import weakref

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention import drawing
from trainer.errors import InputError

_SPLIT = weakref.WeakKeyDictionary()


def _split(model):
  if model not in _SPLIT:
    _SPLIT[model] = nnx.split(model)
  return _SPLIT[model]


@functools.partial(jax.jit, static_argnums=0)
def _with_weights(graphdef, state, *inputs):
  return nnx.merge(graphdef, state)(*inputs, return_weights=True)


@functools.partial(jax.jit, static_argnums=0)
def _logits_and_features(graphdef, state, inputs):
  logits, intermediates = nnx.merge(graphdef, state)(inputs)
  return logits, intermediates['pre_logits']


def forward(model, *inputs):
  """``model(*inputs, return_weights=True)``, compiled once per model graph and input shapes, as NumPy."""
  graphdef, state = _split(model)
  return jax.tree.map(np.asarray, _with_weights(graphdef, state, *(jnp.asarray(x) for x in inputs)))


def family(predictor) -> str:
  """``'image'``, ``'sentence'`` or ``'clip'``: what the predictor's task reads."""
  from seq2seq.prediction import TranslationPrediction  # pylint: disable=g-import-not-at-top
  from video.prediction import ClipPrediction  # pylint: disable=g-import-not-at-top
  from vit.prediction import ImagePrediction  # pylint: disable=g-import-not-at-top

  prediction = predictor.prediction
  if isinstance(prediction, ImagePrediction):
    return 'image'
  if isinstance(prediction, TranslationPrediction):
    return 'sentence'
  if isinstance(prediction, ClipPrediction):
    return 'clip'
  raise InputError(f'the explorer shows images, sentences and clips; {type(prediction).__name__} is none.')


def _classes(predictor, logits_row: np.ndarray, top_k: int = 5) -> list[dict]:
  from vit.classification import top_classes  # pylint: disable=g-import-not-at-top

  if logits_row.shape[-1] == 0:  # weights without a classification head
    return []
  return top_classes(logits_row, top_k, predictor.class_names or predictor.prediction.class_names())


def position_similarity(model, title: str):
  """The learned position table's cosine-similarity figure (on the patch grid for images), or ``None``."""
  from vit.pictures import LEARNED_TABLES  # pylint: disable=g-import-not-at-top

  positional = getattr(getattr(model, 'encoder', None), 'positional', None)
  if positional is None or positional.kind not in LEARNED_TABLES:
    return None
  table = np.asarray(positional.tables[0](), np.float32)
  grid = getattr(model, 'grid', None)
  grid = tuple(grid) if grid is not None and len(grid) == 2 and grid[0] * grid[1] == len(table) else None
  return drawing.similarity_figure(table, grid, f'{title}: {positional.kind} position similarity')


# Images -------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Example:
  """One input as the model sees it (``model_input``, a batch of one) and its label when known."""

  model_input: np.ndarray
  label: int | None = None
  name: str = ''


def read_example(predictor, item, name: str = '') -> Example:
  """An input file or array read as ``predict.py`` reads it; ``InputError`` names what is wrong."""
  value = predictor.read(item)
  return Example(np.asarray(predictor.prediction.prepare(value[None]), np.float32), None, name)


def image_view(predictor, example: Example, query: int | None = None) -> dict:
  """Classes and attention of one image: ``classes`` (top five), ``arrays`` (``vit.pictures.attention_arrays``),
  ``reader`` (per layer ``[heads, patches]``: the attention of patch ``query``, or the class token's /
  average query's, to each patch) and ``rollout`` (``[patches]``, the same row of the last rollout)."""
  from vit import pictures  # pylint: disable=g-import-not-at-top

  logits, intermediates = forward(predictor.model, example.model_input)
  arrays = pictures.attention_arrays(intermediates)
  grid = arrays['grid']
  patches = grid[0] * grid[1]
  if query is not None and not 0 <= query < patches:
    raise InputError(f'patch {query} is outside the {grid[0]} x {grid[1]} grid.')
  reader = [
    np.stack([pictures.patch_map(layer[head], grid, query).ravel() for head in range(layer.shape[0])])
    for layer in arrays['weights']
  ]
  rollout = pictures.patch_map(arrays['rollouts'][-1], grid, query).ravel()
  return {
    'classes': _classes(predictor, logits[0]),
    'arrays': arrays,
    'grid': grid,
    'query': query,
    'reader': reader,
    'rollout': rollout,
  }


def image_attention_figure(view: dict, example: Example, title: str):
  from vit import pictures  # pylint: disable=g-import-not-at-top

  best = view['classes'][0] if view['classes'] else None
  caption = f'predicted {best["name"]} ({100 * best["probability"]:.1f}%)' if best else ''
  return pictures.attention_figure(view['arrays'], example.model_input, caption, title, view['query'])


def shown_image(model_input: np.ndarray, grid: tuple[int, int], query: int | None, side: int = 256):
  """The model's input ``[1, H, W, C]`` scaled to the unit range, enlarged (nearest) to about ``side``
  pixels, with the patch grid drawn and patch ``query`` outlined: uint8 ``[h, w, 3]``, and the scale."""
  image = model_input[0]
  image = (image - image.min()) / max(float(image.max() - image.min()), 1e-12)
  image = np.repeat(image, 3, axis=-1) if image.shape[-1] == 1 else image[..., :3]
  height, width = image.shape[:2]
  scale = max(1, side // max(height, width))
  big = np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)
  big = (255 * big).astype(np.uint8)
  patch_h, patch_w = height // grid[0] * scale, width // grid[1] * scale
  big[::patch_h, :] = big[::patch_h, :] // 2 + 64
  big[:, ::patch_w] = big[:, ::patch_w] // 2 + 64
  if query is not None:
    top, left = query // grid[1] * patch_h, query % grid[1] * patch_w
    big[top : top + patch_h, [left, min(left + patch_w, big.shape[1]) - 1]] = (0, 200, 255)
    big[[top, min(top + patch_h, big.shape[0]) - 1], left : left + patch_w] = (0, 200, 255)
  return big, scale


def patch_at(x: int, y: int, shape: tuple[int, int], grid: tuple[int, int], scale: int) -> int:
  """The patch (row-major) under pixel ``(x, y)`` of ``shown_image``'s picture of an input of ``shape``."""
  row = min(int(y) // scale * grid[0] // shape[0], grid[0] - 1)
  column = min(int(x) // scale * grid[1] // shape[1], grid[1] - 1)
  return row * grid[1] + column


# Sentences ----------------------------------------------------------------------------------------

MAX_CHARACTERS = 2000


@functools.partial(jax.jit, static_argnums=0, static_argnames=('beam_size', 'alpha', 'max_extra_length'))
def _beam(graphdef, state, src, *, beam_size, alpha, max_extra_length):
  from seq2seq.decoding import beam_search  # pylint: disable=g-import-not-at-top

  model = nnx.merge(graphdef, state)
  return beam_search(model, src, beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length)


def sentence_view(predictor, text: str, beam_size: int) -> dict:
  """The greedy and the beam hypothesis of one sentence, each with its log-probability (teacher-forced)
  and its tokens, cross-attention (per layer ``[heads, target, source]``) and the encoder's
  self-attention (per layer ``[heads, source, source]``; none for the RNN); ``unknown``: the words read
  as unknown."""
  from seq2seq.pictures import token_labels  # pylint: disable=g-import-not-at-top
  from seq2seq.tokenizer import UNK_ID  # pylint: disable=g-import-not-at-top

  task = predictor.task
  data = task.config.data
  if len(text) > MAX_CHARACTERS:
    raise InputError(f'the sentence has {len(text)} characters; the explorer reads at most {MAX_CHARACTERS}.')
  if not text.strip():
    raise InputError('the sentence is empty: type one to translate.')
  tokens = task.source_tokenizer.encode(text)
  if len(tokens) > data.max_source_length:
    raise InputError(
      f'the sentence has {len(tokens)} tokens; this model reads at most {data.max_source_length} '
      '(data.max_source_length).'
    )
  sentence = predictor.read(text)
  unknown = [word for word in text.split() if UNK_ID in task.source_tokenizer.encode(word)]
  ids = sentence.ids
  return {
    'source_ids': ids,
    'source_labels': token_labels(task.source_tokenizer, ids),
    'unknown': unknown,
    'hypotheses': _hypotheses(predictor, ids, beam_size),
  }


def _hypotheses(predictor, ids: list[int], beam_size: int) -> list[dict]:
  """``sentence_view``'s hypotheses of the source ``ids`` (padded to their length bucket's width)."""
  from seq2seq import prediction  # pylint: disable=g-import-not-at-top
  from seq2seq.decoding import translate  # pylint: disable=g-import-not-at-top
  from seq2seq.pictures import token_labels  # pylint: disable=g-import-not-at-top
  from seq2seq.tokenizer import BOS_ID, PAD_ID  # pylint: disable=g-import-not-at-top

  task = predictor.task
  data, decode = task.config.data, task.config.decode
  width = prediction.source_width(len(ids), data)
  src = np.full((1, width), PAD_ID, np.int32)
  src[0, : len(ids)] = ids
  model = predictor.model
  graphdef, state = _split(model)
  searches = {
    'greedy': (np.asarray(translate(model, jnp.asarray(src), max_extra_length=decode.max_extra_length)), None)
  }
  if beam_size > 1:
    tokens, score = _beam(
      graphdef,
      state,
      jnp.asarray(src),
      beam_size=int(beam_size),
      alpha=float(decode.alpha),
      max_extra_length=decode.max_extra_length,
    )
    searches[f'beam of {beam_size}'] = (np.asarray(tokens), float(np.asarray(score)[0]))
  hypotheses = []
  for search, (found, score) in searches.items():
    output = prediction.output_ids(found[0])
    decoder_input = np.full((1, found.shape[1]), PAD_ID, np.int32)
    decoder_input[0, : len(output)] = [BOS_ID, *output[:-1]]
    logits, intermediates = forward(model, src, decoder_input)
    log_probabilities = _log_softmax(logits[0, : len(output)].astype(np.float64))
    log_probability = float(np.sum(np.take_along_axis(log_probabilities, np.asarray(output)[:, None], 1)))
    cross = [layer[0, :, : len(output), : len(ids)] for layer in intermediates['cross_attention_weights']]
    encoder = [
      layer[0, :, : len(ids), : len(ids)] for layer in intermediates.get('encoder_attention_weights', [])
    ]
    hypotheses.append(
      {
        'search': search,
        'translation': task.target_tokenizer.decode(output),
        'log_probability': log_probability,
        'score': score,
        'output_ids': output,
        'target_labels': token_labels(task.target_tokenizer, output),
        'cross': cross,
        'encoder': encoder,
      }
    )
  return hypotheses


def _log_softmax(logits: np.ndarray) -> np.ndarray:
  """In NumPy: a JAX function would compile again for each length of output."""
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def sentence_widths(predictor) -> list[int]:
  """The widths ``sentence_view`` pads sources to (one per length bucket), shortest first."""
  from seq2seq import prediction  # pylint: disable=g-import-not-at-top

  data = predictor.task.config.data
  return sorted({prediction.source_width(n, data) for n in range(1, data.max_source_length + 1)})


def compile_sentence(predictor, width: int, beam_size: int) -> None:
  """Compiles ``sentence_view``'s searches and forward for sources padded to ``width``."""
  from seq2seq.tokenizer import UNK_ID  # pylint: disable=g-import-not-at-top

  _hypotheses(predictor, [UNK_ID] * width, beam_size)


# Clips ---------------------------------------------------------------------------------------------


def clip_view(predictor, example: Example, title: str):
  """The classes of one clip and the picture of its spatial, temporal and rolled-out attention."""
  from video import pictures  # pylint: disable=g-import-not-at-top

  logits, intermediates = forward(predictor.model, example.model_input)
  classes = _classes(predictor, logits[0])
  caption = f'predicted\n{classes[0]["name"]}\n({100 * classes[0]["probability"]:.1f}%)' if classes else ''
  figure = pictures.clip_attention_figure(predictor.model, example.model_input, intermediates, caption, title)
  return classes, figure


# The test set at a glance ------------------------------------------------------------------------


def test_examples(predictor, limit: int = 500) -> tuple[np.ndarray, np.ndarray]:
  """The first ``limit`` examples of the workdir's evaluation split as the model reads them, and their labels."""
  import contextlib  # pylint: disable=g-import-not-at-top

  from trainer.evaluation import workdir_task  # pylint: disable=g-import-not-at-top
  from trainer.io import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

  config = workdir_lib.load_config(predictor.workdir)
  task = workdir_task(predictor.workdir, config, read_data=True)
  task.prepare(predictor.workdir)
  key = 'clip' if family(predictor) == 'clip' else 'image'
  inputs, labels = [], []
  batches = task.eval_batches(config.eval_split, batch_size=64, process_index=0, process_count=1)
  with contextlib.closing(batches):
    for batch in batches:
      real = np.asarray(batch.get('mask', np.ones(len(batch['label'])))) > 0
      inputs.append(np.asarray(batch[key])[real])
      labels.append(np.asarray(batch['label'])[real])
      if sum(len(x) for x in labels) >= limit:
        break
  return np.concatenate(inputs)[:limit], np.concatenate(labels)[:limit]


def glance(predictor, inputs: np.ndarray, labels: np.ndarray) -> dict:
  """The pooled features of ``inputs`` projected on their first two principal components: ``points``
  ``[n, 2]``, ``predicted`` and ``labels``."""
  from sklearn.decomposition import PCA  # pylint: disable=g-import-not-at-top

  graphdef, state = _split(predictor.model)
  features, predicted = [], []
  for start in range(0, len(inputs), 64):
    chunk = inputs[start : start + 64]
    batch = np.zeros((64, *chunk.shape[1:]), np.float32)
    batch[: len(chunk)] = chunk
    logits, pooled = _logits_and_features(graphdef, state, jnp.asarray(batch))
    features.append(np.asarray(pooled, np.float32)[: len(chunk)])
    predicted.append(np.argmax(np.asarray(logits), axis=-1)[: len(chunk)])
  features = np.concatenate(features)
  points = PCA(n_components=2).fit_transform(features) if len(features) > 2 else np.zeros((len(features), 2))
  return {'points': points, 'predicted': np.concatenate(predicted), 'labels': labels}


def glance_figure(view: dict, title: str):
  """A scatter of ``glance``'s points coloured by class, mistakes ringed in red; also the pixel position of
  each point in the rendered picture (``drawing.pixels``), for clicks."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  figure = Figure(figsize=(5.5, 4.5), dpi=drawing.PIXELS_DPI)
  ax = figure.subplots()
  points, labels, predicted = view['points'], view['labels'], view['predicted']
  scatter = ax.scatter(points[:, 0], points[:, 1], c=labels, cmap='tab10', s=14)
  wrong = predicted != labels
  ax.scatter(points[wrong, 0], points[wrong, 1], facecolors='none', edgecolors='red', s=60, linewidths=1.2)
  ax.set(xlabel='principal component 1', ylabel='principal component 2')
  ax.set_title(f'{title}: {int(wrong.sum())} of {len(labels)} wrong (ringed)', fontsize=9)
  figure.colorbar(scatter, ax=ax, label='class')
  FigureCanvasAgg(figure).draw()
  display = ax.transData.transform(points)
  height = figure.bbox.height
  return figure, np.stack([display[:, 0], height - display[:, 1]], axis=1)
