"""Tokenizers: one small interface, a whitespace word vocabulary and SentencePiece.

Both reserve pad=0 and have BOS, EOS and unknown ids. `save(directory)` writes
`tokenizer.json` (the kind, the fingerprint and a word vocabulary) plus `spm.model` for
SentencePiece; `load_tokenizer(directory)` reads it back. The directory may be a local
folder or a prefix in a bucket (`gs://bucket/run/tokenizer`): every read and write goes through
`trainer.io.storage`, and SentencePiece trains into memory and loads from bytes. The fingerprint is the
sha256 of the vocabulary or model bytes, so later code can check that a tokenizer matches a
checkpoint.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import Iterable, Protocol, Sequence

import sentencepiece

from trainer.errors import ConfigError, DataError, MissingFileError
from trainer.io import storage

CONFIG_FILE = 'tokenizer.json'
SPM_MODEL_FILE = 'spm.model'
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class Tokenizer(Protocol):
  pad_id: int
  bos_id: int
  eos_id: int
  unk_id: int
  vocab_size: int
  fingerprint: str

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`, without BOS or EOS."""

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids` up to the first EOS, skipping PAD and BOS."""

  def save(self, directory) -> None:
    """Write what `load_tokenizer(directory)` needs."""


def _sha256(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def _ids_before_eos(ids: Sequence[int], eos_id: int, skipped: set[int]) -> list[int]:
  kept = []
  for token_id in ids:
    token_id = int(token_id)
    if token_id == eos_id:
      break
    if token_id not in skipped:
      kept.append(token_id)
  return kept


def _write_config(directory: storage.Path, config: dict) -> None:
  storage.write_text(directory / CONFIG_FILE, json.dumps(config, ensure_ascii=False, indent=1) + '\n')


class WordTokenizer:
  """Whitespace-separated words; the vocabulary is the sorted set of training words."""

  SPECIAL_TOKENS = ('<pad>', '<unk>', '<bos>', '<eos>')  # at PAD_ID, UNK_ID, BOS_ID, EOS_ID

  def __init__(self, words: Sequence[str]):
    self.vocab = list(self.SPECIAL_TOKENS) + list(words)
    self.word_to_id = {word: token_id for token_id, word in enumerate(self.vocab)}
    if len(self.word_to_id) != len(self.vocab):
      raise DataError('WordTokenizer vocabulary has duplicate or reserved words')
    self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
    self.vocab_size = len(self.vocab)
    self.fingerprint = _sha256(json.dumps(self.vocab, ensure_ascii=False).encode('utf-8'))

  @classmethod
  def build(cls, texts: Iterable[str]) -> WordTokenizer:
    words = {word for text in texts for word in text.split()}
    return cls(sorted(words - set(cls.SPECIAL_TOKENS)))

  def encode(self, text: str) -> list[int]:
    return [self.word_to_id.get(word, self.unk_id) for word in text.split()]

  def decode(self, ids: Sequence[int]) -> str:
    kept = _ids_before_eos(ids, self.eos_id, {self.pad_id, self.bos_id})
    return ' '.join(self.vocab[token_id] for token_id in kept)

  def save(self, directory) -> None:
    words = self.vocab[len(self.SPECIAL_TOKENS) :]
    _write_config(directory, {'kind': 'word', 'fingerprint': self.fingerprint, 'words': words})


class SentencePieceTokenizer:
  """A SentencePiece model (unigram or BPE) with pad=0, unk=1, bos=2, eos=3."""

  def __init__(self, model_bytes: bytes):
    self.model_bytes = model_bytes
    self.processor = sentencepiece.SentencePieceProcessor(model_proto=model_bytes)
    self.pad_id = self.processor.pad_id()
    self.unk_id = self.processor.unk_id()
    self.bos_id = self.processor.bos_id()
    self.eos_id = self.processor.eos_id()
    if (self.pad_id, self.unk_id, self.bos_id, self.eos_id) != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
      raise DataError(
        f'SentencePiece model has pad/unk/bos/eos ids {self.pad_id}/{self.unk_id}/{self.bos_id}/'
        f'{self.eos_id}; expected {PAD_ID}/{UNK_ID}/{BOS_ID}/{EOS_ID}'
      )
    self.vocab_size = self.processor.get_piece_size()
    self.fingerprint = _sha256(model_bytes)

  @classmethod
  def train(
    cls,
    texts: Iterable[str],
    directory,
    vocab_size: int,
    model_type: str = 'unigram',
    character_coverage: float = 1.0,
    byte_fallback: bool = False,
    **trainer_options,
  ) -> SentencePieceTokenizer:
    """Train on `texts`, save to `directory` (spm.model and tokenizer.json), return it.

    `trainer_options` go to sentencepiece's trainer unchanged (e.g. hard_vocab_limit,
    num_threads); its INFO log is off unless `minloglevel=0` is passed.
    """
    if model_type not in ('unigram', 'bpe'):
      raise ConfigError(f"model_type must be 'unigram' or 'bpe', got {model_type!r}")
    trainer_options.setdefault('minloglevel', 1)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(texts),
      model_writer=model,
      vocab_size=vocab_size,
      model_type=model_type,
      character_coverage=character_coverage,
      byte_fallback=byte_fallback,
      pad_id=PAD_ID,
      unk_id=UNK_ID,
      bos_id=BOS_ID,
      eos_id=EOS_ID,
      **trainer_options,
    )
    tokenizer = cls(model.getvalue())
    tokenizer.save(directory)
    return tokenizer

  @classmethod
  def load(cls, model_file) -> SentencePieceTokenizer:
    """The model in ``model_file``: a local path or an object in a bucket."""
    return cls(storage.as_path(model_file).read_bytes())

  def encode(self, text: str) -> list[int]:
    return self.processor.encode(text, out_type=int)

  def decode(self, ids: Sequence[int]) -> str:
    return self.processor.decode(_ids_before_eos(ids, self.eos_id, {self.pad_id, self.bos_id}))

  def save(self, directory: storage.Path) -> None:
    storage.write_bytes(directory / SPM_MODEL_FILE, self.model_bytes)
    _write_config(
      directory, {'kind': 'sentencepiece', 'fingerprint': self.fingerprint, 'model_file': SPM_MODEL_FILE}
    )


def load_tokenizer(directory: storage.Path) -> Tokenizer:
  """The tokenizer that `save(directory)` wrote; checks its fingerprint."""
  config_path = directory / CONFIG_FILE
  if not config_path.is_file():
    raise MissingFileError(f'no tokenizer in {directory}: {config_path} is missing')
  config = json.loads(config_path.read_text(encoding='utf-8'))
  kind = config.get('kind')
  if kind == 'word':
    tokenizer = WordTokenizer(config['words'])
  elif kind == 'sentencepiece':
    model_path = directory / config['model_file']
    if not model_path.is_file():
      raise MissingFileError(f'{config_path} names SentencePiece model {model_path}, which is missing')
    tokenizer = SentencePieceTokenizer.load(model_path)
  else:
    raise DataError(f"{config_path}: unknown tokenizer kind {kind!r}; expected 'word' or 'sentencepiece'")
  if tokenizer.fingerprint != config.get('fingerprint'):
    raise DataError(
      f'{config_path}: fingerprint {config.get("fingerprint")} does not match the '
      f'saved vocabulary or model ({tokenizer.fingerprint})'
    )
  return tokenizer
