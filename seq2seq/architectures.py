"""The translator's architectures behind ``config.model.architecture``: ``transformer`` (the
default, ``seq2seq.model``) or ``rnn`` (``seq2seq.rnn_model``).

A config without the field is a Transformer's (configs written before the RNN existed).
``make_translator`` is the one way the family builds its model from a ``config.model`` section:
the architecture's builder fills in what the section lacks from that architecture's
``default_model_config``.
"""

import ml_collections
from flax import nnx

from attention.options import with_defaults
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


def model_section(model_config) -> ml_collections.ConfigDict:
  """``model_config`` with what it lacks taken from its architecture's ``default_model_config``
  (``architecture`` included); ``ValueError`` for an unknown architecture or field."""
  architecture = architecture_of(model_config)
  return with_defaults(
    model_config, dict(default_model_config(architecture).items(), architecture=architecture)
  )


def make_translator(
  model_config, *, source_vocab_size: int, target_vocab_size: int, rngs: nnx.Rngs
) -> nnx.Module:
  """The model a ``config.model`` section (a ``ConfigDict`` or ``dict``) describes; ``ValueError`` for an
  unknown architecture or a field that architecture does not have."""
  options = model_section(model_config).to_dict()
  make = rnn_model.make_rnn_translator if options.pop('architecture') == 'rnn' else model.make_transformer
  return make(options, source_vocab_size=source_vocab_size, target_vocab_size=target_vocab_size, rngs=rngs)
