"""Parallel corpora stored as one sentence a line, one file a language, optionally gzipped.

Line i of `{split}.{src_lang}` is the translation of line i of `{split}.{tgt_lang}`;
either file may instead be `{split}.{lang}.gz`.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from trainer.errors import DataError, MissingFileError


def find_split_file(directory, split: str, lang: str) -> Path:
  """The path of `{split}.{lang}` or `{split}.{lang}.gz` in `directory`."""
  candidates = [Path(directory) / f'{split}.{lang}', Path(directory) / f'{split}.{lang}.gz']
  existing = [path for path in candidates if path.is_file()]
  if not existing:
    raise MissingFileError(f'no {lang!r} file for split {split!r}; tried {candidates[0]} and {candidates[1]}')
  if len(existing) > 1:
    raise DataError(f'both {existing[0]} and {existing[1]} exist; keep only one')
  return existing[0]


def _read_raw_lines(path: Path) -> list[bytes]:
  try:
    data = gzip.decompress(path.read_bytes()) if path.suffix == '.gz' else path.read_bytes()
  except (gzip.BadGzipFile, EOFError, zlib.error) as error:
    raise DataError(f'{path}: not a valid gzip file ({error})') from None
  lines = data.split(b'\n')
  if lines[-1] == b'':
    lines.pop()
  return lines


def _decode_lines(path: Path, raw_lines: list[bytes]) -> list[str]:
  sentences = []
  for line_number, raw_line in enumerate(raw_lines, start=1):
    try:
      sentence = raw_line.decode('utf-8').rstrip()
    except UnicodeDecodeError as error:
      raise DataError(f'{path}:{line_number}: invalid UTF-8 ({error.reason} at byte {error.start})') from None
    if not sentence:
      raise DataError(f'{path}:{line_number}: empty line')
    sentences.append(sentence)
  return sentences


def read_parallel(directory, split: str, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
  """(source, target) sentence pairs of one split, with trailing whitespace stripped."""
  src_path = find_split_file(directory, split, src_lang)
  tgt_path = find_split_file(directory, split, tgt_lang)
  src_raw, tgt_raw = _read_raw_lines(src_path), _read_raw_lines(tgt_path)
  if len(src_raw) != len(tgt_raw):
    raise DataError(f'line counts differ: {src_path} has {len(src_raw)} lines, {tgt_path} has {len(tgt_raw)}')
  return list(zip(_decode_lines(src_path, src_raw), _decode_lines(tgt_path, tgt_raw)))
