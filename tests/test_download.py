"""pipelines.download against a local HTTP server that serves files the test makes.

The real addresses are never fetched: each test swaps in a small data set whose checksums it
computes, served from 127.0.0.1 (whole, cut short, with a wrong byte, or missing).
"""

import gzip
import hashlib
import http.server
import io
import tarfile
import threading

import numpy as np
import pytest
from PIL import Image

from pipelines import download
from pipelines.download import DataSet, DownloadError, RemoteFile
from tests.real_data import data_set_dir


class _Server:
  """Serves ``files`` (path -> bytes); honours ``Range``; can stop a transfer after ``cut`` bytes."""

  def __init__(self):
    self.files, self.cut, self.ranges = {}, None, []
    server = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def do_GET(self):
        body = server.files.get(self.path.lstrip('/'))
        if body is None:
          self.send_error(404, 'Not Found')
          return
        start = 0
        if 'Range' in self.headers:
          server.ranges.append(self.headers['Range'])
          start = int(self.headers['Range'].split('=')[1].split('-')[0])
        self.send_response(206 if start else 200)
        self.send_header('Content-Length', str(len(body) - start))
        self.end_headers()
        payload = body[start:]
        if server.cut is not None:
          payload = payload[: server.cut]  # the connection closes before Content-Length bytes
        self.wfile.write(payload)

    self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}'
    self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

  def __enter__(self):
    self.thread.start()
    return self

  def __exit__(self, *exc):
    self.httpd.shutdown()
    self.httpd.server_close()


@pytest.fixture
def server():
  with _Server() as running:
    yield running


def _fake_set(monkeypatch, files: dict[str, bytes], unpack=None) -> str:
  remote = [
    RemoteFile('https://example.invalid/set', path, hashlib.sha256(body).hexdigest(), len(body), path)
    for path, body in files.items()
  ]
  monkeypatch.setitem(download.DATA_SETS, 'fake', DataSet(remote, unpack=unpack, about='a test set'))
  return 'fake'


def test_fetches_every_file_checks_it_and_keeps_the_layout(server, monkeypatch, tmp_path):
  files = {'a.txt': b'alpha\n' * 1000, 'split/b.txt.gz': gzip.compress(b'beta\n')}
  server.files.update(files)
  name = _fake_set(monkeypatch, files)
  out = download.download(name, tmp_path / 'fake', mirror=server.url, progress=False)
  assert (out / 'a.txt').read_bytes() == files['a.txt']
  assert (out / 'split/b.txt.gz').read_bytes() == files['split/b.txt.gz']
  assert not list(out.rglob('*.part'))


def test_a_checksum_mismatch_deletes_the_file_and_names_both_checksums(server, monkeypatch, tmp_path):
  good = b'the expected bytes' * 100
  name = _fake_set(monkeypatch, {'a.bin': good})
  server.files['a.bin'] = good[:-1] + b'X'
  with pytest.raises(DownloadError, match='SHA-256 [0-9a-f]{64} is not the expected'):
    download.download(name, tmp_path / 'fake', mirror=server.url, progress=False)
  assert not list((tmp_path / 'fake').iterdir())  # neither the file nor its .part is left


def test_an_interrupted_transfer_never_looks_finished_and_resumes(server, monkeypatch, tmp_path):
  body = bytes(range(256)) * 400
  name = _fake_set(monkeypatch, {'a.bin': body})
  server.files['a.bin'] = body
  server.cut = 30000
  with pytest.raises(DownloadError, match='run the command again to resume'):
    download.download(name, tmp_path / 'fake', mirror=server.url, progress=False)
  assert not (tmp_path / 'fake/a.bin').exists()
  assert (tmp_path / 'fake/a.bin.part').stat().st_size == 30000
  server.cut = None
  download.download(name, tmp_path / 'fake', mirror=server.url, progress=False)
  assert server.ranges == ['bytes=30000-']  # the second run asked only for the rest
  assert (tmp_path / 'fake/a.bin').read_bytes() == body
  assert not (tmp_path / 'fake/a.bin.part').exists()


def test_a_missing_file_and_no_network_are_one_line_errors_that_say_what_to_fetch(
  server, monkeypatch, tmp_path, capsys
):
  name = _fake_set(monkeypatch, {'a.bin': b'x'})
  with pytest.raises(DownloadError, match='HTTP 404'):
    download.download(name, tmp_path / 'fake', mirror=server.url, progress=False)
  closed = _Server()  # bound, never served: nothing answers on its port
  closed.httpd.server_close()
  status = download.main(['fake', '--out', str(tmp_path / 'fake'), '--mirror', closed.url, '--quiet'])
  error = capsys.readouterr().err
  assert status == 2
  assert error.count('\n') == 1 and error.startswith('error: ')
  assert 'cannot connect' in error and 'fetch by hand: https://example.invalid/set/a.bin' in error


def test_an_intact_file_is_not_fetched_again(server, monkeypatch, tmp_path):
  body = b'kept' * 10
  name = _fake_set(monkeypatch, {'a.bin': body})
  (tmp_path / 'fake').mkdir()
  (tmp_path / 'fake/a.bin').write_bytes(body)
  download.download(name, tmp_path / 'fake', mirror=server.url, progress=False)  # the server has no file


def _cifar_batch(labels, rng) -> tuple[bytes, np.ndarray]:
  images = rng.integers(0, 256, (len(labels), 32, 32, 3), dtype=np.uint8)
  records = np.concatenate(
    [np.array(labels, np.uint8)[:, None], images.transpose(0, 3, 1, 2).reshape(len(labels), -1)], axis=1
  )
  return records.tobytes(), images


def test_cifar10_is_unpacked_to_an_image_folder_with_the_exact_pixels(server, monkeypatch, tmp_path):
  rng = np.random.default_rng(0)
  batches, expected = {}, {'train': [], 'test': []}
  for index in range(1, 6):
    batches[f'data_batch_{index}.bin'], images = _cifar_batch([index, 0], rng)
    expected['train'] += [(index, images[0]), (0, images[1])]
  batches['test_batch.bin'], images = _cifar_batch([9], rng)
  expected['test'] = [(9, images[0])]
  archive = io.BytesIO()
  with tarfile.open(fileobj=archive, mode='w:gz') as tar:
    for member, data in batches.items():
      info = tarfile.TarInfo(f'cifar-10-batches-bin/{member}')
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  server.files['cifar.tar.gz'] = archive.getvalue()
  name = _fake_set(monkeypatch, {'cifar.tar.gz': archive.getvalue()}, unpack=download.unpack_cifar10)
  out = download.download(name, tmp_path / 'cifar10', mirror=server.url, progress=False)
  for split, examples in expected.items():
    written = sorted((out / split).rglob('*.png'))
    assert len(written) == len(examples)
    for index, (label, image) in enumerate(examples):
      path = out / split / download.CIFAR10_CLASSES[label] / f'{index:05d}.png'
      np.testing.assert_array_equal(np.asarray(Image.open(path)), image)
  assert not (tmp_path / 'cifar10.unpacking').exists()


def test_the_checksums_in_the_code_match_the_copies_where_they_exist():
  """The Multi30k and SCAN files found (``tests/real_data.py``) are the upstream files at the pinned commits."""
  checked = 0
  for set_name in ('multi30k', 'scan'):
    for remote in download.DATA_SETS[set_name].files:
      path = data_set_dir(set_name) / remote.name
      if path.is_file():
        assert download.sha256_of(path) == remote.sha256, path
        checked += 1
  if not checked:
    pytest.skip('no Multi30k or SCAN copy in data/ or beside the checkout')


def _write_pairs(folder, split, count):
  for lang, word in (('de', 'haus'), ('en', 'house')):
    (folder / f'{split}.{lang}').write_text(''.join(f'{word} {i}\n' for i in range(count)))


@pytest.mark.parametrize('splits, expected', [(('train', 'val', 'test'), 'test'), (('train', 'val'), 'val')])
def test_an_eval_split_of_alternatives_takes_the_first_the_folder_has(tmp_path, splits, expected):
  """What the Multi30k configs rely on: ``test|val`` is test where the download made it, else val."""
  from tests.translation_test_configs import tiny_parallel_config
  from trainer.task import load_task

  for split in splits:
    _write_pairs(tmp_path, split, 4)
  config = tiny_parallel_config(tmp_path, eval_split='test|val')
  load_task(config)
  assert config.eval_split == expected


def test_an_eval_split_of_alternatives_none_present_names_the_splits(tmp_path):
  from tests.translation_test_configs import tiny_parallel_config
  from trainer.errors import ConfigError
  from trainer.task import load_task

  _write_pairs(tmp_path, 'train', 4)
  _write_pairs(tmp_path, 'dev', 4)
  with pytest.raises(ConfigError, match="'test|val'"):
    load_task(tiny_parallel_config(tmp_path, eval_split='test|val'))
