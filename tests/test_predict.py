"""Predictions on a user's own inputs (``predict.py``, ``trainer.predictor``) for every family: they
agree with evaluation, bad inputs are one line each, and read-only workdirs still answer."""

import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from flax import nnx
from PIL import Image

import predict
from tests.compilations import counted_compilations
from tests.test_video_training import tiny_video_config
from tests.translation_test_configs import tiny_translation_config
from tests.vit_test_configs import tiny_vit_config
from trainer.errors import CheckpointError, InputError
from trainer.evaluation import evaluate_workdir
from trainer.io import workdir as workdir_lib
from trainer.loop import train_and_evaluate
from trainer.predictor import Predictor, load_predictor
from trainer.task import load_task

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def digits_workdir(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('digits')
  train_and_evaluate(tiny_vit_config(total_steps=6, eval_every_steps=6, checkpoint_every_steps=6), workdir)
  return workdir


@pytest.fixture(scope='module')
def scan_workdir(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('scan')
  train_and_evaluate(tiny_translation_config(eval_every_steps=4), workdir)
  return workdir


def _save_split_as_files(images, labels, class_names, folder: pathlib.Path, suffix='.png'):
  """``folder/<class>/<index>.png`` per image; returns the files in sorted order and their labels."""
  files = []
  for index, (image, label) in enumerate(zip(images, labels)):
    path = folder / class_names[label] / f'{index:04d}{suffix}'
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(path)
    files.append((str(path), int(label)))
  files.sort()
  return [path for path, _ in files], np.asarray([label for _, label in files])


def _read_only(monkeypatch, workdir: pathlib.Path):
  """Makes ``workdir`` unwritable: chmod, and (since root may write anyway) refused writes under it."""
  os.chmod(workdir, 0o555)
  refuse_under = str(workdir)
  for name in ('write_bytes', 'write_text'):
    original = getattr(pathlib.Path, name)

    def refused(self, *args, _original=original, **kwargs):
      if str(self).startswith(refuse_under):
        raise PermissionError(13, 'Permission denied', str(self))
      return _original(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, name, refused)


# Images -------------------------------------------------------------------------


@pytest.mark.slow  # predicts from a trained workdir
def test_predict_on_the_test_images_gives_evaluates_accuracy(digits_workdir, tmp_path):
  predictor = load_predictor(digits_workdir)  # reads no data: built from the workdir's record
  data = load_task(workdir_lib.load_config(digits_workdir)).data
  test = data._source.splits['test']
  files, labels = _save_split_as_files(test.images, test.labels, data.class_names, tmp_path)
  # One code path: a file read back and prepared is the evaluation batch's row, bit for bit.
  batch = next(iter(data.eval_batches('test', batch_size=4)))
  first_file = str(tmp_path / data.class_names[test.labels[0]] / '0000.png')
  prepared = predictor.task.preparation.prepare_images(predictor.read(first_file)[None])[0]
  np.testing.assert_array_equal(prepared, batch['image'][0])

  predictions = predictor(predictor.input_names(str(tmp_path)))
  predicted = np.asarray([p['classes'][0]['index'] for p in predictions])
  accuracy = evaluate_workdir(digits_workdir)['accuracy']
  assert np.sum(predicted == labels) == round(accuracy * len(labels))
  assert predictions[0]['classes'][0]['name'] == str(predicted[0])
  assert sum(entry['probability'] for entry in predictor([test.images[0]], top_k=10)[0]['classes']) == (
    pytest.approx(1.0)
  )


@pytest.mark.slow  # predicts from a trained workdir
def test_image_folder_predictions_give_evaluates_accuracy_with_the_folder_names(tmp_path):
  rng = np.random.default_rng(0)
  names = ['circle', 'square']
  images = rng.integers(0, 60, size=(48, 8, 8, 3), dtype=np.uint8)
  labels = np.arange(48) % 2
  images[labels == 1, 2:6, 2:6] = 250  # squares are bright in the middle
  _save_split_as_files(images[:32], labels[:32], names, tmp_path / 'data' / 'train')
  test_files, test_labels = _save_split_as_files(images[32:], labels[32:], names, tmp_path / 'data' / 'test')
  config = tiny_vit_config(total_steps=4, eval_every_steps=4, checkpoint_every_steps=4, eval_batch_size=16)
  config.data.update(source='folder', path=str(tmp_path / 'data'))
  config.model.update(patch_size=4)
  workdir = tmp_path / 'run'
  train_and_evaluate(config, workdir)
  assert json.loads((workdir / 'classes.json').read_text()) == names

  predictor = load_predictor(workdir)
  test_folder = tmp_path / 'data' / 'test'
  assert predictor.input_names(str(test_folder)) == test_files
  predictions = predictor(test_files)
  predicted = [p['classes'][0]['name'] for p in predictions]
  hits = sum(name == names[label] for name, label in zip(predicted, test_labels))
  assert hits == round(evaluate_workdir(workdir)['accuracy'] * 16)


@pytest.mark.slow  # predicts from a trained workdir
def test_cli_answers_good_images_reports_bad_ones_and_draws_pictures(digits_workdir, tmp_path):
  digit = np.asarray(Image.fromarray(np.eye(8, dtype=np.uint8) * 255).resize((40, 30)).convert('RGB'))
  Image.fromarray(digit).save(tmp_path / 'big.jpg')
  Image.fromarray(digit).convert('RGBA').save(tmp_path / 'alpha.png')
  (tmp_path / 'notes.png').write_text('not an image')
  jpeg = (tmp_path / 'big.jpg').read_bytes()
  (tmp_path / 'truncated.jpg').write_bytes(jpeg[: len(jpeg) // 2])
  np.save(tmp_path / 'clip.npy', np.zeros((4, 8, 8, 1), np.uint8))
  names = [
    str(tmp_path / name) for name in ('big.jpg', 'notes.png', 'truncated.jpg', 'clip.npy', 'alpha.png')
  ]
  names.append(str(tmp_path / 'missing.png'))
  out, explain = io.StringIO(), tmp_path / 'pictures'
  predictor = load_predictor(digits_workdir)
  failed = predict.answer(predictor, names, {'top_k': 2}, as_json=True, explain_dir=explain, out=out)
  lines = [json.loads(line) for line in out.getvalue().splitlines()]
  assert failed == 4 and [line['input'] for line in lines] == names
  assert [len(line.get('classes', [])) for line in lines] == [2, 0, 0, 0, 2, 0]
  errors = {pathlib.Path(line['input']).name: line['error'] for line in lines if 'error' in line}
  assert all(name in message for name, message in errors.items())
  assert 'classifies images' in errors['clip.npy'] and 'no such file' in errors['missing.png']
  assert sorted(p.name for p in explain.iterdir()) == ['001_big.png', '005_alpha.png']


@pytest.mark.slow  # predicts from a trained workdir
def test_pictures_that_cannot_be_written_are_one_line_and_answers_still_come(
  digits_workdir, tmp_path, capsys
):
  (tmp_path / 'file').write_text('')
  out = io.StringIO()
  image = str(tmp_path / 'digit.png')
  Image.fromarray(np.zeros((8, 8), np.uint8)).save(image)
  failed = predict.answer(
    load_predictor(digits_workdir), [image], {}, explain_dir=tmp_path / 'file' / 'pictures', out=out
  )
  assert failed == 1 and len(out.getvalue().splitlines()) == 1
  errors = capsys.readouterr().err.splitlines()
  assert len(errors) == 1 and errors[0].startswith(f'error: could not write pictures into {tmp_path}')


@pytest.mark.slow  # predicts from a trained workdir
def test_a_workdir_without_classes_json_shows_indices_with_a_note(digits_workdir, tmp_path):
  older = tmp_path / 'older'
  shutil.copytree(digits_workdir, older)
  (older / 'classes.json').unlink()
  predictor = load_predictor(older)
  from trainer.predictor import missing_class_names_note

  assert 'classes.json is missing' in missing_class_names_note(predictor)
  assert missing_class_names_note(load_predictor(digits_workdir)) is None


@pytest.mark.slow  # predicts from a trained workdir
def test_read_only_workdir_still_evaluates_and_predicts(digits_workdir, tmp_path, monkeypatch, capsys):
  shared = tmp_path / 'shared'
  shutil.copytree(digits_workdir, shared)
  before = sorted(path.name for path in shared.iterdir())
  _read_only(monkeypatch, shared)
  try:
    result = evaluate_workdir(shared)
    assert 0 <= result['accuracy'] <= 1
    assert 'note: could not write' in capsys.readouterr().err
    predictor = load_predictor(shared)
    assert predictor([np.zeros((8, 8), np.uint8)])[0]['classes']
  finally:
    os.chmod(shared, 0o755)
  assert sorted(path.name for path in shared.iterdir()) == before


def test_workdir_without_checkpoint_is_one_clear_error(tmp_path):
  workdir_lib.save_config(tmp_path, tiny_vit_config())
  with pytest.raises(CheckpointError, match='No checkpoints'):
    load_predictor(tmp_path)


@pytest.mark.slow
def test_cli_exit_status_says_some_inputs_failed(digits_workdir, tmp_path):
  Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / 'digit.png')
  (tmp_path / 'bad.png').write_text('not an image')
  command = [sys.executable, 'predict.py', f'--workdir={digits_workdir}', str(tmp_path / 'digit.png')]
  run = subprocess.run([*command, str(tmp_path / 'bad.png')], cwd=ROOT, capture_output=True, text=True)
  assert run.returncode == 1, run.stderr
  assert run.stdout.startswith(f'{tmp_path / "digit.png"}: ') and len(run.stdout.splitlines()) == 1
  assert [line for line in run.stderr.splitlines() if line.startswith('error:')] == [
    f"error: cannot read image {tmp_path / 'bad.png'}: cannot identify image file '{tmp_path / 'bad.png'}'; "
    'this workdir classifies images (PNG or JPEG files, folders of them, or uint8 arrays).'
  ]
  missing = subprocess.run(
    [*command[:2], f'--workdir={tmp_path}', 'x.png'], cwd=ROOT, capture_output=True, text=True
  )
  assert missing.returncode == 2 and missing.stderr.strip().splitlines()[-1].startswith('error: ')


# Sentences ----------------------------------------------------------------------


@pytest.mark.slow  # predicts from a trained workdir
def test_predict_on_a_splits_sentences_gives_evaluates_hypotheses(scan_workdir, tmp_path):
  evaluate_workdir(scan_workdir)
  written = (scan_workdir / 'hypotheses_test.txt').read_text(encoding='utf-8').splitlines()
  predictor = load_predictor(scan_workdir)
  sources = [source for source, _ in load_task(workdir_lib.load_config(scan_workdir)).eval_pairs('test')]
  out = io.StringIO()
  assert predict.answer(predictor, sources, {}, out=out, chunk_size=20) == 0
  assert out.getvalue().splitlines() == written
  beam = predictor(sources[:3], beam_size=2, alpha=0.0)
  assert len(beam) == 3 and all(isinstance(p['translation'], str) for p in beam)


@pytest.mark.slow  # predicts from a trained workdir
def test_bad_sentences_are_one_line_each_and_the_rest_are_answered(scan_workdir, tmp_path):
  image = tmp_path / 'digit.png'
  Image.fromarray(np.zeros((8, 8), np.uint8)).save(image)
  out = io.StringIO()
  names = ['jump twice', '', 'ßœ∂ ƒ©', str(image), 'walk left']
  failed = predict.answer(
    load_predictor(scan_workdir), names, {}, as_json=True, explain_dir=tmp_path / 'pictures', out=out
  )
  lines = [json.loads(line) for line in out.getvalue().splitlines()]
  assert failed == 3 and [line['input'] for line in lines] == names
  assert 'empty sentence' in lines[1]['error']
  assert 'none of its words' in lines[2]['error'] and 'ßœ∂ ƒ©' in lines[2]['error']
  assert 'is a file' in lines[3]['error'] and 'translates sentences' in lines[3]['error']
  assert sorted(p.name for p in (tmp_path / 'pictures').iterdir()) == [
    '001_jump_twice.png',
    '005_walk_left.png',
  ]


def test_loading_a_predictor_compiles_nothing_and_its_first_answer_compiles_once(digits_workdir, tmp_path):
  """Start-up time: restoring and checking the parameters of a model without constants needs no XLA program."""
  Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / 'digit.png')
  with counted_compilations() as compiles:
    predictor = load_predictor(digits_workdir)
  assert not compiles
  with counted_compilations() as compiles:
    predictor([str(tmp_path / 'digit.png')])
    predictor([np.ones((8, 8), np.uint8)])  # the same padded batch shape: compiled already
  assert len(compiles) == 1


@pytest.mark.slow  # a fresh interpreter
def test_predicting_imports_no_training_only_library(digits_workdir, tmp_path):
  """TensorFlow (metric writers), grain (batches), scipy.ndimage (resampling), matplotlib (pictures)."""
  Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / 'digit.png')
  script = f"""
import sys
import trainer.predictor, vit.task
print('scipy.ndimage' in sys.modules)  # the models' modules, before the digits data set brings scipy
trainer.predictor.load_predictor({str(digits_workdir)!r})([{str(tmp_path / 'digit.png')!r}])
print(sorted({{name.split('.')[0] for name in sys.modules}} & {{'tensorflow', 'grain', 'matplotlib'}}))
"""
  result = subprocess.run(
    [sys.executable, '-c', script], cwd=ROOT, capture_output=True, text=True, timeout=300
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.splitlines() == ['False', '[]'], result.stdout


# Clips --------------------------------------------------------------------------


@pytest.fixture(scope='module')
def clip_predictor(tmp_path_factory):
  """A video predictor on a freshly initialised model: reading, predicting and drawing need no training."""
  task = load_task(tiny_video_config())
  task.prepare(tmp_path_factory.mktemp('video'))
  model = task.make_model(nnx.Rngs(params=0))
  return Predictor(pathlib.Path('video'), task, model, 0, task.prediction.class_names())


@pytest.mark.slow  # compiles the video model's forward and draws
def test_clip_predictions_from_npy_arrays_and_frame_folders(clip_predictor, tmp_path):
  data = clip_predictor.task.data
  test = data.clip_set.splits['test']
  np.save(tmp_path / 'clip.npy', test.clips[0])
  frames = tmp_path / 'frames'
  frames.mkdir()
  for step, frame in enumerate(test.clips[0]):
    Image.fromarray(frame[..., 0]).save(frames / f'{step:02d}.png')
  batch = next(iter(data.eval_batches('test', batch_size=4)))
  for item in (str(tmp_path / 'clip.npy'), str(frames), test.clips[0]):
    np.testing.assert_array_equal(data.prepare_clips(clip_predictor.read(item)[None])[0], batch['clip'][0])
  predictions = clip_predictor([str(tmp_path / 'clip.npy'), test.clips[0]], top_k=3)
  assert predictions[0] == predictions[1] and len(predictions[0]['classes']) == 3
  assert clip_predictor.class_names[4 * 7 + 1] == '7, moving left'
  path = clip_predictor.explain(str(frames), tmp_path / 'clip.png')
  assert path.stat().st_size > 0


def write_video(path, frames, codec='libx264rgb', pix_fmt='rgb24', **options):
  """Grey uint8 frames [T, H, W, 1] as a video file (libx264rgb with crf 0 and ffv1 are lossless)."""
  import av  # pylint: disable=g-import-not-at-top

  with av.open(str(path), 'w') as container:
    stream = container.add_stream(codec, rate=4, options=options)
    stream.height, stream.width, stream.pix_fmt = frames.shape[1], frames.shape[2], pix_fmt
    for frame in frames:
      container.mux(stream.encode(av.VideoFrame.from_ndarray(np.repeat(frame, 3, -1), format='rgb24')))
    container.mux(stream.encode())
  return path


@pytest.mark.parametrize(
  'name, codec, pix_fmt, options',
  [('clip.mp4', 'libx264rgb', 'rgb24', {'crf': '0'}), ('clip.mkv', 'ffv1', 'bgr0', {})],
)
def test_clip_predictions_from_lossless_videos_match_the_frames(
  clip_predictor, tmp_path, name, codec, pix_fmt, options
):
  data = clip_predictor.task.data
  clip = data.clip_set.splits['test'].clips[0]  # a moving digit
  video = write_video(tmp_path / name, clip, codec, pix_fmt, **options)
  frames = tmp_path / 'frames'
  frames.mkdir()
  for step, frame in enumerate(clip):
    Image.fromarray(frame[..., 0]).save(frames / f'{step:02d}.png')
  np.testing.assert_array_equal(clip_predictor.read(str(video)), clip)
  predictions = clip_predictor([str(video), str(frames), clip], top_k=3)
  assert predictions[0] == predictions[1] == predictions[2]


def test_longer_videos_and_folders_give_their_first_frames(clip_predictor, tmp_path):
  clip = clip_predictor.task.data.clip_set.splits['test'].clips[0]
  longer = np.concatenate([clip, clip[::-1]])
  frames = tmp_path / 'frames'
  frames.mkdir()
  for step, frame in enumerate(longer):
    Image.fromarray(frame[..., 0]).save(frames / f'{step:02d}.png')
  video = write_video(tmp_path / 'long.mp4', longer, crf='0')
  np.testing.assert_array_equal(clip_predictor.read(str(video)), clip)
  np.testing.assert_array_equal(clip_predictor.read(str(frames)), clip)


def test_a_lossy_video_reads_close_to_its_frames(clip_predictor, tmp_path):
  clip = clip_predictor.task.data.clip_set.splits['test'].clips[0]
  video = write_video(tmp_path / 'clip.mp4', clip, 'libx264', 'yuv420p')  # what phones and ffmpeg write
  difference = np.abs(clip_predictor.read(str(video)).astype(np.int32) - clip)
  assert difference.mean() < 4 and difference.max() < 32


def _truncated_video(folder):
  noise = np.random.default_rng(0).integers(0, 256, (4, 24, 24, 1), np.uint8)  # frames of many bytes
  data = write_video(folder / 'full.mp4', noise, crf='0').read_bytes()
  (folder / 'x.mp4').write_bytes(data[: len(data) // 2])
  return folder / 'x.mp4'


def _video_without_frames(folder):
  import av  # pylint: disable=g-import-not-at-top

  with av.open(str(folder / 'x.mp4'), 'w') as container:
    stream = container.add_stream('libx264rgb', rate=4)
    stream.height, stream.width, stream.pix_fmt = 24, 24, 'rgb24'
    container.start_encoding()
    container.mux(stream.encode())
  return folder / 'x.mp4'


@pytest.mark.parametrize(
  'make, message',
  [
    (
      lambda d: np.save(d / 'x.npy', np.zeros((3, 24, 24, 1), np.uint8)) or d / 'x.npy',
      'shape [3, 24, 24, 1]',
    ),
    (lambda d: np.save(d / 'x.npy', np.zeros((4, 24, 24, 1), np.float32)) or d / 'x.npy', 'float32 clip'),
    (lambda d: (d / 'x.npy').write_bytes(b'garbage') and d / 'x.npy', 'cannot read the .npy clip'),
    (lambda d: Image.fromarray(np.zeros((8, 8), np.uint8)).save(d / 'x.png') or d / 'x.png', 'one image'),
    (lambda d: d / 'missing.npy', 'no such file'),
    (lambda d: (d / 'x.mp4').write_bytes(b'garbage') and d / 'x.mp4', 'cannot read the video'),
    (_truncated_video, 'cannot read the video'),
    (_video_without_frames, 'no video stream'),
    (
      lambda d: write_video(d / 'x.webm', np.zeros((3, 24, 24, 1), np.uint8), 'libvpx-vp9', 'yuv420p'),
      'a video of 3 frames',
    ),
    (lambda d: (d / 'frames').mkdir() or d / 'frames', 'a folder of 0 frames'),
  ],
)
def test_bad_clips_are_one_line_naming_the_input(clip_predictor, tmp_path, capfd, make, message):
  path = make(tmp_path)
  capfd.readouterr()
  with pytest.raises(InputError, match=re.escape(message)) as raised:
    clip_predictor.read(str(path))
  assert str(path) in str(raised.value) and '\n' not in str(raised.value)
  assert capfd.readouterr() == ('', '')  # nothing else printed (FFmpeg's own log stays quiet)


@pytest.mark.slow  # compiles a model's forward and decoding, and draws
def test_rnn_translator_explains_its_single_attention(tmp_path):
  from tests.translation_test_configs import tiny_rnn_config

  task = load_task(tiny_rnn_config())
  task.prepare(tmp_path)
  predictor = Predictor(tmp_path, task, task.make_model(nnx.Rngs(params=0)), 0, None)
  prediction = predictor(['jump twice'])[0]
  assert isinstance(prediction['translation'], str) and set(prediction) == {'translation'}
  assert predictor.explain('jump twice', tmp_path / 'rnn.png').stat().st_size > 0


@pytest.mark.slow  # compiles a model's forward and decoding, and draws
def test_map_head_images_are_explained(tmp_path):
  task = load_task(tiny_vit_config(**{'model.pool': 'map'}))
  predictor = Predictor(tmp_path, task, task.make_model(nnx.Rngs(params=0)), 0, task.prediction.class_names())
  path = predictor.explain(np.full((8, 8), 255, np.uint8), tmp_path / 'map.png')
  assert path.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_save_digit_writes_the_test_digit_that_the_digits_config_holds_out(tmp_path):
  from ml_collections import ConfigDict  # pylint: disable=g-import-not-at-top

  from pipelines.image_sources import load_digits_source  # pylint: disable=g-import-not-at-top

  command = [sys.executable, '-m', 'pipelines.save_digit', '--index=5', str(tmp_path / 'five.png')]
  run = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
  test = load_digits_source(ConfigDict({'image_size': None})).splits['test']
  assert run.returncode == 0 and f'test digit 5, label {test.labels[5]}' in run.stdout, run.stderr
  np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / 'five.png')), test.images[5][..., 0])
  too_far = subprocess.run(
    [*command[:3], '--index=360', 'x.png'], capture_output=True, text=True, check=False, cwd=ROOT
  )
  assert too_far.returncode == 1 and '--index 360: the test split has 360 digits' in too_far.stderr


def test_predict_phases_times_each_phase_of_a_fresh_process(digits_workdir, tmp_path):
  Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / 'digit.png')
  command = [sys.executable, '-m', 'benchmarks.predict_phases', f'--workdir={digits_workdir}', '--repeats=2']
  run = subprocess.run(
    [*command, '--collect_garbage', str(tmp_path / 'digit.png')],
    capture_output=True,
    text=True,
    check=False,
    cwd=ROOT,
  )
  assert run.returncode == 0, run.stderr[-2000:]
  assert 'garbage collector on' in run.stdout and f'in the process: {tmp_path / "digit.png"}: ' in run.stdout
  numbers = json.loads(run.stdout.strip().splitlines()[-1])  # the last line is for records.record
  to_first_answer = ('import_jax', 'import_flax', 'import_trainer', 'load', 'first_answer')
  assert all(numbers[phase]['min'] > 0 for phase in (*to_first_answer, 'second_answer'))
  # each process's sum is at least the sum of the phases' lowest times
  assert numbers['to_first_answer']['min'] >= sum(numbers[phase]['min'] for phase in to_first_answer)
  assert numbers['second_answer']['median'] < numbers['first_answer']['median']  # compiled once
  assert numbers['process_seconds']['median'] > numbers['to_first_answer']['median']  # start and exit too


@pytest.mark.slow  # starts a process that loads a trained workdir
def test_loading_a_workdir_read_only_prints_nothing(digits_workdir):
  """``load_predictor`` opens the checkpoints read-only; orbax's notices about that are not the user's."""
  code = f'from trainer.predictor import load_predictor; load_predictor({str(digits_workdir)!r})'
  run = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True)
  assert run.returncode == 0, run.stderr
  assert run.stdout == '' and run.stderr == ''
