"""The translator's pictures of one trained model (``TranslationReporting.draw_pictures``).

``cross_attention_<run>.png``    the decoder's cross-attention (mean over heads) for the first
                                 sentence of the evaluation split, greedily translated, one panel
                                 per layer (the RNN has one layer of one head): source tokens
                                 across, target tokens down
``posemb_similarity_<run>.png``  for a learned table (``learn1d`` and the like): the cosine similarity of each
                                 source position's embedding to every other's
"""

import pathlib

import jax.numpy as jnp
import numpy as np

from attention import Encoder, drawing
from attention.positional import kinds
from seq2seq.decoding import translate
from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

_SPECIAL = {PAD_ID: '<pad>', UNK_ID: '<unk>', BOS_ID: '<bos>', EOS_ID: '<eos>'}


def draw(model, task, out_dir: pathlib.Path, name: str, title: str) -> list[pathlib.Path]:
  paths = []
  positional = model.encoder.positional if isinstance(model.encoder, Encoder) else None  # the RNN's has none
  if positional is not None and positional.kind in kinds(adds_table=True, learned=True):
    where = 'encoder, first layer' if len(positional.tables) > 1 else 'encoder'
    paths.append(
      drawing.plot_similarity(
        np.asarray(positional.tables[0](), np.float32),
        None,
        f'{title}: {positional.kind} position embedding similarity ({where})',
        out_dir / f'posemb_similarity_{name}.png',
      )
    )
  paths.append(plot_cross_attention(model, task, title, out_dir / f'cross_attention_{name}.png'))
  return paths


def _token_labels(tokenizer, ids: list[int]) -> list[str]:
  return [_SPECIAL.get(token) or tokenizer.decode([token]) or f'#{token}' for token in ids]


def plot_cross_attention(model, task, title: str, path: pathlib.Path) -> pathlib.Path:
  """The cross-attention of the first evaluation sentence, greedily translated."""
  config = task.config
  source, reference = task.eval_pairs(config.eval_split)[0]
  source_ids = task.source_tokenizer.encode(source)[: config.data.max_source_length]
  output = [
    int(token)
    for token in np.asarray(
      translate(
        model,
        jnp.asarray([source_ids], jnp.int32),
        beam_size=1,
        max_extra_length=config.decode.max_extra_length,
      )
    )[0]
  ]
  output = output[: output.index(EOS_ID) + 1] if EOS_ID in output else [token for token in output if token]
  hypothesis = task.target_tokenizer.decode(output)
  caption = f'{title}\nreference: {reference}\nhypothesis: {hypothesis}'
  return plot_sentence_attention(model, task, source_ids, output, caption, path)


def plot_sentence_attention(
  model, task, source_ids: list[int], output_ids: list[int], caption: str, path: pathlib.Path
) -> pathlib.Path:
  """The decoder's cross-attention (mean over heads), one panel per layer, while it writes ``output_ids``
  (ending with EOS) for ``source_ids``: source tokens across, output tokens down."""
  source_array = jnp.asarray([source_ids], jnp.int32)
  decoder_input = jnp.asarray([[BOS_ID] + list(output_ids[:-1])], jnp.int32)
  _, intermediates = model(source_array, decoder_input, return_weights=True)
  layers = [
    np.asarray(layer[0], np.float32).mean(axis=0) for layer in intermediates['cross_attention_weights']
  ]
  return drawing.plot_token_attention(
    layers,
    _token_labels(task.source_tokenizer, source_ids),
    _token_labels(task.target_tokenizer, output_ids),
    caption,
    path,
    xlabel='source',
    ylabel='translation',
  )
