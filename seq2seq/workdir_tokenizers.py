"""A workdir's tokenizers: made on the first run, then loaded and checked on every later one.

``config.data.tokenizer`` fields:
  kind                    'word' (whitespace words of the training split, for SCAN) or
                          'sentencepiece'
  shared                  one vocabulary for source and target (needed by
                          model.share_embeddings); else one per side
  model_type              sentencepiece: 'unigram' or 'bpe'
  vocab_size              sentencepiece: the vocabulary size to train (a smaller one is
                          accepted when the training text cannot fill it)
  character_coverage      sentencepiece: share of characters the model must cover
  max_training_sentences  sentencepiece: train on at most this many sentences, a seeded
                          sample of the training split (0 = all)
  model_file              an existing SentencePiece model to use instead of training one
                          (the shared or the source one)
  target_model_file       the same for the target side when not shared

They are saved in ``<workdir>/tokenizer`` (``source/`` and ``target/`` when not shared), a local
folder or a prefix in a bucket (``trainer.io.storage``); a ``model_file`` may be either too.
A later run, or ``evaluate.py``, loads them; a ``model_file``, or a word vocabulary built
from today's data, whose fingerprint differs from the saved one is an error, because the
checkpoints were trained with the saved one. Predictions load them as saved, reading no data
(``load_saved_tokenizers``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import ml_collections
import numpy as np

from seq2seq import config_sections
from seq2seq.tokenizer import CONFIG_FILE, SentencePieceTokenizer, Tokenizer, WordTokenizer, load_tokenizer
from trainer.config_sections import to_section
from trainer.errors import ConfigError, DataError, MissingFileError
from trainer.io import storage

TOKENIZER_DIR = 'tokenizer'


def default_tokenizer_config() -> ml_collections.ConfigDict:
  """Every ``data.tokenizer`` field with its default (``seq2seq.config_sections.Tokenizer``)."""
  return to_section(config_sections.Tokenizer())


def check_tokenizer_config(config: ml_collections.ConfigDict) -> None:
  model_files = [config.model_file] + ([] if config.shared else [config.target_model_file])
  if config.kind == 'word' and any(model_files):
    raise ConfigError("tokenizer.model_file is for kind 'sentencepiece', not 'word'")
  if config.shared and config.target_model_file:
    raise ConfigError(
      'tokenizer.target_model_file is only for separate vocabularies (tokenizer.shared=False)'
    )
  for path in model_files:
    if path and not storage.as_path(path).is_file():
      raise MissingFileError(f'SentencePiece model file {path} not found')


def prepare_tokenizers(
  config: ml_collections.ConfigDict,
  train_pairs: Callable[[], Sequence[tuple[str, str]]],
  workdir: storage.Path,
) -> tuple[Tokenizer, Tokenizer]:
  """``(source tokenizer, target tokenizer)`` of the workdir (the same object when shared).

  ``train_pairs`` is called only when a tokenizer has to be trained, so a workdir that
  already holds its tokenizers (evaluation, resuming) reads no training data here.
  """
  directory = workdir / TOKENIZER_DIR
  if config.shared:
    tokenizer = _prepare(
      config, directory, lambda: [text for pair in train_pairs() for text in pair], config.model_file
    )
    return tokenizer, tokenizer
  source = _prepare(
    config, directory / 'source', lambda: [source for source, _ in train_pairs()], config.model_file
  )
  target = _prepare(
    config, directory / 'target', lambda: [target for _, target in train_pairs()], config.target_model_file
  )
  return source, target


def load_saved_tokenizers(
  config: ml_collections.ConfigDict, workdir: storage.Path
) -> tuple[Tokenizer, Tokenizer]:
  """``(source tokenizer, target tokenizer)`` as the workdir saved them, checked against nothing else
  (no training split, no ``model_file``): for a trained workdir used without its data (predictions)."""
  directory = workdir / TOKENIZER_DIR
  if config.shared:
    tokenizer = load_tokenizer(directory)
    return tokenizer, tokenizer
  return load_tokenizer(directory / 'source'), load_tokenizer(directory / 'target')


def _prepare(
  config: ml_collections.ConfigDict,
  directory: storage.Path,
  texts: Callable[[], list[str]],
  model_file: str | None,
) -> Tokenizer:
  if (directory / CONFIG_FILE).is_file():
    saved = load_tokenizer(directory)
    if model_file:
      wanted, what = SentencePieceTokenizer.load(model_file), f'tokenizer.model_file {model_file}'
    elif config.kind == 'word':
      wanted, what = WordTokenizer.build(texts()), "the training split's word vocabulary"
    else:
      return saved
    if wanted.fingerprint != saved.fingerprint:
      raise DataError(
        f'{directory} holds the tokenizer this workdir was trained with (fingerprint {saved.fingerprint[:12]}), '
        f'but {what} has fingerprint {wanted.fingerprint[:12]}; use a new --workdir or the same tokenizer.'
      )
    return saved
  if model_file:
    tokenizer = SentencePieceTokenizer.load(model_file)
  elif config.kind == 'word':
    tokenizer = WordTokenizer.build(texts())
  else:
    return SentencePieceTokenizer.train(
      _sample(texts(), config.max_training_sentences),
      directory,
      vocab_size=config.vocab_size,
      model_type=config.model_type,
      character_coverage=config.character_coverage,
      hard_vocab_limit=False,
    )
  tokenizer.save(directory)
  return tokenizer


def _sample(texts: list[str], limit: int) -> list[str]:
  if not limit or len(texts) <= limit:
    return texts
  chosen = np.random.default_rng(0).choice(len(texts), size=limit, replace=False)
  return [texts[i] for i in np.sort(chosen)]
