"""Tests for records folders (pipelines.records, pipelines.convert) and the ViT's disk-backed source."""

import io
import json
import pathlib

import jax
import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter
from flax import nnx
from PIL import Image

from pipelines import convert, records
from tests.interruptions import stop_at_batch
from tests.test_image_data import assert_batches_equal, assert_processes_make_the_batches, take
from trainer.errors import DataError, MissingFileError
from trainer.evaluation import restore_checkpoint
from trainer.io.metrics_io import read_metrics
from trainer.loop import train_and_evaluate
from vit.input_pipeline import _AUGMENT_STREAM, default_data_config, load_image_data

NORMALISATION = {'mean': (0.0,), 'std': (1 / 255,)}  # images come out as raw 0..255
RANDOM_RESIZED_CROP = {'crop_scale': (0.3, 1.0), 'flip': True}


def write_numbered_folder(root: pathlib.Path, counts: dict[str, int], size=(6, 7)) -> pathlib.Path:
  """An image folder whose PNG number i (over all classes of a split) has all pixels of channel 0 = i."""
  rng = np.random.default_rng(0)
  for split, count in counts.items():
    for number in range(count):
      folder = root / split / f'class{number % 3}'
      folder.mkdir(parents=True, exist_ok=True)
      pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
      pixels[..., 0] = number
      Image.fromarray(pixels).save(folder / f'{number:03d}.png')
  return root


def image_config(augment=None, **fields):
  config = default_data_config()
  config.update(NORMALISATION, **fields)
  config.augment.update(augment or {})
  return config


@pytest.fixture(scope='module')
def numbered(tmp_path_factory):
  """(image folder, its records folder): 40 train and 9 test images in 3 classes."""
  base = tmp_path_factory.mktemp('numbered')
  folder = write_numbered_folder(base / 'images', {'train': 40, 'test': 9})
  return folder, convert.convert_image_folder(folder, base / 'records')


def test_records_give_exactly_the_batches_of_the_image_folder(numbered):
  folder, records_folder = numbered
  augment = {'crop_padding': 2, 'flip': True, 'randaugment_layers': 1}
  from_folder = load_image_data(image_config(augment, source='folder', path=str(folder)))
  from_records = load_image_data(image_config(augment, source='records', path=str(records_folder)))
  assert (from_records.class_names, from_records.image_shape) == (
    from_folder.class_names,
    from_folder.image_shape,
  )
  for left, right in zip(
    take(from_folder.train_batches(batch_size=16, seed=3), 6),
    take(from_records.train_batches(batch_size=16, seed=3), 6),
  ):
    assert_batches_equal(left, right)
  for left, right in zip(
    from_folder.eval_batches('test', batch_size=4),
    from_records.eval_batches('test', batch_size=4),
    strict=True,
  ):
    assert_batches_equal(left, right)


def test_resuming_in_the_middle_of_an_epoch_replays_the_batches(numbered):
  data = load_image_data(image_config(RANDOM_RESIZED_CROP, source='records', path=str(numbered[1])))
  uninterrupted = take(data.train_batches(batch_size=16, seed=5), 8)  # 2.5 batches an epoch
  resumed = take(data.train_batches(batch_size=16, seed=5, start_step=5), 3)
  for left, right in zip(uninterrupted[5:], resumed):
    assert_batches_equal(left, right)
  assert not np.array_equal(uninterrupted[5]['image'], uninterrupted[6]['image'])


def test_two_processes_make_the_one_process_batch_and_read_an_epoch_once(tmp_path):
  records_folder = convert.convert_image_folder(
    write_numbered_folder(tmp_path, {'train': 48}), tmp_path / 'records'
  )
  cropped = load_image_data(image_config(RANDOM_RESIZED_CROP, source='records', path=str(records_folder)))
  assert_processes_make_the_batches(cropped, 2, 2, batch_size=16, seed=1, start_step=2)

  plain = load_image_data(image_config(source='records', path=str(records_folder)))
  seen = []
  for process in (0, 1):  # 3 steps of 16 = one epoch of 48
    for batch in take(plain.train_batches(batch_size=16, seed=1, process_index=process, process_count=2), 3):
      assert len(batch['label']) == 8
      seen += batch['image'][:, 0, 0, 0].astype(int).tolist()
  assert sorted(seen) == list(range(48))


def test_random_resized_crop_windows_lie_inside_the_image_and_full_scale_is_a_resize(numbered):
  from vit.image_augmentation import Augmentation

  augmentation = Augmentation(crop_scale=(0.05, 1.0), crop_ratio=(0.5, 2.0))
  draw = augmentation.draw(np.random.default_rng(0), 500)
  for row, (height, width) in enumerate(np.random.default_rng(1).integers(1, 300, (500, 2))):
    left, top, right, bottom = augmentation.crop_box(draw, row, int(height), int(width))
    assert 0 <= left < right <= width and 0 <= top < bottom <= height
  # A window of the whole image at its own ratio is a plain resize; the flip is done while decoding.
  whole_crop = {'crop_scale': (1.0, 1.0), 'crop_ratio': (7 / 6, 7 / 6), 'flip': True}
  whole = load_image_data(image_config(whole_crop, source='records', path=str(numbered[1])))
  plain = load_image_data(image_config({'flip': True}, source='records', path=str(numbered[1])))
  for left, right in zip(
    take(whole.train_batches(batch_size=8, seed=0), 3), take(plain.train_batches(batch_size=8, seed=0), 3)
  ):
    assert_batches_equal(left, right)


def test_larger_stored_images_are_cropped_before_resizing(tmp_path):
  folder = write_numbered_folder(tmp_path / 'images', {'train': 6}, size=(64, 48))
  records_folder = convert.convert_image_folder(folder, tmp_path / 'records')
  data = load_image_data(
    image_config(RANDOM_RESIZED_CROP, source='records', path=str(records_folder), image_size=(8, 8))
  )
  batch = next(data.train_batches(batch_size=6, seed=0))
  assert batch['image'].shape == (6, 8, 8, 3) and data.image_shape == (8, 8, 3)
  # Each row is its stored 48x64 image's crop window (drawn for the stored size) resized to 8x8, then
  # mirrored where the draw says: not a crop of the image first shrunk to 8x8.
  draw = data._augmentation.draw(np.random.default_rng([_AUGMENT_STREAM, 0, 0]), 6)
  files = {int(path.stem): path for path in folder.glob('train/*/*.png')}
  for row, image in enumerate(batch['image']):
    number = int(round(float(image[0, 0, 0])))  # channel 0 holds the image's number everywhere
    with Image.open(files[number]) as stored:
      box = data._augmentation.crop_box(draw, row, stored.height, stored.width)
      expected = np.asarray(stored.convert('RGB').resize((8, 8), Image.BILINEAR, box=box), np.float32)
    if draw.flips[row]:
      expected = expected[:, ::-1]
    np.testing.assert_allclose(image, expected, atol=1e-3, err_msg=f'row {row}')


def write_records(path: pathlib.Path, payloads: list[bytes], class_names=('a', 'b')) -> pathlib.Path:
  path.mkdir()
  writer = ArrayRecordWriter(str(path / 'train.array_record'), records.WRITER_OPTIONS)
  for payload in payloads:
    writer.write(payload)
  writer.close()
  metadata = {
    'format': records.FORMAT,
    'version': records.VERSION,
    'kind': 'images',
    'splits': {'train': {'file': 'train.array_record', 'records': len(payloads)}},
    'class_names': list(class_names),
  }
  (path / records.METADATA_FILE).write_text(json.dumps(metadata))
  return path


def png_bytes(value: int) -> bytes:
  buffer = io.BytesIO()
  Image.new('RGB', (4, 4), (value, value, value)).save(buffer, format='PNG')
  return buffer.getvalue()


def test_an_unreadable_image_record_is_named_with_its_file(tmp_path):
  payloads = [records.pack_image(i % 2, png_bytes(i)) for i in range(6)]
  payloads[3] = records.pack_image(1, b'not an image at all')
  folder = write_records(tmp_path / 'broken', payloads)
  data = load_image_data(image_config(source='records', path=str(folder)))
  with pytest.raises(DataError, match=r'broken/train\.array_record: record 3 is not a readable image'):
    list(data.eval_batches('train', batch_size=4))
  with pytest.raises(DataError, match=r'record 3 is not a readable image'):
    take(data.train_batches(batch_size=6, seed=0), 1)


def test_a_damaged_records_file_and_a_bad_class_are_named(tmp_path):
  folder = write_records(
    tmp_path / 'labels', [records.pack_image(5, png_bytes(1)), records.pack_image(0, png_bytes(2))]
  )
  data = load_image_data(image_config(source='records', path=str(folder)))
  with pytest.raises(
    DataError, match=r'labels/train\.array_record: a record has class 5; there are 2 classes'
  ):
    list(data.eval_batches('train', batch_size=2))

  folder = write_records(tmp_path / 'damaged', [records.pack_image(0, png_bytes(i)) for i in range(50)])
  path = folder / 'train.array_record'
  content = bytearray(path.read_bytes())
  content[1000:1064] = bytes(255 - byte for byte in content[1000:1064])  # inside the records' chunks
  path.write_bytes(bytes(content))
  with pytest.raises(
    DataError, match=r'damaged/train\.array_record: cannot read record \d+: .*hash mismatch'
  ):
    data = load_image_data(image_config(source='records', path=str(folder)))
    list(data.eval_batches('train', batch_size=10))


def test_missing_or_mismatched_records_folders_fail_at_once(tmp_path):
  with pytest.raises(
    MissingFileError, match=r'records\.json does not exist: .*python -m pipelines\.convert image-folder'
  ):
    load_image_data(image_config(source='records', path=str(tmp_path)))
  folder = write_records(tmp_path / 'short', [records.pack_image(0, png_bytes(1))])
  metadata = json.loads((folder / records.METADATA_FILE).read_text())
  metadata['splits']['train']['records'] = 2
  (folder / records.METADATA_FILE).write_text(json.dumps(metadata))
  with pytest.raises(DataError, match=r'has 1 records; .*records\.json says 2'):
    load_image_data(image_config(source='records', path=str(folder)))
  with pytest.raises(DataError, match="holds 'images' records, not 'text'"):
    records.RecordFolder.open(folder, kind='text')
  metadata['splits']['train']['records'] = 1
  (folder / records.METADATA_FILE).write_text(json.dumps(metadata))
  with pytest.raises(ValueError, match='set data.mean and data.std'):
    load_image_data(image_config(source='records', path=str(folder), mean=None, std=None))


def test_convert_refuses_an_existing_folder_and_leaves_no_partial_one(tmp_path, capsys):
  folder = write_numbered_folder(tmp_path / 'images', {'train': 3})
  (tmp_path / 'out').mkdir()
  assert convert.main(['image-folder', str(folder), '--out', str(tmp_path / 'out')]) == 2
  assert 'exists' in capsys.readouterr().err
  (folder / 'train' / 'class0' / 'broken.jpg').write_bytes(b'no jpeg')
  assert convert.main(['image-folder', str(folder), '--out', str(tmp_path / 'new'), '--resize', '4,4']) == 2
  assert 'broken.jpg' in capsys.readouterr().err
  assert sorted(path.name for path in tmp_path.iterdir()) == ['images', 'out']


def test_parallel_text_records_read_as_the_text_files(tmp_path):
  from seq2seq.sources import open_source
  from seq2seq.task import default_data_config as translation_data_config

  text = tmp_path / 'text'
  text.mkdir()
  (text / 'train.de').write_text('ein Hund\nzwei Katzen\n')
  (text / 'train.en').write_text('a dog\ntwo cats\n')
  (text / 'val.de').write_text('drei Vögel\n')
  (text / 'val.en').write_text('three birds\n')
  out = convert.convert_parallel_text(text, tmp_path / 'records', source_lang='de', target_lang='en')
  config = translation_data_config()
  config.update(source='records', path=str(out), src_lang='de', tgt_lang='en')
  source = open_source(config)
  assert source.split_names() == ('train', 'val')
  assert source.read('val') == [('drei Vögel', 'three birds')]
  assert source.read('train') == [('ein Hund', 'a dog'), ('zwei Katzen', 'two cats')]
  config.update(src_lang='en', tgt_lang='de')
  with pytest.raises(ValueError, match=r'holds de -> en pairs'):
    open_source(config)


# ------------------------------------------------------------------ training from records


def records_vit_config(records_folder, **overrides):
  from tests.vit_test_configs import tiny_vit_config

  config = tiny_vit_config(**overrides)
  config.data.update(source='records', path=str(records_folder), mean=(0.5,), std=(0.25,), image_size=(8, 8))
  config.data.augment.update(crop_scale=(0.5, 1.0), crop_padding=0, flip=True)
  return config


@pytest.fixture(scope='module')
def digits_records(tmp_path_factory):
  """The embedded digits as a records folder of 8x8 grey PNGs."""
  base = tmp_path_factory.mktemp('digits')
  data = load_image_data(image_config(source='digits'))
  for split in ('train', 'test'):
    for index, batch in enumerate(data.eval_batches(split, batch_size=data.num_examples(split))):
      assert index == 0
      for number, (image, label) in enumerate(zip(batch['image'][..., 0], batch['label'])):
        folder = base / 'images' / split / f'{label}'
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image.astype(np.uint8)).save(folder / f'{number:04d}.png')
  return convert.convert_image_folder(base / 'images', base / 'records')


def _params(workdir):
  _, _, params, step = restore_checkpoint(workdir, 'latest')
  return step, jax.tree.map(np.asarray, nnx.to_pure_dict(params))


def _train_losses(workdir):
  return {r['step']: r['loss'] for r in read_metrics(workdir) if r['split'] == 'train' and 'loss' in r}


def train_from_records(records, workdir):
  """On 8 devices: the tiny ViT trained from the records folder ``records``."""
  train_and_evaluate(records_vit_config(records), workdir)


@pytest.mark.slow  # runs on 8 host devices
def test_training_from_records_resumes_bit_identically_and_eight_devices_equal_one(
  digits_records, tmp_path, monkeypatch, eight_devices
):
  reference = tmp_path / 'reference'
  train_and_evaluate(records_vit_config(digits_records), reference)
  stop_at_batch(monkeypatch, 3)
  resumed = tmp_path / 'resumed'
  first = train_and_evaluate(records_vit_config(digits_records), resumed)
  assert first.interrupted and 0 < first.step < 8
  second = train_and_evaluate(records_vit_config(digits_records), resumed)
  assert second.step == 8 and not second.interrupted
  assert _train_losses(resumed) == _train_losses(reference)
  jax.tree.map(np.testing.assert_array_equal, _params(resumed), _params(reference))

  eight_devices(train_from_records, records=str(digits_records), workdir=str(tmp_path / 'eight'))
  eight, one = _train_losses(tmp_path / 'eight'), _train_losses(reference)
  assert sorted(eight) == sorted(one)
  np.testing.assert_allclose([eight[s] for s in sorted(one)], [one[s] for s in sorted(one)], rtol=2e-5)
