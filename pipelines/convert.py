"""Packs a data set into a records folder (``pipelines.records``), once, for disk-backed training.

  python -m pipelines.convert image-folder ../cifar10 --out /data/cifar10-records
  python -m pipelines.convert image-folder ../cifar10 --out /data/cifar10-224 --resize 224,224 --quality 90
  python -m pipelines.convert parallel-text ../shared/data/multi30k --source_lang de --target_lang en \
    --out /data/multi30k-records

image-folder reads ``FOLDER/<split>/<class>/*.{png,jpg,jpeg}`` (the layout of ``data.source='folder'``;
classes are the sorted class folder names of the train split) and stores each file's bytes as
they are, or, with ``--resize H,W``, the image resized and JPEG-encoded at ``--quality``.
parallel-text reads every ``FOLDER/<split>.<lang>[.gz]`` pair of files (the layout of the
translator's ``data.source='parallel'``). Examples keep the order of the listing; training shuffles.
The folder is written under a temporary name and renamed when complete, so an interrupted
conversion leaves nothing that looks finished.
"""

import argparse
import io
import json
import os
import pathlib
import shutil
import sys

from array_record.python.array_record_module import ArrayRecordWriter
from PIL import Image

from pipelines import records
from pipelines.parallel_text import read_parallel
from trainer.errors import UserError

_SPLITS = ('train', 'validation', 'test')
_IMAGE_SUFFIXES = ('.png', '.jpg', '.jpeg')


def image_folder_examples(folder: pathlib.Path):
  """{split: [(label, path), ...]} and the class names of an image folder."""
  train = folder / 'train'
  if not train.is_dir():
    raise UserError(f'{train} does not exist: an image folder holds <split>/<class>/ image files')
  class_names = sorted(entry.name for entry in train.iterdir() if entry.is_dir())
  if not class_names:
    raise UserError(f'no class folders in {train}')
  splits = {}
  for split in _SPLITS:
    if not (folder / split).is_dir():
      continue
    examples = []
    for class_dir in sorted(entry for entry in (folder / split).iterdir() if entry.is_dir()):
      if class_dir.name not in class_names:
        raise UserError(f'class folder {class_dir} is not one of the train classes')
      files = sorted(path for path in class_dir.iterdir() if path.suffix.lower() in _IMAGE_SUFFIXES)
      examples += [(class_names.index(class_dir.name), path) for path in files]
    splits[split] = examples
  return splits, class_names


def _image_bytes(path: pathlib.Path, resize: tuple[int, int] | None, quality: int) -> bytes:
  if resize is None:
    return path.read_bytes()
  try:
    with Image.open(path) as image:
      resized = image.convert('RGB').resize((resize[1], resize[0]), Image.Resampling.BILINEAR)
  except (OSError, ValueError) as error:
    raise UserError(f'cannot read image {path}: {error}') from None
  buffer = io.BytesIO()
  resized.save(buffer, format='JPEG', quality=quality)
  return buffer.getvalue()


def convert_image_folder(
  folder: str | pathlib.Path,
  out: str | pathlib.Path,
  *,
  resize: tuple[int, int] | None = None,
  quality: int = 90,
) -> pathlib.Path:
  splits, class_names = image_folder_examples(pathlib.Path(folder))

  def write(writer, split):
    for label, path in splits[split]:
      writer.write(records.pack_image(label, _image_bytes(path, resize, quality)))
    return len(splits[split])

  return _write_folder(out, 'images', list(splits), write, class_names=class_names)


def convert_parallel_text(
  folder: str | pathlib.Path, out: str | pathlib.Path, *, source_lang: str, target_lang: str
) -> pathlib.Path:
  root = pathlib.Path(folder)
  splits = {}
  names = {
    path.name.removesuffix('.gz').removesuffix(f'.{source_lang}') for path in root.glob(f'*.{source_lang}*')
  }
  for split in sorted(names, key=lambda name: (name != 'train', name)):
    splits[split] = read_parallel(root, split, source_lang, target_lang)
  if 'train' not in splits:
    raise UserError(f'no train.{source_lang} or train.{source_lang}.gz in {root}')

  def write(writer, split):
    for source, target in splits[split]:
      writer.write(records.pack_pair(source, target))
    return len(splits[split])

  return _write_folder(out, 'text', list(splits), write, languages=[source_lang, target_lang])


def _write_folder(out, kind, split_names, write_split, **extra) -> pathlib.Path:
  out = pathlib.Path(out).expanduser()
  if out.exists():
    raise UserError(f'{out} exists; choose a new --out folder (nothing was written)')
  partial = out.with_name(f'{out.name}.partial-{os.getpid()}')
  partial.mkdir(parents=True)
  try:
    entries = {}
    for split in split_names:
      file_name = f'{split}.array_record'
      writer = ArrayRecordWriter(str(partial / file_name), records.WRITER_OPTIONS)
      count = write_split(writer, split)
      writer.close()
      entries[split] = {'file': file_name, 'records': count}
    metadata = {
      'format': records.FORMAT,
      'version': records.VERSION,
      'kind': kind,
      'splits': entries,
      **extra,
    }
    (partial / records.METADATA_FILE).write_text(json.dumps(metadata, indent=1) + '\n')
    partial.rename(out)
  except BaseException:
    shutil.rmtree(partial, ignore_errors=True)
    raise
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m pipelines.convert', description=__doc__.split('\n')[0])
  commands = parser.add_subparsers(dest='command', required=True)
  images = commands.add_parser('image-folder', help='FOLDER/<split>/<class>/*.jpg -> records folder')
  images.add_argument('folder')
  images.add_argument('--out', required=True)
  images.add_argument(
    '--resize', default=None, help='H,W: store resized JPEGs instead of the files as they are'
  )
  images.add_argument('--quality', type=int, default=90, help='JPEG quality with --resize')
  text = commands.add_parser('parallel-text', help='FOLDER/<split>.<lang>[.gz] -> records folder')
  text.add_argument('folder')
  text.add_argument('--out', required=True)
  text.add_argument('--source_lang', required=True)
  text.add_argument('--target_lang', required=True)
  args = parser.parse_args(argv)
  try:
    if args.command == 'image-folder':
      resize = None
      if args.resize:
        try:
          resize = tuple(int(side) for side in args.resize.split(','))
          if len(resize) != 2 or min(resize) < 1:
            raise ValueError
        except ValueError:
          raise UserError(f'--resize must be H,W with positive sides, got {args.resize!r}') from None
      out = convert_image_folder(args.folder, args.out, resize=resize, quality=args.quality)
    else:
      out = convert_parallel_text(
        args.folder, args.out, source_lang=args.source_lang, target_lang=args.target_lang
      )
  except UserError as error:
    print(f'error: {error}', file=sys.stderr)
    return 2
  metadata = json.loads((out / records.METADATA_FILE).read_text())
  counts = ', '.join(f'{split} {entry["records"]}' for split, entry in metadata['splits'].items())
  print(f'wrote {out}: {counts}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
