"""Images per second of the ViT input pipeline alone (no model), as train.py runs it.

  # CIFAR-10 as a folder of images (unpack ../shared/data/cifar10/cifar10-jpg.tar.gz into DIR):
  python -m benchmarks.input_pipeline --image_folder DIR                     # crop (pad 4) + flip
  python -m benchmarks.input_pipeline --image_folder DIR --randaugment 2     # + RandAugment 2 ops
  python -m benchmarks.input_pipeline --image_folder DIR --grain_per_record  # grain's own ops instead
  # Disk-backed: the same images as 224x224 JPEGs in a records folder, made once:
  python -m pipelines.convert image-folder DIR --out DIR224 --resize 224,224 --quality 90
  python -m benchmarks.input_pipeline --records DIR224 --num_threads 1       # one core
  python -m benchmarks.input_pipeline --records DIR224 --num_threads 2

The folder runs load the images into memory once (not timed), then time ``--steps`` training
batches of ``--batch_size`` through ``ImageData.train_batches``: our vectorised numpy batch
maker, executed by grain threads (``pipelines.steps``). ``--grain_per_record`` times the same
augmentation written the way grain's documentation suggests instead: ``MapDataset.source``
over the in-memory arrays, ``shuffle``, a ``random_map`` crop-and-flip per record, ``batch``,
``to_iter_dataset`` with the same threads; it is there to show why the in-memory path keeps
its own batch maker. The records runs decode each JPEG, cut a random resized crop (area
0.08-1, as the ViT paper's Inception crop) from it, resize to 224x224 and flip: the work a
disk-backed ImageNet-style set does per image. The report ends with how many such cores one
accelerator would need at a given consumption rate (``--consumes``, images/s).

Measured on a 2-core AMD EPYC (AVX-512) CPU: docs/results.md, "Input pipeline throughput".
"""

import argparse
import json
import time

import ml_collections
import numpy as np


def _folder_config(args) -> ml_collections.ConfigDict:
  from vit.input_pipeline import default_data_config  # noqa: PLC0415

  config = default_data_config()
  config.num_threads = args.num_threads
  if args.image_folder:
    config.update(source='folder', path=args.image_folder)
    config.augment.update(crop_padding=4, flip=True, randaugment_layers=args.randaugment)
  else:
    config.update(source='records', path=args.records, image_size=(224, 224), mean=(0.5,), std=(0.5,))
    config.augment.update(crop_scale=(0.08, 1.0), flip=True, randaugment_layers=args.randaugment)
  return config


def _time(batches, steps: int, batch_size: int) -> tuple[float, float]:
  started = time.perf_counter()
  next(batches)
  first = time.perf_counter() - started
  started = time.perf_counter()
  for _ in range(steps):
    next(batches)
  return steps * batch_size / (time.perf_counter() - started), first


def _grain_per_record(images: np.ndarray, labels: np.ndarray, batch_size: int, num_threads: int):
  """Crop (pad 4) and flip per record with grain's own MapDataset operations."""
  import grain  # noqa: PLC0415

  height, width = images.shape[1:3]

  def crop_and_flip(example, rng):
    image, label = example
    top, left = rng.integers(0, 9, 2)
    padded = np.pad(image, ((4, 4), (4, 4), (0, 0)), mode='reflect')
    image = padded[top : top + height, left : left + width]
    return (image[:, ::-1] if rng.random() < 0.5 else image), label

  dataset = (
    grain.MapDataset.source(list(zip(images, labels)))
    .shuffle(seed=0)
    .repeat()
    .random_map(crop_and_flip, seed=1)
    .batch(batch_size)
  )
  options = grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=4)
  return iter(dataset.to_iter_dataset(options))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument('--image_folder', help='root/<split>/<class>/ images, loaded into memory')
  source.add_argument('--records', help='a records folder of images (python -m pipelines.convert)')
  parser.add_argument('--batch_size', type=int, default=128)
  parser.add_argument('--steps', type=int, default=200)
  parser.add_argument('--num_threads', type=int, default=2)
  parser.add_argument('--randaugment', type=int, default=0, help='RandAugment ops per image (0 = off)')
  parser.add_argument('--grain_per_record', action='store_true', help='time grain per-record ops instead')
  parser.add_argument(
    '--consumes', type=float, nargs='*', default=[1460.0], help='accelerator images/s to compute cores for'
  )
  args = parser.parse_args()

  from vit.input_pipeline import load_image_data  # noqa: PLC0415

  started = time.perf_counter()
  data = load_image_data(_folder_config(args))
  print(
    f'loaded {data.num_train} training images {data.image_shape} in {time.perf_counter() - started:.1f} s'
  )
  if args.grain_per_record:
    train = data._source.splits['train']  # noqa: SLF001 (the benchmark reuses the loaded arrays)
    batches = _grain_per_record(train.images, train.labels, args.batch_size, args.num_threads)
    what = 'grain per-record random_map'
  else:
    batches = data.train_batches(batch_size=args.batch_size, seed=0)
    what = 'ImageData.train_batches'
  rate, first = _time(batches, args.steps, args.batch_size)
  print(
    f'{what}: {rate:,.0f} images/s with {args.num_threads} thread(s), batch {args.batch_size}, '
    f'{args.steps} batches (first batch {first:.2f} s)'
  )
  numbers = {'images_per_second': rate, 'first_batch_seconds': first}
  if args.records:
    per_thread = rate / args.num_threads
    print(f'per thread (core): {per_thread:,.0f} images/s')
    for consumes in args.consumes:
      print(f'to feed {consumes:,.0f} images/s: {consumes / per_thread:.1f} such cores')
    numbers['images_per_second_per_thread'] = per_thread
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  main()
