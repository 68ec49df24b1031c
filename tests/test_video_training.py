"""The video family through the generic trainer, its data (determinism, per-clip augmentation, the
folder and TFDS sources), its ablation table and its pictures."""

import numpy as np
import pytest
from flax import nnx

from configs import video_digits
from tests.config_overrides import override, short_run
from tests.micro_batch_updates import assert_micro_batches_give_the_whole_batch
from trainer.errors import ConfigError, DataError, MissingFileError
from trainer.evaluation import restore_checkpoint
from trainer.io.workdir import load_model_facts
from trainer.loop import train_and_evaluate
from trainer.task import load_task
from video import ablation_table
from video.clip_sources import DIRECTIONS
from video.input_pipeline import augment_clips, load_video_data


def tiny_video_config(**overrides):
  config = video_digits.get_config()
  config.model.update(width=16, depth=1, temporal_depth=1, num_heads=2, mlp_dim=32)
  config.data.update(clips_per_digit=1, test_clips_per_digit=1)
  short_run(
    config, steps=4, eval_every=4, batch=16, eval_batch=120, log_every=2, checkpoint_every=4, warmup=1
  )
  return override(config, overrides)


@pytest.fixture(scope='module')
def digits_data():
  return load_video_data(tiny_video_config().data)


def test_moving_digit_clips_move_in_their_labelled_direction(digits_data):
  train = digits_data.clip_set.splits['train']
  assert train.clips.shape[1:] == (4, 24, 24, 1) and digits_data.num_classes == 40
  steps = {'right': (0, 2), 'left': (0, -2), 'down': (2, 0), 'up': (-2, 0)}
  for clip, label in zip(train.clips[:40], train.labels[:40]):
    first, last = (np.argwhere(clip[t, ..., 0] > 0).mean(0) for t in (0, -1))
    np.testing.assert_allclose(last - first, np.multiply(steps[DIRECTIONS[label % 4]], 3), atol=1e-6)


def test_train_batch_is_a_pure_function_of_seed_and_step(digits_data):
  whole = digits_data.make_train_batch(7, batch_size=8, seed=3, rows=slice(0, 8))
  again = digits_data.make_train_batch(7, batch_size=8, seed=3, rows=slice(0, 8))
  halves = [
    digits_data.make_train_batch(7, batch_size=8, seed=3, rows=rows) for rows in (slice(0, 4), slice(4, 8))
  ]
  other = digits_data.make_train_batch(8, batch_size=8, seed=3, rows=slice(0, 8))
  np.testing.assert_array_equal(whole['clip'], again['clip'])
  np.testing.assert_array_equal(whole['clip'], np.concatenate([half['clip'] for half in halves]))
  assert not np.array_equal(whole['label'], other['label'])
  resumed = next(digits_data.train_batches(batch_size=8, seed=3, start_step=7))
  np.testing.assert_array_equal(resumed['clip'], whole['clip'])


def test_augmentation_is_the_same_for_every_frame():
  rng = np.random.default_rng(0)
  still = np.repeat(rng.integers(0, 255, (3, 1, 6, 6, 1), dtype=np.uint8), 4, axis=1)
  augmented = augment_clips(still, np.array([[0, 2], [1, 1], [2, 0]]), np.array([True, False, True]), 1)
  assert augmented.shape == still.shape
  for clip in augmented:
    for frame in clip[1:]:
      np.testing.assert_array_equal(frame, clip[0])
  np.testing.assert_array_equal(augmented[1], still[1])  # the centred crop, no flip


def test_eval_batches_are_padded_and_masked(digits_data):
  batches = list(digits_data.eval_batches('test', batch_size=256))
  assert [float(batch['mask'].sum()) for batch in batches] == [256, 104]
  assert batches[-1]['clip'].shape == (256, 4, 24, 24, 1)


def test_npy_folder_source(tmp_path):
  rng = np.random.default_rng(0)
  for split, count in (('train', 3), ('test', 2)):
    for name in ('jump', 'walk'):
      (tmp_path / split / name).mkdir(parents=True)
      for index in range(count):
        np.save(tmp_path / split / name / f'{index}.npy', rng.integers(0, 255, (2, 8, 8, 3), dtype=np.uint8))
  data = load_video_data(tiny_video_config(**{'data.source': 'folder', 'data.path': str(tmp_path)}).data)
  assert (
    data.clip_set.class_names == ['jump', 'walk'] and data.clip_shape == (2, 8, 8, 3) and data.num_train == 6
  )
  np.save(tmp_path / 'test' / 'walk' / 'bad.npy', np.zeros((2, 8, 8), np.uint8))
  with pytest.raises(DataError, match='bad.npy: expected a uint8'):
    load_video_data(tiny_video_config(**{'data.source': 'folder', 'data.path': str(tmp_path)}).data)


def test_unprepared_tfds_set_fails_at_once_with_the_command(tmp_path):
  config = tiny_video_config(**{'data.source': 'tfds', 'data.name': 'ucf101', 'data.data_dir': str(tmp_path)})
  with pytest.raises(MissingFileError, match=f'tfds build ucf101 --data_dir {tmp_path}'):
    load_video_data(config.data)


@pytest.mark.parametrize(
  'field, value, message',
  [
    (
      'model.attention',
      'joint',
      'allowed values: spacetime, factorised_encoder, divided, factorised_dot_product',
    ),
    ('model.tubelet', (3, 4, 4), r'\(T, H, W\) = \(4, 24, 24\) is not divisible'),
    ('model.temporal_posemb', 'rope', 'allowed values: none, learn1d, sincos1d, relative'),
    ('data.source', 'youtube', 'allowed values: moving_digits, folder, tfds'),
    ('data.augment.flip', True, 'turns left into right'),
  ],
)
def test_bad_options_fail_with_one_line(field, value, message):
  with pytest.raises(ConfigError, match=message):
    load_task(tiny_video_config(**{field: value}))


@pytest.mark.slow  # trains each way
def test_micro_batches_give_the_whole_batch_update_and_metrics(tmp_path):
  config = tiny_video_config(**{'model.drop_path': 0.0, 'model.head_zero_init': False})
  task = load_task(config)
  task.prepare(tmp_path)
  batch = next(task.train_batches(batch_size=16, seed=0, start_step=0, process_index=0, process_count=1))
  metrics = ('loss', 'accuracy', 'digit_accuracy', 'direction_accuracy')
  assert_micro_batches_give_the_whole_batch(task, batch, 4, metrics)


@pytest.mark.slow  # runs the trainer
def test_training_evaluation_table_and_pictures(tmp_path):
  config = tiny_video_config(**{'model.attention': 'factorised_dot_product', 'model.pool': 'cls'})
  result = train_and_evaluate(config, tmp_path / 'run')
  assert result.step == 4
  assert set(result.eval_metrics) >= {'accuracy', 'digit_accuracy', 'direction_accuracy', 'loss'}
  assert 0.0 <= result.eval_metrics['direction_accuracy'] <= 1.0
  summary = dict(
    task=config.task,
    eval_split='test',
    axes={'model.attention': ['factorised_dot_product', 'spacetime']},
    seeds=[0],
    not_applicable=[],
    runs=[
      dict(
        overrides={'model.attention': 'factorised_dot_product', 'seed': 0},
        workdir=str(tmp_path / 'run'),
        metrics=dict(result.eval_metrics),
      )
    ],
  )
  table = ablation_table.table(summary)
  assert 'GFLOPs / clip' in table and 'train clips/s' in table and 'not run' in table
  # the FLOPs were counted once when the run started, and the table reads them from the workdir
  gflops = load_model_facts(tmp_path / 'run')['gflops_per_clip']
  assert gflops > 0 and f'| {gflops:.3f} |' in table
  task, parts, params, step = restore_checkpoint(tmp_path / 'run', 'latest')
  assert step == 4
  paths = task.reporting.draw_pictures(task, parts.merge(params), tmp_path, 'run', 'trained')
  assert paths[0].stat().st_size > 0


@pytest.mark.parametrize(
  'layout, pool',
  [('spacetime', 'cls'), ('factorised_encoder', 'gap'), ('divided', 'cls'), ('spacetime', 'gap')],
)
@pytest.mark.slow  # a model of each layout
def test_pictures_of_every_layout(tmp_path, layout, pool):
  task = load_task(tiny_video_config(**{'model.attention': layout, 'model.pool': pool}))
  model = task.make_model(nnx.Rngs(0))
  paths = task.reporting.draw_pictures(task, model, tmp_path, 'run', layout)
  assert [path.name for path in paths] == ['video_attention_run.png'] and paths[0].stat().st_size > 0
