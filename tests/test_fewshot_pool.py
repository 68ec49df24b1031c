"""The few-shot pool is a seeded random subset of the training split, not its first stored rows."""

import dataclasses

import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from pipelines.image_sources import InMemoryImages, LabelledImages
from trainer.partitioning import Devices
from vit import fewshot, tfds_source
from vit.input_pipeline import ImageData
from vit.task import fewshot_evaluation

CLASSES, PER_CLASS = 4, 40


class PixelFeatures(nnx.Module):
  """A stand-in model whose pre-logits features are the image's pixels."""

  def __init__(self):
    self.unused = nnx.Param(jnp.zeros(()))

  def __call__(self, images):
    features = images.reshape(images.shape[0], -1) + self.unused
    return features[:, :CLASSES], {'pre_logits': features}


def class_ordered_data() -> ImageData:
  """4 trivially separable classes (one bright pixel each, plus noise), stored class by class."""
  rng = np.random.default_rng(0)

  def split(per_class):
    labels = np.repeat(np.arange(CLASSES), per_class).astype(np.int32)
    images = rng.integers(0, 40, size=(len(labels), 4, 4, 1)).astype(np.uint8)
    images[np.arange(len(labels)), 0, labels, 0] = 255
    return LabelledImages(images, labels)

  source = InMemoryImages([str(c) for c in range(CLASSES)], {'train': split(PER_CLASS), 'test': split(10)})
  return ImageData(CLASSES, (4, 4, 1), CLASSES * PER_CLASS, source.class_names, (0.2,), (0.3,), source)


def _accuracies(data, train_examples):
  config = ml_collections.ConfigDict(
    dict(shots=(5,), seeds=3, held_out_per_class=2, train_examples=train_examples)
  )
  return fewshot_evaluation(PixelFeatures(), data, 'test', config, devices=Devices(), batch_size=16)


def test_a_small_pool_from_class_ordered_data_holds_every_class():
  data = class_ordered_data()
  whole = _accuracies(data, None)
  assert whole['fewshot_5shot'] == 1.0
  # The first 60 stored rows hold two classes and the first 40 one: the pool must not be those.
  for size in (60, 40):
    assert _accuracies(data, size)['fewshot_5shot'] == 1.0, size


def test_the_pool_is_the_same_rows_on_every_call_and_a_seeded_subset():
  first, again = fewshot.pool_ids(CLASSES * PER_CLASS, 60), fewshot.pool_ids(CLASSES * PER_CLASS, 60)
  np.testing.assert_array_equal(first, again)
  assert len(first) == 60 and len(np.unique(first)) == 60 and np.all(np.diff(first) > 0)
  assert not np.array_equal(first, np.arange(60))
  assert set(first // PER_CLASS) == set(range(CLASSES))
  np.testing.assert_array_equal(fewshot.pool_ids(100, 5000), np.arange(100))
  np.testing.assert_array_equal(fewshot.pool_ids(100, None), np.arange(100))


def test_two_processes_read_the_pools_rows_between_them():
  data = class_ordered_data()
  ids = fewshot.pool_ids(CLASSES * PER_CLASS, 60)

  def rows(process_index, process_count):
    batches = data.eval_batches(
      'train', batch_size=16, process_index=process_index, process_count=process_count, example_ids=ids
    )
    return [(batch['label'], batch['mask']) for batch in batches]

  one = rows(0, 1)
  assert sum(int(mask.sum()) for _, mask in one) == 60
  np.testing.assert_array_equal(
    np.concatenate([label[mask > 0] for label, mask in one]), data._source.splits['train'].labels[ids]
  )
  halves = [rows(0, 2), rows(1, 2)]
  for index, (label, mask) in enumerate(one):
    joined = np.concatenate([halves[0][index][0], halves[1][index][0]])
    np.testing.assert_array_equal(joined, label)
    np.testing.assert_array_equal(np.concatenate([halves[0][index][1], halves[1][index][1]]), mask)


def test_a_streamed_split_keeps_the_pools_rows_in_order():
  memory = class_ordered_data()
  split = memory._source.splits['train']

  class Stream(tfds_source.TfdsStream):
    def eval_batches(self, split_name, batch_size):
      for start in range(0, len(split.labels), batch_size):
        yield LabelledImages(
          split.images[start : start + batch_size], split.labels[start : start + batch_size]
        )

  stream = Stream(None, memory.class_names, (4, 4, 1), {'train': len(split.labels), 'test': 40}, None)
  streamed = dataclasses.replace(memory, _source=stream)
  ids = fewshot.pool_ids(CLASSES * PER_CLASS, 60)
  batches = list(streamed.eval_batches('train', batch_size=16, example_ids=ids))
  labels = np.concatenate([batch['label'][batch['mask'] > 0] for batch in batches])
  np.testing.assert_array_equal(labels, split.labels[ids])
