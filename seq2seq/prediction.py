"""The translator's predictions on a user's sentences (``Translation.prediction``): each tokenized and
truncated as evaluation does, decoded as evaluation decodes, its cross-attention drawn on request."""

import dataclasses
import os

import jax.numpy as jnp
import numpy as np

from seq2seq import input_pipeline
from seq2seq.decoding import translate
from seq2seq.model import PAD_ID
from seq2seq.tokenizer import EOS_ID, UNK_ID
from trainer.errors import InputError
from trainer.prediction import Prediction, prediction_rows


@dataclasses.dataclass(frozen=True)
class Sentence:
  """A source sentence to translate and its token ids, truncated as evaluation truncates them."""

  text: str
  ids: list[int]


def source_width(length: int, data) -> int:
  """The padded width of a source of ``length`` tokens: its length bucket's, as evaluation pads it."""
  boundaries = np.asarray(
    input_pipeline.bucket_boundaries(max(data.max_source_length, data.max_target_length))
  )
  return input_pipeline.padded_width(length, boundaries, data.max_source_length)


def output_ids(row) -> list[int]:
  """One decoded row's token ids up to and including the end of sentence, without the padding."""
  output = [int(token) for token in row]
  return output[: output.index(EOS_ID) + 1] if EOS_ID in output else [t for t in output if t]


class TranslationPrediction(Prediction):
  """Translations of sentences with the tokenizers and the ``data`` and ``decode`` config of ``task`` (a
  ``seq2seq.task.Translation``, prepared)."""

  def __init__(self, task):
    self.task = task

  def read_input(self, item):
    """A source sentence, tokenized and truncated to ``data.max_source_length`` as evaluation does."""
    self.task.check_prepared()
    what = 'this workdir translates sentences (arguments, --input FILE, or standard input one per line)'
    if not isinstance(item, str):
      raise InputError(f'a {type(item).__name__} is not a sentence; {what}.')
    if not item.strip():
      raise InputError(f'empty sentence {item!r}; {what}.')
    if os.path.isfile(item):
      raise InputError(f'{item} is a file, not a sentence; {what}.')
    ids = self.task.source_tokenizer.encode(item)[: self.task.config.data.max_source_length]
    if not ids or all(token == UNK_ID for token in ids):
      raise InputError(f'{item!r}: none of its words or characters is in the source vocabulary.')
    return Sentence(item, ids)

  def predict(self, model, inputs, options):
    """``{'translation': text}`` per sentence, decoded as evaluation decodes (``decode`` config, with
    ``options.beam_size`` and ``options.alpha`` when given): batched by length bucket, so each bucket
    width (and batch size) is compiled once."""
    data, decode = self.task.config.data, self.task.config.decode
    beam_size = options.beam_size or decode.beam_size
    alpha = decode.alpha if options.alpha is None else options.alpha
    widths = [source_width(len(s.ids), data) for s in inputs]
    predictions = [None] * len(inputs)
    for width in sorted(set(widths)):
      members = [index for index, w in enumerate(widths) if w == width]
      for start in range(0, len(members), options.batch_size):
        group = members[start : start + options.batch_size]
        src = np.full((prediction_rows(len(group), options.batch_size), width), PAD_ID, np.int32)
        for row, index in enumerate(group):
          src[row, : len(inputs[index].ids)] = inputs[index].ids
        tokens = np.asarray(
          translate(
            model,
            jnp.asarray(src),
            beam_size=beam_size,
            alpha=alpha,
            max_extra_length=decode.max_extra_length,
          )
        )
        for row, index in enumerate(group):
          output = output_ids(tokens[row])
          predictions[index] = {
            'translation': self.task.target_tokenizer.decode(output),
            '_output_ids': output,
          }
    return predictions

  def present(self, name, prediction):
    del name
    return prediction['translation']

  def explain(self, model, item, prediction, path, title):
    from seq2seq import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    caption = f'{title}\nsource: {item.text}\ntranslation: {prediction["translation"]}'
    return pictures.plot_sentence_attention(
      model, self.task, item.ids, prediction['_output_ids'], caption, path
    )
