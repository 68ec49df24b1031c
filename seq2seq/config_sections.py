"""The translator family's config sections and their defaults (``Translation.config_sections``).

``data`` (``seq2seq.task`` says what each field does) with its ``tokenizer`` section
(``seq2seq.tokenizer``), and ``decode``. The ``model`` section's defaults are its architecture's
(``seq2seq.architectures``).
"""

import dataclasses
from typing import Literal

from seq2seq.scan import SCAN_SPLITS
from trainer.config_sections import section_reader
from trainer.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Tokenizer:
  kind: Literal['sentencepiece', 'word'] = 'sentencepiece'
  shared: bool = True  #: one vocabulary for both languages
  model_type: Literal['unigram', 'bpe'] = 'unigram'  #: SentencePiece's
  vocab_size: int = 8000
  character_coverage: float = 1.0
  max_training_sentences: int = 1_000_000
  model_file: str | None = None  #: a trained SentencePiece model to use instead of training one
  target_model_file: str | None = None


@dataclasses.dataclass(frozen=True)
class TextData:
  source: Literal['scan', 'parallel', 'records', 'tfds'] = 'scan'
  split: Literal[SCAN_SPLITS] = 'simple'  #: SCAN's split
  path: str | None = None
  name: str | None = None
  data_dir: str | None = None
  src_lang: str | None = None
  tgt_lang: str | None = None
  train_split: str = 'train'
  holdout: int = 0  #: training pairs held out as the split 'holdout' (``seq2seq.sources``)
  max_source_length: int = 64
  max_target_length: int = 64
  pad_to_multiple: int = 8
  max_eval_examples: int = 0  #: 0 = the whole split
  packing: bool = False
  tokenizer: Tokenizer = Tokenizer()

  def __post_init__(self):
    if self.holdout < 0:
      raise ConfigError(f'config.data.holdout is {self.holdout}; it must be a whole number of pairs >= 0.')


@dataclasses.dataclass(frozen=True)
class Decode:
  beam_size: int = 4  #: 1 = greedy
  alpha: float = 0.6  #: length penalty
  max_extra_length: int = 50
  num_samples: int = 5  #: translations shown in TensorBoard


def model_section(section, config=None):
  """The complete ``model`` section: its architecture's defaults with ``section``'s values over them
  (``architecture`` itself only where the section names it)."""
  from seq2seq.architectures import model_section as complete  # pylint: disable=g-import-not-at-top  (JAX)

  del config  # the section alone decides

  return complete(section or {})


SECTIONS = {
  'model': model_section,
  'data': section_reader(TextData, 'data'),
  'decode': section_reader(Decode, 'decode'),
}
