"""Reading line-aligned parallel corpora, plain or gzipped, and their error messages."""

import gzip
from pathlib import Path

import pytest

from pipelines.parallel_text import read_parallel
from tests.real_data import data_set_dir

MULTI30K_DIR = data_set_dir('multi30k')


def write(path: Path, data: bytes) -> None:
  path.write_bytes(gzip.compress(data) if path.suffix == '.gz' else data)


@pytest.mark.parametrize(
  'src_name, tgt_name',
  [('train.de', 'train.en'), ('train.de.gz', 'train.en.gz'), ('train.de', 'train.en.gz')],
)
def test_reads_aligned_pairs_stripping_trailing_whitespace(tmp_path, src_name, tgt_name):
  write(tmp_path / src_name, 'Ein Hund läuft.  \r\n  Zwei Männer\n'.encode())
  write(tmp_path / tgt_name, b'A dog runs.\nTwo men\t')
  assert read_parallel(tmp_path, 'train', 'de', 'en') == [
    ('Ein Hund läuft.', 'A dog runs.'),
    ('  Zwei Männer', 'Two men'),
  ]


def test_line_separators_inside_a_sentence_do_not_split_it(tmp_path):
  write(tmp_path / 'val.de', 'eins\u2028zwei\x0cdrei\n'.encode())
  write(tmp_path / 'val.en', b'one two three\n')
  assert read_parallel(tmp_path, 'val', 'de', 'en') == [('eins\u2028zwei\x0cdrei', 'one two three')]


def test_missing_file_names_the_paths_tried(tmp_path):
  write(tmp_path / 'train.de', b'Hallo\n')
  with pytest.raises(FileNotFoundError) as error:
    read_parallel(tmp_path, 'train', 'de', 'en')
  assert str(tmp_path / 'train.en') in str(error.value)
  assert str(tmp_path / 'train.en.gz') in str(error.value)


def test_plain_and_gzipped_copies_together_are_refused(tmp_path):
  for name in ('train.de', 'train.de.gz', 'train.en'):
    write(tmp_path / name, b'x\n')
  with pytest.raises(ValueError, match='train.de.gz'):
    read_parallel(tmp_path, 'train', 'de', 'en')


def test_different_line_counts_name_both_files_and_counts(tmp_path):
  write(tmp_path / 'train.de.gz', b'a\nb\nc\n')
  write(tmp_path / 'train.en', b'a\nb\n')
  with pytest.raises(ValueError) as error:
    read_parallel(tmp_path, 'train', 'de', 'en')
  message = str(error.value)
  assert 'train.de.gz has 3 lines' in message and 'train.en has 2' in message


@pytest.mark.parametrize('name', ['train.en', 'train.en.gz'])
def test_empty_line_names_file_and_line(tmp_path, name):
  write(tmp_path / 'train.de', b'a\nb\nc\n')
  write(tmp_path / name, b'a\n  \nc\n')
  with pytest.raises(ValueError, match=f'{name}:2: empty line'):
    read_parallel(tmp_path, 'train', 'de', 'en')


@pytest.mark.parametrize('name', ['train.de', 'train.de.gz'])
def test_invalid_utf8_names_file_and_line(tmp_path, name):
  write(tmp_path / name, b'gut\nschl\xe4gt\n')
  write(tmp_path / 'train.en', b'good\nbeats\n')
  with pytest.raises(ValueError, match=f'{name}:2: invalid UTF-8'):
    read_parallel(tmp_path, 'train', 'de', 'en')


def test_corrupt_gzip_names_the_file(tmp_path):
  (tmp_path / 'train.de.gz').write_bytes(b'not gzip at all')
  write(tmp_path / 'train.en', b'x\n')
  with pytest.raises(ValueError, match='train.de.gz'):
    read_parallel(tmp_path, 'train', 'de', 'en')


@pytest.mark.skipif(not MULTI30K_DIR.is_dir(), reason=f'{MULTI30K_DIR} not present')
def test_reads_multi30k_validation_split():
  pairs = read_parallel(MULTI30K_DIR, 'val', 'de', 'en')
  assert len(pairs) == 1014
  assert pairs[0] == (
    'Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen',
    'A group of men are loading cotton onto a truck',
  )
  assert all(src and tgt and src == src.rstrip() and tgt == tgt.rstrip() for src, tgt in pairs)
