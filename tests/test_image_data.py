"""Tests for the image-classification input pipeline (vit.input_pipeline and its sources)."""

import gzip
import os
import re
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from pipelines import image_sources
from tests.real_data import data_set_dir
from vit.image_augmentation import RANDAUGMENT_OPS, randaugment
from vit.input_pipeline import default_data_config, load_image_data

MNIST_DIR = data_set_dir('mnist')
NO_NORMALISATION = {'mean': (0.0,), 'std': (1 / 255,)}  # images come out as raw 0..255


def make_config(augment=None, **fields):
  config = default_data_config()
  for key, value in fields.items():
    config[key] = value
  for key, value in (augment or {}).items():
    config.augment[key] = value
  return config


def take(iterator, count):
  return [next(iterator) for _ in range(count)]


def concat_batches(batches):
  return {key: np.concatenate([batch[key] for batch in batches]) for key in batches[0]}


def assert_batches_equal(left, right):
  assert left.keys() == right.keys()
  for key in left:
    np.testing.assert_array_equal(left[key], right[key], err_msg=key)


def assert_processes_make_the_batches(data, process_count: int, steps: int, **train):
  """The first ``steps`` batches of ``data.train_batches(**train)`` are each the slices of
  ``process_count`` processes put together; returns those one-process batches."""
  single = take(data.train_batches(**train), steps)
  per_process = [
    take(data.train_batches(**train, process_index=index, process_count=process_count), steps)
    for index in range(process_count)
  ]
  for step in range(steps):
    assert_batches_equal(concat_batches([batches[step] for batches in per_process]), single[step])
  return single


@pytest.fixture(scope='module')
def digits():
  return load_image_data(make_config(source='digits'))


# ------------------------------------------------------------------------------ digits


def test_digits_shapes_and_stratified_split(digits):
  assert (digits.num_classes, digits.image_shape) == (10, (8, 8, 1))
  assert (digits.num_train, digits.num_examples('test')) == (1437, 360)
  test_labels = concat_batches(list(digits.eval_batches('test', batch_size=360)))['label']
  assert set(np.bincount(test_labels, minlength=10)) <= {35, 36, 37}
  batch = next(digits.train_batches(batch_size=32, seed=0))
  assert batch['image'].shape == (32, 8, 8, 1) and batch['image'].dtype == np.float32
  assert batch['label'].shape == (32,) and batch['label'].dtype == np.int32


def test_digits_load_is_deterministic_and_normalised(digits):
  again = load_image_data(make_config(source='digits'))
  assert_batches_equal(
    next(digits.eval_batches('train', batch_size=1437)),
    next(again.eval_batches('train', batch_size=1437)),
  )
  images = next(digits.eval_batches('train', batch_size=1437))['image']
  assert abs(images.mean()) < 1e-3 and abs(images.std() - 1) < 1e-3


def test_one_epoch_visits_every_training_example_once(digits):
  # 1437 = 3 * 479: the first three batches are exactly one epoch.
  epoch = concat_batches(take(digits.train_batches(batch_size=479, seed=3), 3))['image']
  everything = next(digits.eval_batches('train', batch_size=1437))['image']
  assert sorted(map(bytes, epoch)) == sorted(map(bytes, everything))


AUGMENTED = {'crop_padding': 1, 'randaugment_layers': 1, 'mixup_alpha': 0.4}


@pytest.mark.parametrize('augment', [{}, AUGMENTED])
def test_resuming_at_a_step_replays_the_uninterrupted_batches(augment):
  data = load_image_data(make_config(source='digits', augment=augment))
  uninterrupted = take(data.train_batches(batch_size=128, seed=7), 14)  # crosses epoch 1
  for step in (5, 11, 13):
    resumed = next(data.train_batches(batch_size=128, seed=7, start_step=step))
    assert_batches_equal(resumed, uninterrupted[step])
  different_seed = next(data.train_batches(batch_size=128, seed=8))
  assert not np.array_equal(different_seed['image'], uninterrupted[0]['image'])


@pytest.mark.parametrize('augment', [{}, AUGMENTED])
def test_process_slices_concatenate_to_the_one_process_batch(augment):
  data = load_image_data(make_config(source='digits', augment=augment))
  assert_processes_make_the_batches(data, 4, 2, batch_size=64, seed=1, start_step=20)


@pytest.mark.parametrize('process_count', [1, 2])
def test_eval_pass_covers_each_example_once_with_mask(digits, process_count):
  expected = digits._source.splits['test']
  per_process = [
    list(digits.eval_batches('test', batch_size=100, process_index=index, process_count=process_count))
    for index in range(process_count)
  ]
  assert all(len(batches) == 4 for batches in per_process)  # 360 = 3 * 100 + 60
  global_batches = [concat_batches(parts) for parts in zip(*per_process)]
  merged = concat_batches(global_batches)
  assert merged['mask'].sum() == 360 and merged['mask'].shape == (400,)
  np.testing.assert_array_equal(merged['mask'], np.arange(400) < 360)
  np.testing.assert_array_equal(merged['label'][:360], expected.labels)
  np.testing.assert_array_equal(merged['image'][:360], digits.prepare_images(expected.images))


def test_mixup_adds_partner_labels_and_weights_in_unit_interval(digits):
  data = load_image_data(make_config(source='digits', augment={'mixup_alpha': 0.2}))
  batch = next(data.train_batches(batch_size=256, seed=0))
  assert batch['mix_label'].dtype == np.int32 and batch['mix_label'].shape == (256,)
  assert batch['mix_weight'].dtype == np.float32 and batch['mix_weight'].shape == (256,)
  assert ((batch['mix_weight'] >= 0) & (batch['mix_weight'] <= 1)).all()
  assert (batch['label'] != batch['mix_label']).any()
  plain = next(digits.train_batches(batch_size=256, seed=0))
  np.testing.assert_array_equal(batch['label'], plain['label'])
  assert 'mix_label' not in plain


# ------------------------------------------------------------------------ augmentation


def batch_at_step_2(data):
  return next(data.train_batches(batch_size=10, seed=4, start_step=2))


def raw_rgb_folder(tmp_path, size=(6, 8)):
  """A folder data set whose pixels are all different, for checking crops and flips."""
  rng = np.random.default_rng(0)
  for index in range(10):
    class_dir = tmp_path / 'train' / f'class{index % 2}'
    class_dir.mkdir(parents=True, exist_ok=True)
    pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(class_dir / f'{index}.png')
  return tmp_path


def test_flip_mirrors_some_images_and_keeps_the_rest(tmp_path):
  root = str(raw_rgb_folder(tmp_path))
  plain = load_image_data(make_config(source='folder', path=root, **NO_NORMALISATION))
  flipped = load_image_data(
    make_config(source='folder', path=root, augment={'flip': True}, **NO_NORMALISATION)
  )
  original = next(plain.train_batches(batch_size=10, seed=4))['image']
  batch = next(flipped.train_batches(batch_size=10, seed=4))['image']
  assert batch.shape == original.shape
  mirrored = [np.array_equal(b, o[:, ::-1]) for b, o in zip(batch, original)]
  unchanged = [np.array_equal(b, o) for b, o in zip(batch, original)]
  assert all(m or u for m, u in zip(mirrored, unchanged)) and any(mirrored) and any(unchanged)
  assert_batches_equal(batch_at_step_2(flipped), batch_at_step_2(flipped))


@pytest.mark.parametrize('mode', ['reflect', 'constant'])
def test_crop_is_a_window_of_the_padded_image(tmp_path, mode):
  root = str(raw_rgb_folder(tmp_path))
  plain = load_image_data(make_config(source='folder', path=root, **NO_NORMALISATION))
  cropped = load_image_data(
    make_config(
      source='folder',
      path=root,
      augment={'crop_padding': 2, 'crop_pad_mode': mode},
      **NO_NORMALISATION,
    )
  )
  original = next(plain.train_batches(batch_size=10, seed=4))['image']
  batch = next(cropped.train_batches(batch_size=10, seed=4))['image']
  assert batch.shape == original.shape == (10, 6, 8, 3)
  for image, source in zip(batch, original):
    padded = np.pad(source, ((2, 2), (2, 2), (0, 0)), mode=mode)
    windows = [padded[top : top + 6, left : left + 8] for top in range(5) for left in range(5)]
    assert any(np.array_equal(image, window) for window in windows)
  assert_batches_equal(batch_at_step_2(cropped), batch_at_step_2(cropped))


@pytest.mark.parametrize('op', sorted(RANDAUGMENT_OPS))
@pytest.mark.parametrize('channels', [1, 3])
def test_every_randaugment_op_keeps_shape_and_dtype(op, channels):
  image = np.random.default_rng(0).integers(0, 256, (8, 8, channels), dtype=np.uint8)
  index = list(RANDAUGMENT_OPS).index(op)
  for sign in (-1, 1):
    augmented = randaugment(image, np.array([index]), np.array([sign]), magnitude=20)
    assert augmented.shape == image.shape and augmented.dtype == np.uint8


def test_randaugment_batches_are_deterministic_and_change_images(digits):
  data = load_image_data(
    make_config(source='digits', augment={'randaugment_layers': 2, 'randaugment_magnitude': 15})
  )
  first = next(data.train_batches(batch_size=64, seed=2))
  assert_batches_equal(first, next(data.train_batches(batch_size=64, seed=2)))
  plain = next(digits.train_batches(batch_size=64, seed=2))
  assert not np.array_equal(first['image'], plain['image'])


def test_random_resized_crop_of_in_memory_images_is_deterministic_and_changes_them(digits):
  cropped = load_image_data(make_config(source='digits', augment={'crop_scale': (0.2, 0.5)}))
  first = next(cropped.train_batches(batch_size=16, seed=2))
  assert_batches_equal(first, next(cropped.train_batches(batch_size=16, seed=2)))
  plain = next(digits.train_batches(batch_size=16, seed=2))
  assert first['image'].shape == plain['image'].shape
  np.testing.assert_array_equal(first['label'], plain['label'])
  assert not np.array_equal(first['image'], plain['image'])


# ---------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
  'fields, message',
  [
    ({'source': 'csv'}, "^config.data.source is 'csv'; allowed values: digits, tfds, folder, idx, records.$"),
    ({'source': 'digits', 'augment': {'randaugment_magnitude': 31}}, '0..30'),
    ({'source': 'digits', 'augment': {'crop_padding': 8}}, 'below the image side'),
    ({'source': 'digits', 'mean': (0.5,)}, 'both data.mean and data.std'),
    ({'source': 'folder'}, 'data.path must be set'),
    ({'source': 'records'}, 'data.path must be set'),
    ({'source': 'digits', 'augment': {'crop_scale': (0.5, 1.0), 'crop_padding': 1}}, 'set only one'),
    ({'source': 'digits', 'augment': {'crop_scale': (0.0, 1.0)}}, r'0 < low <= high <= 1'),
    ({'source': 'digits', 'augment': {'crop_ratio': (2.0, 1.0)}}, r'crop_ratio must be \(low, high\)'),
  ],
)
def test_bad_config_fails_with_a_clear_error(fields, message):
  with pytest.raises(ValueError, match=message):
    load_image_data(make_config(**fields))


def test_unknown_config_field_is_rejected():
  config = default_data_config()
  config.unlock()
  config.batch_sise = 3
  with pytest.raises(ValueError, match='batch_sise'):
    load_image_data(config)


def test_bad_split_and_batch_size_fail_clearly(digits):
  with pytest.raises(ValueError, match=r"'validation'.*\['train', 'test'\]"):
    digits.eval_batches('validation', batch_size=10)
  with pytest.raises(ValueError, match='multiple of process_count'):
    digits.train_batches(batch_size=10, seed=0, process_count=3)


# ----------------------------------------------------------------------------- folder


def write_png_folder(root, layout, size=(4, 5), mode='RGB'):
  """layout: {split: {class: count}}; a class is plain grey 10 * (its first letter - 'a')."""
  for split, classes in layout.items():
    for name, count in classes.items():
      (root / split / name).mkdir(parents=True, exist_ok=True)
      grey = 10 * (ord(name[0]) - ord('a'))
      for number in range(count):
        Image.new(mode, size[::-1], (grey,) * len(mode)).save(root / split / name / f'{number}.png')
  return root


def test_folder_source_loads_classes_splits_and_labels(tmp_path):
  root = write_png_folder(tmp_path, {'train': {'cat': 3, 'dog': 2, 'ant': 1}, 'test': {'cat': 1, 'dog': 2}})
  data = load_image_data(make_config(source='folder', path=str(root), **NO_NORMALISATION))
  assert data.class_names == ['ant', 'cat', 'dog'] and data.num_classes == 3
  assert data.image_shape == (4, 5, 3)
  assert (data.num_train, data.num_examples('test')) == (6, 3)
  batch = next(data.eval_batches('test', batch_size=4))
  np.testing.assert_array_equal(batch['label'], [1, 2, 2, 0])
  np.testing.assert_array_equal(batch['mask'], [1, 1, 1, 0])
  np.testing.assert_allclose(batch['image'][:3, 0, 0, 0], [20, 30, 30])


def test_folder_grey_images_and_resizing(tmp_path):
  root = tmp_path / 'data'
  write_png_folder(root, {'train': {'a': 2}}, size=(6, 6), mode='L')
  write_png_folder(root, {'train': {'b': 1}}, size=(9, 7), mode='L')
  with pytest.raises(ValueError, match=r'does not have the shape .* set data.image_size'):
    load_image_data(make_config(source='folder', path=str(root)))
  data = load_image_data(make_config(source='folder', path=str(root), image_size=(5, 4)))
  assert data.image_shape == (5, 4, 1) and data.split_names == ('train',)


def test_folder_errors_name_the_problem(tmp_path):
  missing = tmp_path / 'nowhere'
  with pytest.raises(FileNotFoundError, match=str(missing)):
    load_image_data(make_config(source='folder', path=str(missing)))
  (tmp_path / 'test').mkdir()
  with pytest.raises(FileNotFoundError, match='train'):
    load_image_data(make_config(source='folder', path=str(tmp_path)))
  (tmp_path / 'test').rmdir()
  (tmp_path / 'train').mkdir()
  with pytest.raises(ValueError, match='no class folders'):
    load_image_data(make_config(source='folder', path=str(tmp_path)))
  write_png_folder(tmp_path, {'train': {'cat': 2}})
  (tmp_path / 'train' / 'dog').mkdir()
  with pytest.raises(ValueError, match=r'dog has no .png'):
    load_image_data(make_config(source='folder', path=str(tmp_path)))
  write_png_folder(tmp_path, {'train': {'dog': 1}})
  broken = tmp_path / 'train' / 'dog' / 'broken.jpg'
  broken.write_bytes(b'not really a jpeg')
  with pytest.raises(ValueError, match=r'cannot read image .*broken\.jpg'):
    load_image_data(make_config(source='folder', path=str(tmp_path)))


def test_folder_cache_is_reused_and_stays_out_of_the_data_folder(tmp_path):
  root = write_png_folder(tmp_path / 'data', {'train': {'a': 2, 'b': 2}, 'test': {'a': 1}})
  before = sorted(root.rglob('*'))
  config = make_config(source='folder', path=str(root), cache_dir=str(tmp_path / 'cache'))
  first = load_image_data(config)
  assert len(list((tmp_path / 'cache').glob('*.npy'))) == 2
  assert sorted(root.rglob('*')) == before
  second = load_image_data(config)
  np.testing.assert_array_equal(first._source.splits['train'].images, second._source.splits['train'].images)


def test_a_damaged_cache_is_decoded_again_with_a_warning_naming_it(tmp_path, caplog):
  root = write_png_folder(tmp_path / 'data', {'train': {'a': 2, 'b': 2}, 'test': {'a': 1}})
  config = make_config(source='folder', path=str(root), cache_dir=str(tmp_path / 'cache'))
  first = load_image_data(config)._source.splits['train'].images
  cached = max((tmp_path / 'cache').glob('folder-train-*.npy'))
  whole = cached.read_bytes()
  for damaged in (whole[: len(whole) - 7], b'not an array', np.lib.format.magic(1, 0)):
    cached.write_bytes(damaged)
    caplog.clear()
    again = load_image_data(config)._source.splits['train'].images
    np.testing.assert_array_equal(again, first)
    assert [r.getMessage() for r in caplog.records if str(cached) in r.getMessage()], caplog.text
    assert cached.read_bytes() == whole  # replaced by the decoded split
  np.save(cached, first[:1])  # an array, but not this split's
  caplog.clear()
  np.testing.assert_array_equal(load_image_data(config)._source.splits['train'].images, first)
  assert 'is damaged (it holds uint8 (1,' in caplog.text


def test_a_cache_write_cut_short_leaves_no_cache_and_its_remains_are_removed(tmp_path, monkeypatch):
  root = write_png_folder(tmp_path / 'data', {'train': {'a': 2, 'b': 2}})
  cache = tmp_path / 'cache'
  config = make_config(source='folder', path=str(root), cache_dir=str(cache))
  save = np.save

  def killed_while_writing(file, array):
    file.write(b'\x93NUMPY half of an array')
    raise KeyboardInterrupt  # the process ends here, its temporary file left behind

  monkeypatch.setattr(image_sources.np, 'save', killed_while_writing)
  with pytest.raises(KeyboardInterrupt):
    load_image_data(config)
  assert not list(cache.glob('*.npy'))
  (left,) = cache.glob('*.partial')
  finished = subprocess.run(
    [sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, text=True
  )
  abandoned = left.with_name(left.name.replace(f'.{os.getpid()}.', f'.{int(finished.stdout)}.'))
  left.rename(abandoned)  # as if written by a process that has ended
  monkeypatch.setattr(image_sources.np, 'save', save)
  load_image_data(config)
  assert len(list(cache.glob('*.npy'))) == 1 and not list(cache.glob('*.partial'))


def test_folder_decoding_in_several_chunks_matches_one_chunk(tmp_path, monkeypatch):
  root = str(raw_rgb_folder(tmp_path))
  one_chunk = load_image_data(make_config(source='folder', path=root))
  monkeypatch.setattr(image_sources, 'DECODE_CHUNK_FILES', 3)
  chunks = load_image_data(make_config(source='folder', path=root))
  np.testing.assert_array_equal(
    one_chunk._source.splits['train'].images, chunks._source.splits['train'].images
  )


# -------------------------------------------------------------------------------- idx


def write_idx(path, array, magic_type=0x08):
  header = bytes([0, 0, magic_type, array.ndim]) + struct.pack(f'>{array.ndim}I', *array.shape)
  with gzip.open(path, 'wb') as file:
    file.write(header + array.astype(np.uint8).tobytes())


def write_idx_folder(root, train_count=5, test_count=3, label_count=None):
  rng = np.random.default_rng(0)
  root.mkdir(exist_ok=True)
  for prefix, count in (('train', train_count), ('t10k', test_count)):
    write_idx(root / f'{prefix}-images-idx3-ubyte.gz', rng.integers(0, 256, (count, 4, 6)))
    labels = np.arange(label_count or count) % 3
    write_idx(root / f'{prefix}-labels-idx1-ubyte.gz', labels)
  return root


def test_idx_source_reads_gzipped_files(tmp_path):
  root = write_idx_folder(tmp_path / 'idx')
  data = load_image_data(make_config(source='idx', path=str(root)))
  assert data.image_shape == (4, 6, 1) and data.num_classes == 3
  assert (data.num_train, data.num_examples('test')) == (5, 3)
  expected = image_sources.read_idx(root / 't10k-labels-idx1-ubyte.gz', expected_ndim=1)
  np.testing.assert_array_equal(next(data.eval_batches('test', batch_size=3))['label'], expected)


def test_idx_errors_name_the_file(tmp_path):
  root = write_idx_folder(tmp_path / 'mismatch', label_count=4)
  with pytest.raises(ValueError, match=r'5 images but .*train-labels.* 4 labels'):
    load_image_data(make_config(source='idx', path=str(root)))
  root = write_idx_folder(tmp_path / 'missing')
  (root / 't10k-labels-idx1-ubyte.gz').unlink()
  with pytest.raises(FileNotFoundError, match='t10k-labels-idx1-ubyte'):
    load_image_data(make_config(source='idx', path=str(root)))
  root = write_idx_folder(tmp_path / 'magic')
  write_idx(root / 'train-images-idx3-ubyte.gz', np.zeros((5, 4, 6)), magic_type=0x0D)
  with pytest.raises(ValueError, match='train-images.*not supported'):
    load_image_data(make_config(source='idx', path=str(root)))
  (root / 'train-images-idx3-ubyte.gz').write_bytes(gzip.compress(b'\x08\x03abcdefgh'))
  with pytest.raises(ValueError, match='bad magic number'):
    load_image_data(make_config(source='idx', path=str(root)))


@pytest.mark.skipif(not MNIST_DIR.is_dir(), reason=f'{MNIST_DIR} not present')
def test_real_mnist_idx_files_load():
  data = load_image_data(make_config(source='idx', path=str(MNIST_DIR)))
  assert (data.num_train, data.num_examples('test')) == (60000, 10000)
  assert data.image_shape == (28, 28, 1) and data.num_classes == 10
  np.testing.assert_allclose(data.mean, [0.1307], atol=1e-3)


# ------------------------------------------------------------------------------- tfds


def test_tfds_cifar10_under_mock_data():
  tfds = pytest.importorskip('tensorflow_datasets')
  with tfds.testing.mock_data(num_examples=20):
    data = load_image_data(make_config(source='tfds', name='cifar10'))
    resized = load_image_data(make_config(source='tfds', name='cifar10', image_size=(16, 16)))
  assert data.image_shape == (32, 32, 3) and data.num_classes == 10
  assert len(data.class_names) == 10  # mocked metadata has no names, real data does
  assert (data.num_train, data.num_examples('test')) == (20, 20)
  assert next(data.train_batches(batch_size=8, seed=0))['image'].shape == (8, 32, 32, 3)
  masks = [batch['mask'] for batch in data.eval_batches('test', batch_size=8)]
  assert len(masks) == 3 and np.concatenate(masks).sum() == 20
  assert next(resized.eval_batches('test', batch_size=4))['image'].shape == (4, 16, 16, 3)


def test_tfds_random_access_under_mock_data():
  tfds = pytest.importorskip('tensorflow_datasets')
  augment = {'crop_scale': (0.3, 1.0), 'flip': True}
  config = make_config(augment, source='tfds', name='cifar10', random_access=True, mean=(0.5,), std=(0.25,))
  with tfds.testing.mock_data(num_examples=20):
    data = load_image_data(config)
    uninterrupted = take(data.train_batches(batch_size=8, seed=4), 5)
    resumed = take(data.train_batches(batch_size=8, seed=4, start_step=3), 2)
    halves = [
      take(data.train_batches(batch_size=8, seed=4, process_index=p, process_count=2), 1)[0] for p in (0, 1)
    ]
    masks = [batch['mask'] for batch in data.eval_batches('test', batch_size=8)]
  assert type(data._source).__name__ == 'TfdsRandomAccess'
  assert uninterrupted[0]['image'].shape == (8, 32, 32, 3)
  for left, right in zip(uninterrupted[3:], resumed):
    assert_batches_equal(left, right)
  assert_batches_equal(concat_batches(halves), uninterrupted[0])
  assert len(masks) == 3 and np.concatenate(masks).sum() == 20


def test_tfds_streaming_under_mock_data():
  tfds = pytest.importorskip('tensorflow_datasets')
  config = make_config(
    source='tfds',
    name='cifar10',
    streaming=True,
    mean=(0.5,),
    std=(0.25,),
    augment={'flip': True, 'mixup_alpha': 0.2},
  )
  with tfds.testing.mock_data(num_examples=20):
    data = load_image_data(config)
    batches = take(data.train_batches(batch_size=8, seed=0, process_index=1, process_count=2), 3)
    evaluated = list(data.eval_batches('test', batch_size=8))
  assert batches[0]['image'].shape == (4, 32, 32, 3) and 'mix_weight' in batches[0]
  assert np.concatenate([batch['mask'] for batch in evaluated]).sum() == 20


def test_tfds_without_prepared_data_fails_fast_with_build_hint(tmp_path):
  pytest.importorskip('tensorflow_datasets')
  start = time.monotonic()
  hint = rf"'mnist'.*{re.escape(str(tmp_path))}.*tfds build mnist"
  with pytest.raises(FileNotFoundError, match=hint):
    load_image_data(make_config(source='tfds', name='mnist', data_dir=str(tmp_path)))
  assert time.monotonic() - start < 30  # tensorflow import included
  with pytest.raises(ValueError, match="unknown tfds data set 'no_such_set'"):
    load_image_data(make_config(source='tfds', name='no_such_set', data_dir=str(tmp_path)))


def test_a_last_batch_with_no_row_for_a_process_is_all_padding(digits):
  # 10 chosen examples in batches of 8 over two processes: the last global batch's 2 rows all fall
  # in process 0's half, so process 1 gets a batch of padding only (and still one, to stay in step).
  ids = np.arange(10) * 7
  halves = [
    list(digits.eval_batches('train', batch_size=8, process_index=i, process_count=2, example_ids=ids))
    for i in range(2)
  ]
  assert [len(batches) for batches in halves] == [2, 2]
  assert halves[0][1]['mask'].tolist() == [1, 1, 0, 0]
  assert halves[1][1]['mask'].tolist() == [0, 0, 0, 0] and not halves[1][1]['image'].any()
  whole = next(digits.eval_batches('train', batch_size=10, example_ids=ids))
  np.testing.assert_array_equal(
    np.concatenate([halves[0][0]['label'], halves[1][0]['label'], halves[0][1]['label'][:2]]), whole['label']
  )
