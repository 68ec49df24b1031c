"""The translator's architectures behind ``config.model.architecture``: ``transformer`` (the
default, ``seq2seq.model``) or ``rnn`` (``seq2seq.rnn_model``).

A config without the field is a Transformer's (configs written before the RNN existed).
"""

import ml_collections
from flax import nnx

from seq2seq import model, rnn_model

ARCHITECTURES = ('transformer', 'rnn')


def architecture_of(model_config: ml_collections.ConfigDict) -> str:
  architecture = model_config.get('architecture', 'transformer')
  if architecture not in ARCHITECTURES:
    raise ValueError(
      f'Unknown model.architecture {architecture!r}; allowed values: {", ".join(ARCHITECTURES)}.'
    )
  return architecture


def default_model_config(architecture: str = 'transformer') -> ml_collections.ConfigDict:
  """Every field of the ``model`` section for ``architecture``."""
  if architecture == 'rnn':
    return rnn_model.default_model_config()
  return model.default_model_config()


def make_translator(
  model_config: ml_collections.ConfigDict, *, source_vocab_size: int, target_vocab_size: int, rngs: nnx.Rngs
) -> nnx.Module:
  """The model a ``config.model`` section describes."""
  make = rnn_model.make_rnn_translator if architecture_of(model_config) == 'rnn' else model.make_transformer
  return make(
    model_config, source_vocab_size=source_vocab_size, target_vocab_size=target_vocab_size, rngs=rngs
  )
