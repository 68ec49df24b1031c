"""Damaged data files end in one line naming the file and what is wrong with it, before anything is
written: a gzipped IDX file with an invalid deflate stream, a parallel-text ``.gz`` with corrupted
deflate data, a SCAN file with invalid UTF-8."""

import gzip

import pytest

from tests.test_image_data import write_idx_folder
from tests.translation_test_configs import tiny_parallel_config, tiny_translation_config
from tests.vit_test_configs import tiny_vit_config
from trainer.errors import DataError
from trainer.loop import train_and_evaluate


def _damage_deflate(path):
  """Rewrites ``path`` (a gzip file) with its first deflate block of the reserved type 3."""
  data = bytearray(path.read_bytes())
  start = 10
  if data[3] & 0x08:  # FNAME: a file name, ended by a zero byte, before the deflate data
    start = data.index(0, start) + 1
  data[start] = 0x07  # BFINAL = 1, BTYPE = 11: 'invalid block type'
  path.write_bytes(bytes(data))


def _fails_in_one_line_and_writes_nothing(config, tmp_path, *expected):
  workdir = tmp_path / 'run'
  with pytest.raises(DataError) as raised:
    train_and_evaluate(config, workdir)
  message = str(raised.value)
  assert '\n' not in message
  for part in expected:
    assert part in message, message
  assert not workdir.exists()
  return message


def test_an_idx_file_with_invalid_deflate_data(tmp_path):
  root = write_idx_folder(tmp_path / 'mnist')
  damaged = root / 'train-images-idx3-ubyte.gz'
  _damage_deflate(damaged)
  config = tiny_vit_config(**{'data.source': 'idx', 'data.path': str(root)})
  _fails_in_one_line_and_writes_nothing(config, tmp_path, str(damaged), 'invalid block type')


def _parallel_folder(folder):
  folder.mkdir()
  sentences = [f'sentence {i} with some words' for i in range(40)]
  for split in ('train', 'val', 'test'):
    for lang in ('de', 'en'):
      (folder / f'{split}.{lang}.gz').write_bytes(gzip.compress('\n'.join(sentences).encode() + b'\n'))
  return folder


def test_a_parallel_text_file_with_corrupted_deflate_data(tmp_path):
  folder = _parallel_folder(tmp_path / 'text')
  damaged = folder / 'train.en.gz'
  _damage_deflate(damaged)
  config = tiny_parallel_config(folder)
  _fails_in_one_line_and_writes_nothing(config, tmp_path, str(damaged), 'invalid block type')


def test_a_scan_file_with_invalid_utf8(tmp_path):
  root = tmp_path / 'SCAN'
  files = root / 'simple_split'
  files.mkdir(parents=True)
  lines = [b'IN: jump OUT: I_JUMP', b'IN: walk OUT: I_WALK', b'IN: look \xff\xfe OUT: I_LOOK']
  for part in ('train', 'test'):
    (files / f'tasks_{part}_simple.txt').write_bytes(b'\n'.join(lines) + b'\n')
  config = tiny_translation_config(**{'data.path': str(root)})
  message = _fails_in_one_line_and_writes_nothing(
    config, tmp_path, str(files / 'tasks_test_simple.txt'), 'invalid UTF-8'
  )
  assert ':3: invalid UTF-8' in message, message  # the line


def test_the_readers_still_read_sound_files(tmp_path):
  from pipelines.image_sources import read_idx
  from seq2seq.scan import read_scan_file

  root = write_idx_folder(tmp_path / 'mnist')
  assert read_idx(root / 'train-labels-idx1-ubyte.gz', expected_ndim=1).shape == (5,)
  scan = tmp_path / 'tasks.txt'
  scan.write_bytes('IN: jump  OUT: I_JUMP\r\nIN: walk twice OUT: I_WALK I_WALK\n'.encode())
  assert read_scan_file(scan) == [('jump', 'I_JUMP'), ('walk twice', 'I_WALK I_WALK')]
