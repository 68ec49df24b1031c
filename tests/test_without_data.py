"""A trained workdir records what its data gave the model (``model.json``'s ``data_sizes``), so
predictions, ``init_from`` a workdir and exports build the task from it and read no data."""

import json
import shutil

import jax
import numpy as np
import pytest
from flax import nnx
from PIL import Image

import seq2seq.task
import video.task
import vit.input_pipeline
import vit.task
from tests.test_video_training import tiny_video_config
from tests.translation_test_configs import tiny_translation_config
from tests.vit_test_configs import tiny_vit_config
from trainer.errors import WorkdirError
from trainer.evaluation import restore_checkpoint
from trainer.io import workdir as workdir_lib
from trainer.loop import train_and_evaluate
from trainer.predictor import Predictor, load_predictor
from trainer.task import load_task
from video.task import VideoClassification
from vit import pretrained
from vit.weights.export_npz import export


def _raise(*args, **kwargs):
  raise AssertionError('the data was read')


def _with_data(workdir) -> Predictor:
  task, parts, params, step = restore_checkpoint(workdir)  # reads the data, as evaluation does
  return Predictor(workdir, task, parts.merge(params), step, workdir_lib.load_class_names(workdir))


def _classes(predictions):
  return [[(c['index'], c['probability']) for c in p['classes']] for p in predictions]


@pytest.fixture(scope='module')
def folder_run(tmp_path_factory):
  """A tiny ViT trained on an image folder the test makes: ``(workdir, data folder, test images)``."""
  root = tmp_path_factory.mktemp('folder_run')
  rng = np.random.default_rng(0)
  images = rng.integers(0, 60, size=(40, 8, 8, 3), dtype=np.uint8)
  labels = np.arange(40) % 2
  images[labels == 1, 2:6, 2:6] = 250
  for index, (image, label) in enumerate(zip(images, labels)):
    path = root / 'data' / ('train' if index < 28 else 'test') / ['circle', 'square'][label] / f'{index}.png'
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(path)
  config = tiny_vit_config(total_steps=4, eval_every_steps=4, checkpoint_every_steps=4)
  config.data.update(source='folder', path=str(root / 'data'))
  train_and_evaluate(config, root / 'run')
  return root / 'run', root / 'data', images[28:]


def test_a_vit_workdir_predicts_without_its_data(folder_run, tmp_path, monkeypatch):
  workdir, data, test_images = folder_run
  sizes = workdir_lib.load_model_facts(workdir)[workdir_lib.DATA_SIZES]
  assert sizes['num_classes'] == 2 and sizes['image_shape'] == [8, 8, 3] and len(sizes['mean']) == 3
  expected = _with_data(workdir)([*test_images, str(data / 'test' / 'square' / '39.png')], top_k=2)
  moved = tmp_path / 'moved'
  shutil.move(str(data), str(moved))
  try:
    for module in (vit.task, vit.input_pipeline):
      monkeypatch.setattr(module, 'load_image_data', _raise)
    predictor = load_predictor(workdir)
    got = predictor([*test_images, str(moved / 'test' / 'square' / '39.png')], top_k=2)
    assert _classes(got) == _classes(expected)
    assert got[0]['classes'][0]['name'] in ('circle', 'square')
  finally:
    shutil.move(str(moved), str(data))


def test_the_data_and_the_workdir_give_the_same_sizes_record(folder_run, monkeypatch):
  workdir = folder_run[0]
  from_data = restore_checkpoint(workdir)[0]
  for module in (vit.task, vit.input_pipeline):
    monkeypatch.setattr(module, 'load_image_data', _raise)
  from_record = restore_checkpoint(workdir, read_data=False)[0]
  assert isinstance(from_record.sizes, vit.input_pipeline.ImageShapes)
  assert from_record.sizes == from_data.sizes and from_record.sizes.preparation is not None
  assert from_data.prediction.class_names() == ['circle', 'square']
  with pytest.raises(AssertionError, match='the data was read'):  # read when a batch is first needed
    from_record.eval_batches('test', batch_size=4, process_index=0, process_count=1)


def test_a_translator_built_from_its_sizes_builds_its_model_with_no_tokenizer(monkeypatch):
  monkeypatch.setattr(seq2seq.task, 'open_source', _raise)
  task = seq2seq.task.Translation.without_data(tiny_translation_config(), {'vocab_size': 37})
  assert task.sizes.to_json() == {'source_vocab_size': 37, 'target_vocab_size': 37}
  assert task.source_tokenizer is None and task.prediction is not None
  model = nnx.eval_shape(lambda: task.make_model(nnx.Rngs(0)))
  assert 37 in {size for leaf in jax.tree.leaves(nnx.state(model)) for size in leaf.shape}


def test_init_from_and_export_of_a_workdir_read_no_data(folder_run, tmp_path, monkeypatch):
  workdir, data, _ = folder_run
  _, parts, params, _ = restore_checkpoint(workdir, read_data=False)
  trained = nnx.to_flat_state(nnx.state(parts.merge(params), nnx.Param))
  copy = tmp_path / 'data'
  shutil.copytree(data, copy)
  config = tiny_vit_config()
  config.data.update(source='folder', path=str(copy))
  config.init_from = pretrained.default_init_from_config()
  config.init_from.path = str(workdir)
  task = load_task(config)  # reads its own data, the copy
  moved = tmp_path / 'moved'
  shutil.move(str(data), str(moved))
  try:
    monkeypatch.setattr(vit.task, 'load_image_data', _raise)
    task.check_training_data()
    model = task.make_model(nnx.Rngs(1))
    task.load_initial(model)
    for (name, ours), (_, theirs) in zip(nnx.to_flat_state(nnx.state(model, nnx.Param)), trained):
      np.testing.assert_array_equal(np.asarray(ours.get_value()), np.asarray(theirs.get_value()), str(name))
    assert 'wrote step 4' in export(str(workdir), str(tmp_path / 'model.npz'))
  finally:
    shutil.move(str(moved), str(data))


def test_a_workdir_without_the_record_reads_its_data(folder_run, tmp_path):
  workdir, _, test_images = folder_run
  older = tmp_path / 'older'
  shutil.copytree(workdir, older)
  facts = workdir_lib.load_model_facts(older)
  del facts[workdir_lib.DATA_SIZES]
  workdir_lib.save_model_facts(older, facts)
  predictions = load_predictor(older)(list(test_images))
  assert _classes(predictions) == _classes(load_predictor(workdir)(list(test_images)))
  facts[workdir_lib.DATA_SIZES] = {'image_shape': [8, 8, 3]}
  workdir_lib.save_model_facts(older, facts)
  with pytest.raises(WorkdirError, match="data_sizes lack or mangle 'num_classes'"):
    load_predictor(older)


def test_resuming_an_older_workdir_adds_the_record(folder_run, tmp_path):
  workdir, _, _ = folder_run
  older = tmp_path / 'older'
  shutil.copytree(workdir, older)
  workdir_lib.save_model_facts(older, {'kept': 1.5})
  config = workdir_lib.load_config(older)
  config.total_steps = 5
  train_and_evaluate(config, older)
  facts = workdir_lib.load_model_facts(older)
  assert (
    facts['kept'] == 1.5
    and facts[workdir_lib.DATA_SIZES]
    == json.loads((workdir / workdir_lib.MODEL_FACTS_FILE).read_text())[workdir_lib.DATA_SIZES]
  )


@pytest.mark.slow  # trains a video workdir
def test_a_video_workdir_predicts_without_its_data(tmp_path, monkeypatch):
  workdir = tmp_path / 'run'
  train_and_evaluate(tiny_video_config(total_steps=2, eval_every_steps=2, checkpoint_every_steps=2), workdir)
  facts = workdir_lib.load_model_facts(workdir)
  sizes = facts[workdir_lib.DATA_SIZES]
  assert sizes['num_classes'] == 40 and sizes['clip_shape'] == [4, 24, 24, 1]
  assert sizes['label_parts'] == [['digit', 10], ['direction', 4]] and facts['gflops_per_clip'] > 0
  with_data = _with_data(workdir)
  test = with_data.task.data.clip_set.splits['test']
  clip_file = tmp_path / 'clip.npy'
  np.save(clip_file, test.clips[1])
  expected = with_data([test.clips[0], str(clip_file)], top_k=3)
  monkeypatch.setattr(video.task, 'load_video_data', _raise)
  predictor = load_predictor(workdir)
  assert _classes(predictor([test.clips[0], str(clip_file)], top_k=3)) == _classes(expected)
  batch = next(iter(with_data.task.data.eval_batches('test', batch_size=4)))
  prepared = predictor.task.preparation.prepare_clips(predictor.read(str(clip_file))[None])[0]
  np.testing.assert_array_equal(prepared, batch['clip'][1])
  assert predictor.task.eval_metrics is with_data.task.eval_metrics


def test_a_video_task_without_data_describes_its_batches_for_compiling():
  config = tiny_video_config()
  task = VideoClassification.without_data(config, {'num_classes': 40, 'channels': 1})
  shapes = task.batch_shapes(16)
  assert shapes['clip'].shape == (16, 4, 24, 24, 1) and shapes['label'].shape == (16,)
  graphdef, state = nnx.split(nnx.eval_shape(lambda: task.make_model(nnx.Rngs(0))))

  def loss(state, batch):
    return task.loss_and_outputs(nnx.merge(graphdef, state), batch, rngs=None, deterministic=True)[:2]

  loss_sum, weight = jax.eval_shape(loss, state, shapes)
  assert loss_sum.shape == weight.shape == ()


@pytest.mark.slow  # trains a translator workdir
def test_a_translator_workdir_predicts_without_its_data(tmp_path, monkeypatch):
  workdir = tmp_path / 'run'
  train_and_evaluate(
    tiny_translation_config(total_steps=2, eval_every_steps=2, checkpoint_every_steps=2), workdir
  )
  sizes = workdir_lib.load_model_facts(workdir)[workdir_lib.DATA_SIZES]
  with_data = _with_data(workdir)
  assert sizes == {
    'source_vocab_size': with_data.task.source_tokenizer.vocab_size,
    'target_vocab_size': with_data.task.target_tokenizer.vocab_size,
  }
  sentences = ['jump twice', 'walk left and run']
  expected = with_data(sentences)
  monkeypatch.setattr(seq2seq.task, 'open_source', _raise)
  assert load_predictor(workdir)(sentences) == expected
