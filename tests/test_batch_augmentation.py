"""CutMix, random erasing and repeated augmentation in the image pipeline, on tiny inputs."""

import numpy as np
import pytest

from pipelines.image_sources import InMemoryImages, LabelledImages
from pipelines.steps import example_ids, repeated_example_ids
from tests.test_image_data import assert_batches_equal, assert_processes_make_the_batches, make_config
from tests.vit_test_configs import tiny_vit_config
from trainer.errors import ConfigError
from trainer.task import load_task
from vit.batch_augmentation import ERASE_AREA, erase_values
from vit.image_augmentation import Augmentation
from vit.input_pipeline import _AUGMENT_STREAM, ImageData, load_image_data

SIDE = 16
COUNT = 40


def constant_images(mean=(0.0,), std=(1 / 255,), **augment) -> ImageData:
  """Example i, of class i, is an image whose every pixel is 5 * i + 1; the default normalisation
  leaves pixels as they are."""
  images = (5 * np.arange(COUNT) + 1).astype(np.uint8)[:, None, None, None] * np.ones(
    (1, SIDE, SIDE, 1), np.uint8
  )
  names = [str(index) for index in range(COUNT)]
  source = InMemoryImages(names, {'train': LabelledImages(images, np.arange(COUNT, dtype=np.int32))})
  return ImageData(
    num_classes=COUNT,
    image_shape=(SIDE, SIDE, 1),
    num_train=COUNT,
    class_names=names,
    mean=mean,
    std=std,
    _source=source,
    _augmentation=Augmentation(**augment),
  )


def one_rectangle(mask: np.ndarray) -> bool:
  rows, cols = np.nonzero(mask)
  box = np.zeros_like(mask)
  box[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] = True
  return np.array_equal(mask, box)


# ------------------------------------------------------------------------------------- CutMix


def test_cutmix_label_weight_is_the_area_left_of_the_own_image():
  data = constant_images(cutmix_alpha=1.0)
  batch = next(data.train_batches(batch_size=COUNT, seed=3))
  weights = batch['mix_weight']
  assert ((weights >= 0) & (weights <= 1)).all() and len(np.unique(weights)) > COUNT // 2
  checked = 0
  for image, weight, label, mix_label in zip(
    batch['image'][..., 0], weights, batch['label'], batch['mix_label']
  ):
    own, pasted = image == 5 * label + 1, image == 5 * mix_label + 1
    assert (own | pasted).all()  # pasted, not blended
    assert own.mean() == pytest.approx(weight, abs=1e-6)
    if pasted.any():
      assert one_rectangle(pasted)
    checked += 1
  assert checked == COUNT


@pytest.mark.parametrize('switch, expected', [(0.0, 0.0), (0.3, 0.3), (1.0, 1.0)])
def test_switch_probability_picks_cutmix_per_row(switch, expected):
  augmentation = Augmentation(mixup_alpha=0.8, cutmix_alpha=1.0, mix_switch_prob=switch)
  draw = augmentation.draw(np.random.default_rng(0), 4000)
  assert draw.cutmix_rows.mean() == pytest.approx(expected, abs=0.025)


def test_mixup_rows_blend_and_cutmix_rows_paste_when_both_are_on():
  data = constant_images(mixup_alpha=0.8, cutmix_alpha=1.0)
  batch = next(data.train_batches(batch_size=40, seed=1))
  distinct = [len(np.unique(image)) for image in batch['image']]
  blended = [
    not np.isclose(image, np.round(image)).all() for image in batch['image']
  ]  # a blend of two integer pixels with a random weight is almost never an integer
  assert any(blended) and any(d == 2 and not b for d, b in zip(distinct, blended))


def test_mixup_alone_draws_its_weights_first():
  before = Augmentation(mixup_alpha=0.4).draw(np.random.default_rng([1, 7, 3]), 64)
  rng = np.random.default_rng([1, 7, 3])
  np.testing.assert_array_equal(before.mix_weight, rng.beta(0.4, 0.4, 64).astype(np.float32))
  assert before.cutmix_rows is None and before.erase_rows is None


@pytest.mark.parametrize('batch_size', [2, 8, 40, 64])
def test_no_row_is_its_own_partner(batch_size):
  for seed in range(5):
    draw = Augmentation(mixup_alpha=0.8, cutmix_alpha=1.0).draw(np.random.default_rng(seed), batch_size)
    rows = np.arange(batch_size)
    assert (draw.mix_partner != rows).all()
    np.testing.assert_array_equal(draw.mix_partner[draw.mix_partner], rows)  # pairs, two by two


def timm_mix_elem(images: np.ndarray, labels: np.ndarray, lam: np.ndarray, boxes: list, num_classes: int):
  """timm's ``Mixup`` with ``mode='elem'`` (``_mix_elem`` and ``mixup_target``, no label smoothing) in
  NumPy, given each row's mixup weight ``lam`` and CutMix box (None: mixup): row ``i`` takes from
  row ``j = B - 1 - i`` of the unmixed batch, and the target is ``lam * y + (1 - lam) * y.flip(0)``."""
  x_orig, x = images.astype(np.float32), images.astype(np.float32).copy()
  lam = lam.astype(np.float64).copy()
  height, width = images.shape[1:3]
  for i in range(len(images)):
    j = len(images) - i - 1
    if boxes[i] is not None:
      top, bottom, left, right = boxes[i]
      x[i][top:bottom, left:right] = x_orig[j][top:bottom, left:right]
      lam[i] = 1 - (bottom - top) * (right - left) / (height * width)  # correct_lam
    else:
      x[i] = x[i] * lam[i] + x_orig[j] * (1 - lam[i])
  one_hot = np.eye(num_classes)[labels]
  return x, lam[:, None] * one_hot + (1 - lam[:, None]) * one_hot[::-1]


def test_mixing_is_timms_flipped_batch_mix():
  data = constant_images(mixup_alpha=0.8, cutmix_alpha=1.0)
  seed = 5
  batch = next(data.train_batches(batch_size=COUNT, seed=seed))
  augmentation = data._augmentation
  draw = augmentation.draw(np.random.default_rng([_AUGMENT_STREAM, seed, 0]), COUNT)
  rows = np.arange(COUNT)
  boxes = augmentation.cutmix_boxes(draw, rows, SIDE, SIDE)
  assert 0 < sum(box is not None for box in boxes) < COUNT
  unmixed = data._source.examples('train', example_ids(seed, 0, COUNT, COUNT))
  expected_images, expected_targets = timm_mix_elem(
    unmixed.images, unmixed.labels, draw.mix_weight, boxes, COUNT
  )
  np.testing.assert_allclose(batch['image'], expected_images, rtol=1e-6, atol=1e-4)
  one_hot = np.eye(COUNT)
  weight = batch['mix_weight'][:, None]
  targets = weight * one_hot[batch['label']] + (1 - weight) * one_hot[batch['mix_label']]
  np.testing.assert_allclose(targets, expected_targets, rtol=1e-6, atol=1e-6)
  assert (batch['label'] != batch['mix_label']).all()


@pytest.mark.parametrize(
  'batch_size, repeats, message',
  [
    (
      31,
      1,
      r'batch_size \(31\) must be a multiple of 2: mixup and CutMix mix row i with row batch_size - 1 - i',
    ),
    (6, 2, r'batch_size \(6\) must be a multiple of 4: .* data.augment.repeats 2 puts copies 3 rows apart'),
  ],
)
def test_a_batch_that_would_pair_an_example_with_itself_is_one_line(batch_size, repeats, message):
  config = tiny_vit_config(
    batch_size=batch_size, **{'data.augment.cutmix_alpha': 1.0, 'data.augment.repeats': repeats}
  )
  with pytest.raises(ConfigError, match=message) as error:
    load_task(config)
  assert '\n' not in str(error.value)
  with pytest.raises(ValueError, match='batch size 7 is odd'):
    Augmentation(mixup_alpha=0.8).draw(np.random.default_rng(0), 7)


# ------------------------------------------------------------------------------ random erasing


def test_erasing_probability_is_the_configured_one():
  draw = Augmentation(erase_prob=0.25).draw(np.random.default_rng(0), 8000)
  assert draw.erase_rows.mean() == pytest.approx(0.25, abs=0.015)


def test_erased_pixels_are_normal_values_after_normalisation():
  mean, std = (0.5,), (0.25,)
  data = constant_images(mean=mean, std=std, erase_prob=1.0)
  batch = next(data.train_batches(batch_size=COUNT, seed=2))
  draw = data._augmentation.draw(np.random.default_rng([_AUGMENT_STREAM, 2, 0]), COUNT)
  erased_values = []
  for image, label, seed in zip(batch['image'][..., 0], batch['label'], draw.erase_seeds):
    plain = ((5 * label + 1) / 255 - mean[0]) / std[0]
    erased = ~np.isclose(image, plain, rtol=0, atol=1e-5)
    if not erased.any():  # no candidate box fit (rare), or a value landed on the plain one
      continue
    assert one_rectangle(erased)
    rows, cols = np.nonzero(erased)
    height, width = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
    assert ERASE_AREA[0] / 2 <= height * width / SIDE**2 <= ERASE_AREA[1] * 1.5  # sides are rounded
    inside = image[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
    np.testing.assert_allclose(inside, erase_values(int(seed), (height, width, 1))[..., 0], atol=1e-5)
    erased_values.append(inside.ravel())
  assert len(erased_values) >= COUNT - 4
  values = np.concatenate(erased_values)
  assert abs(values.mean()) < 0.1 and abs(values.std() - 1) < 0.1


def test_erasing_with_mixing_resumes_and_splits_over_processes_exactly():
  augment = {'erase_prob': 0.25, 'cutmix_alpha': 1.0, 'mixup_alpha': 0.8, 'crop_padding': 1}
  data = load_image_data(make_config(source='digits', augment=augment))
  single = assert_processes_make_the_batches(data, 2, 2, batch_size=32, seed=1, start_step=3)
  assert_batches_equal(next(data.train_batches(batch_size=32, seed=1, start_step=4)), single[1])


# ------------------------------------------------------------------------ repeated augmentation


def test_repeated_ids_hold_each_example_repeats_times_a_block_apart():
  ids = repeated_example_ids(seed=4, step=9, batch_size=12, num_examples=50, repeats=3)
  distinct = example_ids(4, 9, 4, 50)
  np.testing.assert_array_equal(ids, np.concatenate([distinct] * 3))
  np.testing.assert_array_equal(ids, repeated_example_ids(4, 9, 12, 50, 3))  # f(seed, step)
  assert not np.array_equal(ids, repeated_example_ids(5, 9, 12, 50, 3))
  np.testing.assert_array_equal(repeated_example_ids(4, 9, 12, 50, 1), example_ids(4, 9, 12, 50))
  with pytest.raises(ValueError, match='multiple of repeats'):
    repeated_example_ids(4, 9, 10, 50, 3)


def test_repeats_are_spread_over_processes_as_deit_does():
  ids = repeated_example_ids(seed=0, step=2, batch_size=12, num_examples=50, repeats=3)
  per_process = ids.reshape(3, 4)  # three processes, contiguous slices of the global batch
  for slice_ids in per_process:
    np.testing.assert_array_equal(np.sort(slice_ids), np.sort(per_process[0]))
    assert len(set(slice_ids)) == 4  # no process sees one example twice


def test_repeated_batches_are_a_function_of_seed_and_step_across_two_processes():
  augment = {'repeats': 3, 'flip': True, 'crop_padding': 1}
  data = load_image_data(make_config(source='digits', augment=augment))
  one = assert_processes_make_the_batches(data, 2, 3, batch_size=24, seed=6, start_step=10)
  resumed = next(data.train_batches(batch_size=24, seed=6, start_step=12))
  assert_batches_equal(resumed, one[2])
  labels = one[0]['label']
  np.testing.assert_array_equal(labels[:8], labels[8:16])
  np.testing.assert_array_equal(labels[:8], labels[16:])
  copies = one[0]['image'].reshape(3, 8, -1)
  assert any(not np.array_equal(copies[0, i], copies[1, i]) for i in range(8))  # augmented apart


# ---------------------------------------------------------------------------------- bad fields


@pytest.mark.parametrize(
  'field, value, message',
  [
    ('cutmix_alpha', -1.0, 'cutmix_alpha must be >= 0'),
    ('cutmix_alpha', float('nan'), 'cutmix_alpha must be a number'),
    ('mix_switch_prob', 1.5, r'mix_switch_prob must be in \[0, 1\]'),
    ('erase_prob', -0.1, r'erase_prob must be in \[0, 1\]'),
    ('repeats', 0, 'repeats must be >= 1'),
  ],
)
def test_bad_augmentation_fields_fail_in_one_line(field, value, message):
  with pytest.raises(ConfigError, match=message) as error:
    load_image_data(make_config(source='digits', augment={field: value}))
  assert '\n' not in str(error.value)


def test_batch_size_must_be_a_multiple_of_repeats():
  with pytest.raises(ConfigError, match=r'batch_size \(32\) must be divisible by data.augment.repeats \(3\)'):
    load_task(tiny_vit_config(**{'data.augment.repeats': 3}))
