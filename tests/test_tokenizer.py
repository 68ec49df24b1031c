"""Word and SentencePiece tokenizers: round trips, special ids, saving and fingerprints."""

import json
import random
import sys

import pytest
from etils import epath
from fsspec.implementations.memory import MemoryFileSystem

from seq2seq.scan import generate_scan
from seq2seq.tokenizer import SentencePieceTokenizer, WordTokenizer, load_tokenizer
from trainer.io import storage

SUBJECTS = [
  'a man',
  'the woman',
  'two dogs',
  'a little girl',
  'several people',
  'an old worker',
  'a young boy',
  'three children',
  'the brown horse',
  'a smiling cyclist',
]
VERBS = [
  'is walking along',
  'sits beside',
  'looks at',
  'plays with',
  'runs toward',
  'stands near',
  'is jumping over',
  'waits for',
  'is painting',
  'climbs',
]
OBJECTS = [
  'the river',
  'a red ball',
  'the sandy beach',
  'a tall building',
  'some green trees',
  'the busy street',
  'a wooden fence',
  'the mountain',
  'a blue bicycle',
  'the crowd',
]


def sentences(seed: int, count: int = 300) -> list[str]:
  rng = random.Random(seed)
  return [
    f'{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)}.' for _ in range(count)
  ]


@pytest.fixture(scope='module')
def scan_texts():
  return [text for example in generate_scan()[:2000] for text in example]


@pytest.fixture(scope='module', params=['unigram', 'bpe'])
def sentencepiece_tokenizer(request, tmp_path_factory):
  directory = tmp_path_factory.mktemp(f'spm_{request.param}')
  return SentencePieceTokenizer.train(sentences(seed=0), directory, vocab_size=80, model_type=request.param)


def test_word_tokenizer_round_trips_scan(scan_texts):
  tokenizer = WordTokenizer.build(scan_texts)
  assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
  assert tokenizer.vocab_size == 4 + 13 + 6
  for text in scan_texts[:200]:
    ids = tokenizer.encode(text)
    assert len(ids) == len(text.split())
    assert tokenizer.decode(ids) == text


def test_word_vocabulary_is_sorted_and_independent_of_text_order(scan_texts):
  tokenizer = WordTokenizer.build(scan_texts)
  assert tokenizer.vocab[4:] == sorted(tokenizer.vocab[4:])
  assert WordTokenizer.build(reversed(scan_texts)).fingerprint == tokenizer.fingerprint


def test_word_tokenizer_maps_unknown_words_to_unk():
  tokenizer = WordTokenizer.build(['jump twice', 'walk left'])
  assert tokenizer.encode('jump thrice') == [tokenizer.encode('jump')[0], tokenizer.unk_id]
  assert tokenizer.decode(tokenizer.encode('fly left')) == '<unk> left'


def test_word_decode_stops_at_eos_and_skips_pad_and_bos():
  tokenizer = WordTokenizer.build(['jump twice'])
  jump, twice = tokenizer.encode('jump twice')
  ids = [tokenizer.bos_id, jump, tokenizer.pad_id, twice, tokenizer.eos_id, jump, tokenizer.pad_id]
  assert tokenizer.decode(ids) == 'jump twice'


def test_word_tokenizer_save_load(tmp_path, scan_texts):
  tokenizer = WordTokenizer.build(scan_texts)
  tokenizer.save(tmp_path)
  loaded = load_tokenizer(tmp_path)
  assert isinstance(loaded, WordTokenizer)
  assert loaded.fingerprint == tokenizer.fingerprint
  assert loaded.vocab == tokenizer.vocab
  assert [loaded.encode(text) for text in scan_texts[:50]] == [
    tokenizer.encode(text) for text in scan_texts[:50]
  ]


def test_sentencepiece_round_trips_natural_text(sentencepiece_tokenizer):
  tokenizer = sentencepiece_tokenizer
  assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
  assert tokenizer.vocab_size == 80
  for text in sentences(seed=1, count=50):
    ids = tokenizer.encode(text)
    assert ids and all(4 <= token_id < tokenizer.vocab_size for token_id in ids)
    assert tokenizer.decode(ids) == text


def test_sentencepiece_maps_unseen_characters_to_unk(sentencepiece_tokenizer):
  ids = sentencepiece_tokenizer.encode('A man sees 7 zebras')
  assert sentencepiece_tokenizer.unk_id in ids


def test_sentencepiece_decode_stops_at_eos_and_skips_pad_and_bos(sentencepiece_tokenizer):
  tokenizer = sentencepiece_tokenizer
  ids = tokenizer.encode('Two dogs climbs the mountain.')
  padded = [tokenizer.bos_id] + ids + [tokenizer.eos_id] + tokenizer.encode('A man.') + [tokenizer.pad_id] * 3
  assert tokenizer.decode(padded) == 'Two dogs climbs the mountain.'


def test_sentencepiece_save_load(sentencepiece_tokenizer, tmp_path):
  tokenizer = sentencepiece_tokenizer
  tokenizer.save(tmp_path)
  loaded = load_tokenizer(tmp_path)
  assert isinstance(loaded, SentencePieceTokenizer)
  assert loaded.fingerprint == tokenizer.fingerprint
  texts = sentences(seed=2, count=50)
  assert [loaded.encode(text) for text in texts] == [tokenizer.encode(text) for text in texts]
  assert SentencePieceTokenizer.load(tmp_path / 'spm.model').fingerprint == tokenizer.fingerprint


def test_sentencepiece_train_writes_a_loadable_directory(tmp_path):
  tokenizer = SentencePieceTokenizer.train(
    sentences(seed=0),
    tmp_path,
    vocab_size=400,
    model_type='unigram',
    byte_fallback=True,
    hard_vocab_limit=False,
  )
  assert (tmp_path / 'spm.model').is_file()
  assert load_tokenizer(tmp_path).fingerprint == tokenizer.fingerprint
  assert tokenizer.unk_id not in tokenizer.encode('zebras 7')
  assert tokenizer.decode(tokenizer.encode('zebras 7')) == 'zebras 7'


def test_fingerprint_depends_on_training_data(tmp_path):
  first = SentencePieceTokenizer.train(sentences(seed=0), tmp_path / 'a', vocab_size=60)
  same = SentencePieceTokenizer.train(sentences(seed=0), tmp_path / 'b', vocab_size=60)
  other = SentencePieceTokenizer.train(
    sentences(seed=0)[:150] + ['Zebras graze.'] * 20, tmp_path / 'c', vocab_size=60
  )
  assert first.fingerprint == same.fingerprint
  assert first.fingerprint != other.fingerprint
  assert WordTokenizer.build(['jump']).fingerprint != WordTokenizer.build(['walk']).fingerprint


def test_load_tokenizer_errors(tmp_path, sentencepiece_tokenizer):
  with pytest.raises(FileNotFoundError, match='tokenizer.json'):
    load_tokenizer(tmp_path / 'nowhere')

  sentencepiece_tokenizer.save(tmp_path / 'spm')
  (tmp_path / 'spm' / 'spm.model').unlink()
  with pytest.raises(FileNotFoundError, match='spm.model'):
    load_tokenizer(tmp_path / 'spm')

  WordTokenizer.build(['jump walk']).save(tmp_path / 'word')
  config_path = tmp_path / 'word' / 'tokenizer.json'
  config = json.loads(config_path.read_text())
  config_path.write_text(json.dumps(dict(config, words=['jump', 'run'])))
  with pytest.raises(ValueError, match='fingerprint'):
    load_tokenizer(tmp_path / 'word')
  config_path.write_text(json.dumps(dict(config, kind='bytes')))
  with pytest.raises(ValueError, match="unknown tokenizer kind 'bytes'"):
    load_tokenizer(tmp_path / 'word')


class _MemoryBucket(MemoryFileSystem):
  """``gs://`` URLs kept in memory: what gcsfs does for a bucket, without one."""

  protocol = ('gs', 'gcs')
  root_marker = ''


@pytest.fixture
def memory_bucket(monkeypatch, tmp_path):
  registry = sys.modules['fsspec.registry']._registry
  for protocol in _MemoryBucket.protocol:
    monkeypatch.setitem(registry, protocol, _MemoryBucket)
  monkeypatch.setattr(_MemoryBucket, 'store', {})
  monkeypatch.setattr(_MemoryBucket, 'pseudo_dirs', [''])
  monkeypatch.chdir(tmp_path)  # where a path mistaken for a local one would land
  # epath keeps one file system per protocol: start from none, and leave none of ours behind for
  # later tests in this process (the bucket tests' gs:// must reach their emulator through gcsfs).
  epath_filesystems = epath.backend.fsspec_backend._get_filesystem
  epath_filesystems.cache_clear()
  try:
    yield _MemoryBucket.store
  finally:
    epath_filesystems.cache_clear()
  assert not list(tmp_path.iterdir()), 'a bucket URL was written as a local path'


@pytest.mark.parametrize('shared', [True, False])
def test_workdir_tokenizers_in_a_bucket(memory_bucket, shared):
  from seq2seq.workdir_tokenizers import default_tokenizer_config, load_saved_tokenizers, prepare_tokenizers

  config = default_tokenizer_config()
  config.update(shared=shared, vocab_size=60)
  pairs = list(zip(sentences(seed=0), sentences(seed=1)))
  workdir = storage.as_path('gs://bucket/run')
  source, target = prepare_tokenizers(config, lambda: pairs, workdir)
  folders = [''] if shared else ['source/', 'target/']
  assert sorted(memory_bucket) == sorted(
    f'gs://bucket/run/tokenizer/{folder}{name}'
    for folder in folders
    for name in ('spm.model', 'tokenizer.json')
  )

  def no_data():
    raise AssertionError('a saved tokenizer is loaded, not trained again')

  again = prepare_tokenizers(config, no_data, workdir)
  saved = load_saved_tokenizers(config, workdir)
  for tokenizers in (again, saved):
    assert [t.fingerprint for t in tokenizers] == [source.fingerprint, target.fingerprint]
  config.model_file = f'gs://bucket/run/tokenizer/{folders[0]}spm.model'  # a model file in a bucket
  if not shared:
    config.target_model_file = 'gs://bucket/run/tokenizer/target/spm.model'
  assert (
    prepare_tokenizers(config, no_data, storage.as_path('gs://bucket/other'))[1].fingerprint
    == target.fingerprint
  )
  assert 'gs://bucket/other/tokenizer/' + folders[-1] + 'spm.model' in memory_bucket
