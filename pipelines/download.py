"""Fetches the public data sets that the configs read as files, checked against SHA-256 values kept here.

  python -m pipelines.download multi30k --out data/multi30k
  python -m pipelines.download scan --out data/scan
  python -m pipelines.download mnist --out data/mnist
  python -m pipelines.download cifar10 --out data/cifar10

What each one writes (``--out`` defaults to ``data/<name>``, where the configs look):
  multi30k  the de and en files of Multi30k task 1 (multi30k/dataset, ``data/task1/raw/`` at a fixed
            commit): ``train``, ``val``, ``test`` (= ``test_2016_flickr``, the test set papers report),
            ``test_2017_flickr`` and ``test_2017_mscoco``, each ``<split>.<lang>.gz``.
  scan      the official files of brendenlake/SCAN at a fixed commit, in the repository's layout.
  mnist     the four gzipped IDX files (the copy tfds downloads).
  cifar10   the binary release of CIFAR-10 (170 MB), unpacked to an image folder
            ``{train,test}/<class>/NNNNN.png`` (lossless; the layout of ``data.source='folder'``).

Every file is fetched over HTTPS into ``NAME.part`` (an interrupted transfer resumes from where it
stopped, by an HTTP range request), checked against its SHA-256, and only then renamed to its
name, so a partial download never looks finished. Files already present with the right checksum are
kept. ``--mirror URL`` fetches every file from ``URL/<its path>`` instead (for Multi30k and SCAN the path in
the repository folder named above, for MNIST and CIFAR-10 the file name).
"""

import argparse
import dataclasses
import hashlib
import http.client
import os
import pathlib
import shutil
import sys
import tarfile
import urllib.error
import urllib.request

import numpy as np
import tqdm

from trainer.errors import DataError, UserError

_MULTI30K = (
  'https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw'
)
_SCAN = 'https://raw.githubusercontent.com/brendenlake/SCAN/c4b756cbc010d75c912f16c42c8f15dc6b7e6c8f'
_MNIST = 'https://storage.googleapis.com/cvdf-datasets/mnist'
_CIFAR10 = 'https://www.cs.toronto.edu/~kriz'
CHUNK_BYTES = 1 << 16
TIMEOUT_SECONDS = 30


@dataclasses.dataclass(frozen=True)
class RemoteFile:
  """One file to fetch: where it is, its checksum and size, and its name on disk."""

  base: str  # the folder's address
  path: str  # the file's path under ``base`` (and under ``--mirror``)
  sha256: str
  size: int
  name: str  # its path under ``--out``

  @property
  def url(self) -> str:
    return f'{self.base}/{self.path}'


def _multi30k_files() -> list[RemoteFile]:
  checksums = {
    'train.de.gz': ('726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6', 637044),
    'train.en.gz': ('d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f', 568929),
    'val.de.gz': ('f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a', 24681),
    'val.en.gz': ('14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28', 21650),
    'test_2016_flickr.de.gz': ('9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8', 22890),
    'test_2016_flickr.en.gz': ('611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9', 21077),
    'test_2017_flickr.de.gz': ('a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee', 21471),
    'test_2017_flickr.en.gz': ('76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074', 19138),
    'test_2017_mscoco.de.gz': ('799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338', 10230),
    'test_2017_mscoco.en.gz': ('aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58', 8844),
  }
  # test_2016_flickr is Multi30k's usual test set: it is saved as the split 'test'.
  return [
    RemoteFile(_MULTI30K, name, sha, size, name.replace('test_2016_flickr', 'test'))
    for name, (sha, size) in checksums.items()
  ]


def _scan_files() -> list[RemoteFile]:
  checksums = {
    'tasks.txt': ('d824c7d9e9149ba497e25f701981dac79954e04bf670d22e5c209f076ac6c89f', 4080388),
    'LICENSE': ('5caff9408d400e1d9b271bf48b967154cdf6a37c16c965f91775da3af9291f67', 1532),
    'simple_split/tasks_train_simple.txt': (
      '941bb8a088c5f53ceff12fde902dc008933cf0c4203cc672c47b5f79d73262dd',
      3267938,
    ),
    'simple_split/tasks_test_simple.txt': (
      '1fe1c8f5a19d0dc40e41bab94278f45f66f3dc415a978bd29855a23440610fc6',
      812450,
    ),
    'length_split/tasks_train_length.txt': (
      'b034212dc7cf87ce62f3a067dd6ad49c4d5cd18d51d615d13825516bcb1ebbc2',
      2723418,
    ),
    'length_split/tasks_test_length.txt': (
      '0760752ed34a75116ae11dcc1ee17526b7500060da1366540730fa24894d7db3',
      1356970,
    ),
    'add_prim_split/tasks_train_addprim_jump.txt': (
      'e3c78485692e028eed4205e1b8b3fd0e785ef2c12d45b5b89204dadf5b239e23',
      2579619,
    ),
    'add_prim_split/tasks_test_addprim_jump.txt': (
      '8147ae2651422c701162e174d9d66158daa57858a26b30317ac61797118ac7a5',
      1531555,
    ),
    'add_prim_split/tasks_train_addprim_turn_left.txt': (
      '1b3fed86055dd7689d217f1b90cc8960aeb1cf200f4f209dc47935761b05304c',
      3974537,
    ),
    'add_prim_split/tasks_test_addprim_turn_left.txt': (
      '15a82c2d25ac7c3c1fff7e18051fb085974ef3617de895c520d02144396a10e2',
      173679,
    ),
  }
  return [RemoteFile(_SCAN, name, sha, size, name) for name, (sha, size) in checksums.items()]


def _mnist_files() -> list[RemoteFile]:
  checksums = {
    'train-images-idx3-ubyte.gz': (
      '440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609',
      9912422,
    ),
    'train-labels-idx1-ubyte.gz': ('3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c', 28881),
    't10k-images-idx3-ubyte.gz': (
      '8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6',
      1648877,
    ),
    't10k-labels-idx1-ubyte.gz': ('f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6', 4542),
  }
  return [RemoteFile(_MNIST, name, sha, size, name) for name, (sha, size) in checksums.items()]


def _cifar10_files() -> list[RemoteFile]:
  name = 'cifar-10-binary.tar.gz'
  sha = 'c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd'
  return [RemoteFile(_CIFAR10, name, sha, 170052171, name)]


CIFAR10_CLASSES = (
  'airplane',
  'automobile',
  'bird',
  'cat',
  'deer',
  'dog',
  'frog',
  'horse',
  'ship',
  'truck',
)
_CIFAR10_BATCHES = {'train': [f'data_batch_{i}.bin' for i in range(1, 6)], 'test': ['test_batch.bin']}
_CIFAR10_RECORD_BYTES = 1 + 32 * 32 * 3  # a label byte, then the red, green and blue planes


def unpack_cifar10(archive: pathlib.Path, out: pathlib.Path) -> None:
  """Writes ``out/{train,test}/<class>/NNNNN.png`` from the binary release's batches."""
  from PIL import Image

  with tarfile.open(archive, 'r:gz') as tar:
    members = {pathlib.PurePosixPath(member.name).name: member for member in tar.getmembers()}
    for split, batches in _CIFAR10_BATCHES.items():
      index = 0
      for batch in batches:
        if batch not in members:
          raise DataError(f'{archive} has no {batch}; it is not the CIFAR-10 binary release')
        data = np.frombuffer(tar.extractfile(members[batch]).read(), np.uint8)
        records = data.reshape(-1, _CIFAR10_RECORD_BYTES)
        images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        for label, image in zip(records[:, 0], images):
          folder = out / split / CIFAR10_CLASSES[label]
          folder.mkdir(parents=True, exist_ok=True)
          Image.fromarray(image).save(folder / f'{index:05d}.png')
          index += 1


@dataclasses.dataclass(frozen=True)
class DataSet:
  """A data set: its files and what to do with them once they are all here."""

  files: list[RemoteFile]
  unpack: object = None  # (downloaded files folder, out) -> None, writing into ``out``
  about: str = ''


DATA_SETS = {
  'multi30k': DataSet(_multi30k_files(), about='Multi30k task 1, de and en (non-commercial research use)'),
  'scan': DataSet(_scan_files(), about='SCAN (BSD licence, see LICENSE)'),
  'mnist': DataSet(_mnist_files(), about='MNIST (CC BY-SA 3.0)'),
  'cifar10': DataSet(_cifar10_files(), unpack=unpack_cifar10, about='CIFAR-10 (A. Krizhevsky)'),
}


class DownloadError(UserError):
  """A file that could not be fetched or that is not the file we expect."""


def sha256_of(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with open(path, 'rb') as file:
    for chunk in iter(lambda: file.read(1 << 20), b''):
      digest.update(chunk)
  return digest.hexdigest()


def fetch(remote: RemoteFile, url: str, target: pathlib.Path, *, progress: bool) -> None:
  """Fetches ``url`` into ``target`` through ``target.part``, resuming a partial one; checks the SHA-256."""
  if target.is_file() and target.stat().st_size == remote.size and sha256_of(target) == remote.sha256:
    return
  target.parent.mkdir(parents=True, exist_ok=True)
  part = target.with_name(target.name + '.part')
  have = part.stat().st_size if part.is_file() else 0
  if have > remote.size:  # not a prefix of the file we want
    part.unlink()
    have = 0
  if have < remote.size:
    _transfer(url, part, have, remote.size, progress=progress)
  actual = sha256_of(part)
  if actual != remote.sha256:
    part.unlink()
    raise DownloadError(
      f'{url}: SHA-256 {actual} is not the expected {remote.sha256}; the file was deleted, '
      'run the command again (if it repeats, the file at that address has changed)'
    )
  os.replace(part, target)


def _transfer(url: str, part: pathlib.Path, have: int, size: int, *, progress: bool) -> None:
  request = urllib.request.Request(url, headers={'Range': f'bytes={have}-'} if have else {})
  try:
    response = urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS)
  except urllib.error.HTTPError as error:
    if error.code == 416 and have:  # the range starts past the end: the part file is not ours
      part.unlink()
      return _transfer(url, part, 0, size, progress=progress)
    raise DownloadError(f'{url}: HTTP {error.code} {error.reason}') from None
  except (urllib.error.URLError, OSError) as error:
    reason = getattr(error, 'reason', error)
    raise DownloadError(f'{url}: cannot connect ({reason})') from None
  with response:
    if have and response.status != 206:  # the server ignored the range: start again
      have = 0
    bar = tqdm.tqdm(
      total=size,
      initial=have,
      unit='B',
      unit_scale=True,
      desc=part.name[: -len('.part')],
      disable=not progress,
    )
    with open(part, 'ab' if have else 'wb') as file, bar:
      try:
        for chunk in iter(lambda: response.read(CHUNK_BYTES), b''):
          file.write(chunk)
          bar.update(len(chunk))
      except (OSError, http.client.HTTPException) as error:
        raise DownloadError(
          f'{url}: the transfer broke after {file.tell():,} of {size:,} bytes ({error}); '
          'run the command again to resume'
        ) from None
    got = part.stat().st_size
    if got < size:
      raise DownloadError(
        f'{url}: the transfer ended after {got:,} of {size:,} bytes; run the command again to resume'
      )


def download(
  name: str, out: pathlib.Path, *, mirror: str | None = None, progress: bool = True
) -> pathlib.Path:
  """Fetches data set ``name`` into ``out``; returns ``out``. Files already there and intact are kept."""
  if name not in DATA_SETS:
    raise DownloadError(f'unknown data set {name!r}; known: {", ".join(DATA_SETS)}')
  data_set = DATA_SETS[name]
  out = pathlib.Path(out)
  if out.exists() and not out.is_dir():
    raise DownloadError(f'--out {out} exists and is not a folder')
  download_dir = out if data_set.unpack is None else out / '.download'
  failures = []
  for remote in data_set.files:
    url = f'{mirror.rstrip("/")}/{remote.path}' if mirror else remote.url
    try:
      fetch(remote, url, download_dir / remote.name, progress=progress)
    except DownloadError as error:
      failures.append(str(error))
  if failures:
    raise DownloadError(
      f'{len(failures)} of {len(data_set.files)} files of {name} were not fetched; first: {failures[0]}. '
      f'Without a network, fetch by hand: {", ".join(f.url for f in data_set.files)} into {download_dir} '
      'and run the command again'
    )
  if data_set.unpack is not None:
    unpacked = out.with_name(out.name + '.unpacking')
    shutil.rmtree(unpacked, ignore_errors=True)
    for remote in data_set.files:
      data_set.unpack(download_dir / remote.name, unpacked)
    for entry in unpacked.iterdir():  # the unpacked splits appear together, beside the archive
      shutil.rmtree(out / entry.name, ignore_errors=True)
      os.replace(entry, out / entry.name)
    unpacked.rmdir()
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('name', choices=sorted(DATA_SETS))
  parser.add_argument('--out', type=pathlib.Path, help='the folder to write (default: data/<name>)')
  parser.add_argument('--mirror', help='fetch every file from MIRROR/<its path> instead of its home address')
  parser.add_argument('--quiet', action='store_true', help='no progress bar')
  args = parser.parse_args(argv)
  out = args.out or pathlib.Path('data') / args.name
  try:
    download(args.name, out, mirror=args.mirror, progress=not args.quiet)
  except UserError as error:
    print(f'error: {error}', file=sys.stderr)
    return 2
  print(f'{args.name}: {DATA_SETS[args.name].about}; in {out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
