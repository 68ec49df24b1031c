"""Where sentence pairs come from: SCAN, a folder of parallel text files, or TensorFlow Datasets.

``open_source(data_config)`` checks the config and returns a ``PairSource``, whose
``read(split)`` gives the ``(source, target)`` text pairs of one split. Nothing is ever
downloaded, and every problem with the data (a missing file, files whose line counts
differ, an empty line, bytes that are not UTF-8, a TFDS set that is not prepared) is a
one-line error naming the file (and line) or the data set.

Sources (``data.source``):
  scan      the SCAN grammar, generated (``data.split``, one of ``SCAN_SPLITS``); or, with
            ``data.path``, the official files of brendenlake/SCAN under that folder
            (``simple_split/tasks_train_simple.txt`` and so on). Splits 'train', 'test'.
  parallel  ``data.path`` holds ``{split}.{src_lang}`` and ``{split}.{tgt_lang}``, optionally
            gzipped (``pipelines.parallel_text``).
  records   ``data.path`` is a records folder of sentence pairs (``pipelines.records``), made
            once by ``python -m pipelines.convert parallel-text``; ``src_lang`` and ``tgt_lang``
            must be the languages it was made with. Pairs are read into memory, since
            length bucketing needs every pair's length.
  tfds      TFDS translation set ``data.name`` (e.g. 'wmt14_translate/de-en',
            'ted_hrlr_translate/pt_to_en') prepared in ``data.data_dir``; ``src_lang`` and
            ``tgt_lang`` are feature names of its examples.

``data.holdout`` (any source): that many pairs of the training split become the split 'holdout' and
leave training; which pairs is a fixed draw, the same for every ``config.seed``, so runs of several
seeds are chosen between on the same held-out pairs, never on test.
"""

from __future__ import annotations

from pathlib import Path

import ml_collections
import numpy as np

from pipelines.fetch_hint import fetch_hint
from pipelines.parallel_text import read_parallel
from seq2seq.scan import read_scan_file, scan_split
from trainer.errors import ConfigError, DataError, MissingFileError
from trainer.io.tfds_import import import_tfds_on_cpu, prepared_builder

SCAN_FILES = {
  'simple': 'simple_split/tasks_{part}_simple.txt',
  'length': 'length_split/tasks_{part}_length.txt',
  'addprim_jump': 'add_prim_split/tasks_{part}_addprim_jump.txt',
  'addprim_turn_left': 'add_prim_split/tasks_{part}_addprim_turn_left.txt',
}

_TFDS_READ_BATCH = 4096
HOLDOUT_SPLIT = 'holdout'

Pairs = list[tuple[str, str]]


class PairSource:
  """Reads each split once and keeps it."""

  def __init__(self, description: str, reader, splits: tuple[str, ...] | None = None, list_splits=None):
    self.description = description
    self._reader = reader
    self._splits = splits
    self._list_splits = list_splits
    self._read = {}

  def split_names(self) -> tuple[str, ...]:
    """The splits this source has (for a folder: the names with files in both languages), and those read."""
    if self._splits is not None:
      return self._splits
    return tuple(sorted({*self._list_splits(), *self._read}))

  def read(self, split: str) -> Pairs:
    if self._splits is not None and split not in self._splits:
      raise ConfigError(f'{self.description} has no split {split!r}; available: {", ".join(self._splits)}')
    if split not in self._read:
      pairs = self._reader(split)
      if not pairs:
        raise DataError(f'{self.description}: split {split!r} is empty')
      self._read[split] = pairs
    return self._read[split]


class HeldOutSource(PairSource):
  """``source`` with ``count`` pairs of its training split moved to the split 'holdout'."""

  def __init__(self, source: PairSource, train_split: str, count: int):
    super().__init__(f'{source.description} ({count} training pairs held out)', self._read_split)
    self._source = source
    self._train_split = train_split
    self._count = count

  def split_names(self) -> tuple[str, ...]:
    return tuple(sorted({*self._source.split_names(), HOLDOUT_SPLIT}))

  def _read_split(self, split: str) -> Pairs:
    if split not in (self._train_split, HOLDOUT_SPLIT):
      return self._source.read(split)
    pairs = self._source.read(self._train_split)
    if self._count >= len(pairs):
      raise ConfigError(
        f'data.holdout is {self._count}, but the training split {self._train_split!r} has only '
        f'{len(pairs)} pairs.'
      )
    held = np.zeros(len(pairs), bool)
    held[np.random.default_rng(0).permutation(len(pairs))[: self._count]] = True
    wanted = split == HOLDOUT_SPLIT
    return [pair for pair, is_held in zip(pairs, held) if is_held == wanted]


def open_source(config: ml_collections.ConfigDict) -> PairSource:
  """The source ``config`` (a complete ``data`` section) names, with its held-out split if it asks for one."""
  holdout = config.holdout
  source = _open(config)
  if not holdout:
    return source
  if HOLDOUT_SPLIT in source.split_names():
    raise ConfigError(f'{source.description} already has a split {HOLDOUT_SPLIT!r}: set data.holdout=0.')
  return HeldOutSource(source, config.train_split, holdout)


def _open(config: ml_collections.ConfigDict) -> PairSource:
  return _OPENERS[config.source](config)


def _scan_source(config: ml_collections.ConfigDict) -> PairSource:
  if config.path is None:
    generated = scan_split(config.split)
    return PairSource(f'SCAN {config.split} (generated)', generated.__getitem__, ('train', 'test'))

  def read(part):
    path = Path(config.path) / SCAN_FILES[config.split].format(part=part)
    if not path.is_file():
      raise MissingFileError(f'SCAN file {path} not found (data.path should be the root of brendenlake/SCAN)')
    return read_scan_file(path)

  return PairSource(f'SCAN {config.split} in {config.path}', read, ('train', 'test'))


def _check_languages(config: ml_collections.ConfigDict) -> None:
  if not config.src_lang or not config.tgt_lang:
    raise ConfigError(f'data.src_lang and data.tgt_lang must be set for source {config.source!r}')


def _parallel_source(config: ml_collections.ConfigDict) -> PairSource:
  _check_languages(config)
  if config.path is None:
    raise ConfigError("data.path must be set for source 'parallel' (a folder of {split}.{lang}[.gz] files)")
  if not Path(config.path).is_dir():
    raise MissingFileError(f'data.path {config.path} does not exist{fetch_hint(config.path)}')

  def list_splits():
    folder = Path(config.path)
    names = {
      path.name.removesuffix('.gz').removesuffix(f'.{config.src_lang}')
      for suffix in ('', '.gz')
      for path in folder.glob(f'*.{config.src_lang}{suffix}')
    }
    found = [
      name
      for name in names
      if (folder / f'{name}.{config.tgt_lang}').is_file()
      or (folder / f'{name}.{config.tgt_lang}.gz').is_file()
    ]
    if not found:
      raise MissingFileError(
        f'data.path {config.path} holds no {config.src_lang}-{config.tgt_lang} parallel text '
        f'(<split>.{config.src_lang}[.gz] beside <split>.{config.tgt_lang}[.gz]){fetch_hint(config.path)}'
      )
    return found

  return PairSource(
    f'parallel text in {config.path}',
    lambda split: read_parallel(config.path, split, config.src_lang, config.tgt_lang),
    list_splits=list_splits,
  )


def _records_source(config: ml_collections.ConfigDict) -> PairSource:
  from pipelines.records import RecordFolder  # noqa: PLC0415 (grain only for this source)

  _check_languages(config)
  if config.path is None:
    raise ConfigError(
      "data.path must be set for source 'records' (a folder made by python -m pipelines.convert)"
    )
  folder = RecordFolder.open(config.path, kind='text')
  languages = list(folder.languages or [])
  if languages != [config.src_lang, config.tgt_lang]:
    raise ConfigError(
      f'{folder.path} holds {languages[0] if languages else "?"} -> {languages[-1] if languages else "?"} pairs; '
      f'data.src_lang and data.tgt_lang are {config.src_lang!r} and {config.tgt_lang!r}'
    )

  def read(split):
    records = folder.splits[split]
    indices = range(len(records))
    return [records.pair(index, record) for index, record in zip(indices, records.read(indices))]

  return PairSource(f'records in {folder.path}', read, splits=tuple(folder.splits))


def _tfds_source(config: ml_collections.ConfigDict) -> PairSource:
  _check_languages(config)
  builder = prepared_builder(config, 'wmt14_translate/de-en')
  languages = sorted(builder.info.features.keys())
  for language in (config.src_lang, config.tgt_lang):
    if language not in languages:
      raise DataError(
        f'tfds data set {config.name!r} has no language {language!r}; it has {", ".join(languages)}'
      )

  def read(split):
    try:
      dataset = builder.as_dataset(split=split, shuffle_files=False)
    except (KeyError, ValueError) as error:
      raise DataError(f'tfds data set {config.name!r} has no split {split!r} ({error})') from None
    pairs = []
    for batch in import_tfds_on_cpu().as_numpy(dataset.batch(_TFDS_READ_BATCH)):
      pairs.extend(
        (source.decode('utf-8'), target.decode('utf-8'))
        for source, target in zip(batch[config.src_lang], batch[config.tgt_lang])
      )
    return pairs

  return PairSource(f'tfds data set {config.name!r}', read, list_splits=lambda: sorted(builder.info.splits))


# ``data.source`` -> its opener (the choices are ``seq2seq.config_sections.TextData.source``)
_OPENERS = {
  'scan': _scan_source,
  'parallel': _parallel_source,
  'records': _records_source,
  'tfds': _tfds_source,
}
