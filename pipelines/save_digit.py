"""Saves embedded digits as 8x8 PNG files, to try ``predict.py`` on a ``vit_digits`` workdir.

  python -m pipelines.save_digit digit.png                  # test digit 13 (a 7)
  python -m pipelines.save_digit --split test --index 0 first.png

The digits are scikit-learn's, split as ``configs/vit_digits.py`` splits them (``load_digits_source``),
so a test digit is one the model never trained on. It prints the file and the digit's label.
"""

import pathlib

import ml_collections
from absl import app, flags

_SPLIT = flags.DEFINE_enum('split', 'test', ['train', 'test'], 'The split to take the digit from.')
_INDEX = flags.DEFINE_integer('index', 13, "The digit's position in the split.", lower_bound=0)


def main(argv):
  if len(argv) != 2:
    raise app.UsageError('Give the PNG file to write, e.g. digit.png.')
  from PIL import Image  # pylint: disable=g-import-not-at-top

  from pipelines.image_sources import load_digits_source  # pylint: disable=g-import-not-at-top

  split = load_digits_source(ml_collections.ConfigDict({'image_size': None})).splits[_SPLIT.value]
  if _INDEX.value >= len(split.labels):
    raise app.UsageError(f'--index {_INDEX.value}: the {_SPLIT.value} split has {len(split.labels)} digits.')
  path = pathlib.Path(argv[1])
  Image.fromarray(split.images[_INDEX.value][..., 0]).save(path)
  print(f'wrote {path}: {_SPLIT.value} digit {_INDEX.value}, label {split.labels[_INDEX.value]}')


if __name__ == '__main__':
  app.run(main)
