"""The translator's architectures behind ``config.model.architecture``: ``transformer`` (the
default, ``seq2seq.model.TransformerOptions``) or ``rnn`` (``seq2seq.rnn_model.RnnOptions``).

A section without the field is a Transformer's, and a Transformer's complete section has the field
only where it was given. ``make_translator`` is the one way the family builds its model from a
``config.model`` section: the architecture's options dataclass holds what the section leaves out.
"""

import ml_collections
from flax import nnx

from seq2seq import model, rnn_model
from trainer.errors import ConfigError

ARCHITECTURES = ('transformer', 'rnn')


def architecture_of(section) -> str:
  """``'transformer'`` or ``'rnn'`` for a ``model`` section or options; ``ConfigError`` for another."""
  if isinstance(section, rnn_model.RnnOptions):
    return 'rnn'
  if isinstance(section, model.TransformerOptions):
    return 'transformer'
  architecture = (section or {}).get('architecture', 'transformer')
  if architecture not in ARCHITECTURES:
    raise ConfigError(
      f'config.model.architecture is {architecture!r}; allowed values: {", ".join(ARCHITECTURES)}.'
    )
  return architecture


def model_options(section) -> 'model.TransformerOptions | rnn_model.RnnOptions':
  """The options of a ``model`` section (``ConfigDict``, ``dict`` or options) for its architecture."""
  if architecture_of(section) == 'rnn':
    return rnn_model.model_options(section)
  if isinstance(section, model.TransformerOptions):
    return section
  return model.model_options(
    {name: value for name, value in (section or {}).items() if name != 'architecture'}
  )


def model_section(section) -> ml_collections.ConfigDict:
  """A ``model`` section with every field of its architecture: the defaults with ``section``'s values
  over them (a Transformer's ``architecture`` where ``section`` gives it)."""
  if architecture_of(section) == 'rnn':
    return rnn_model.model_section(section)
  complete = model.model_section(model_options(section))
  if isinstance(section, (dict, ml_collections.ConfigDict)) and 'architecture' in section:
    complete.architecture = 'transformer'
  return complete


def make_translator(
  section, *, source_vocab_size: int, target_vocab_size: int, rngs: nnx.Rngs
) -> model.Transformer | rnn_model.RNNTranslator:
  """The model a ``config.model`` section (a ``ConfigDict`` or ``dict``) or options describe."""
  options = model_options(section)
  make = rnn_model.RNNTranslator if isinstance(options, rnn_model.RnnOptions) else model.Transformer
  return make(options, source_vocab_size=source_vocab_size, target_vocab_size=target_vocab_size, rngs=rngs)
