"""Knowledge distillation (``vit.distillation``): the losses against NumPy, the teacher frozen inside
the compiled step, DeiT's distillation token, a teacher of another shape, and bad configs."""

import jax
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx

from tests.vit_test_configs import tiny_vit_config
from trainer.errors import ConfigError, MissingFileError
from trainer.evaluation import restore_checkpoint
from trainer.io.metrics_io import read_metrics
from trainer.loop import train_and_evaluate
from trainer.observe.model_flops import ModelFlops
from trainer.partitioning import global_batch, make_mesh
from trainer.state import ModelParts, TrainState, make_train_step, train_metrics
from trainer.task import load_task
from vit.distillation import hard_distillation, soft_distillation
from vit.model import make_vit
from vit.weights import checkpoint_npz

LOGITS = np.array([[2.0, -1.0, 0.5], [0.1, 0.2, -3.0]], np.float32)
TEACHER_LOGITS = np.array([[1.0, 0.0, 3.0], [-2.0, 4.0, 1.0]], np.float32)


def _log_softmax(x):
  x = x - x.max(axis=-1, keepdims=True)
  return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize('temperature', [1.0, 3.0])
def test_soft_loss_is_t_squared_kl_at_the_temperature(temperature):
  teacher, student = _log_softmax(TEACHER_LOGITS / temperature), _log_softmax(LOGITS / temperature)
  expected = temperature**2 * np.sum(np.exp(teacher) * (teacher - student), axis=-1)
  got = np.asarray(soft_distillation(LOGITS, TEACHER_LOGITS, temperature))
  np.testing.assert_allclose(got, expected, rtol=1e-5)
  # DeiT's code: kl_div(sum) * T^2 / numel, which is our per-image mean divided by the class count.
  deit = temperature**2 * np.sum(np.exp(teacher) * (teacher - student)) / LOGITS.size
  np.testing.assert_allclose(got.mean() / LOGITS.shape[1], deit, rtol=1e-5)


def test_hard_loss_is_the_cross_entropy_against_the_teachers_argmax():
  labels = TEACHER_LOGITS.argmax(axis=-1)
  assert list(labels) == [2, 1]
  expected = -_log_softmax(LOGITS)[np.arange(2), labels]
  np.testing.assert_allclose(np.asarray(hard_distillation(LOGITS, TEACHER_LOGITS)), expected, rtol=1e-5)


def _teacher_npz(tmp_path, **model):
  """A tiny random teacher (of another width, patch size and resolution than the student by default),
  written as an official-layout ``.npz``; returns the path, the model and its image shape."""
  options = dict(width=24, depth=1, num_heads=2, mlp_dim=16, patch_size=4, pool='gap', head_zero_init=False)
  options.update(model)
  image_shape = options.pop('image_shape', (16, 16, 1))
  teacher = make_vit(
    options, num_classes=options.pop('num_classes', 10), image_shape=image_shape, rngs=nnx.Rngs(3)
  )
  path = tmp_path / 'teacher.npz'
  checkpoint_npz.write_official_npz(teacher, path)
  return path, teacher, image_shape


def _distill_config(teacher, **fields):
  config = tiny_vit_config(**{'model.dropout': 0.0, 'model.patch_size': 2, 'model.head_zero_init': False})
  config.distill = ml_collections.ConfigDict(dict(teacher=str(teacher), **fields))
  return config


def _task_and_batch(config, tmp_path):
  task = load_task(config)
  task.prepare(tmp_path)
  task.check_training_data()
  batch = next(task.train_batches(batch_size=32, seed=0, start_step=0, process_index=0, process_count=1))
  return task, batch


@pytest.mark.parametrize('kind', ['soft', 'hard'])
@pytest.mark.parametrize('distill_token', [False, True])
def test_task_loss_mixes_labels_and_a_resized_teacher(tmp_path, kind, distill_token):
  path, teacher, teacher_shape = _teacher_npz(tmp_path)
  config = _distill_config(path, kind=kind, temperature=2.0, alpha=0.3)
  config.model.distill_token = distill_token
  task, batch = _task_and_batch(config, tmp_path)
  assert task.distillation.load().image_shape == teacher_shape != task.data.image_shape
  model = task.make_model(nnx.Rngs(params=0))
  loss_sum, weight, outputs = task.loss_and_outputs(
    model, batch, rngs=None, deterministic=True, constants=task.training_constants()
  )
  logits, intermediates = model(batch['image'])
  class_logits = np.asarray(intermediates.get('class_logits', logits))
  student_logits = np.asarray(intermediates.get('distill_logits', logits))
  resized = jax.image.resize(batch['image'], (32, *teacher_shape), method='bilinear')
  teacher_logits = np.asarray(teacher(resized)[0])
  labels, smoothing, classes = batch['label'], config.label_smoothing, logits.shape[-1]
  targets = np.eye(classes)[labels] * (1 - smoothing) + smoothing / classes
  label_losses = -np.sum(targets * _log_softmax(class_logits), axis=-1)
  if kind == 'soft':
    t, s = _log_softmax(teacher_logits / 2.0), _log_softmax(student_logits / 2.0)
    distill_losses = 4.0 * np.sum(np.exp(t) * (t - s), axis=-1)
  else:
    distill_losses = -_log_softmax(student_logits)[np.arange(32), teacher_logits.argmax(axis=-1)]
  np.testing.assert_allclose(np.asarray(outputs['distill_loss']), distill_losses, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(float(loss_sum), np.sum(0.7 * label_losses + 0.3 * distill_losses), rtol=1e-4)
  assert weight == 32
  if distill_token:  # the heads learn different targets: the distillation head is not the class head
    assert not np.allclose(class_logits, student_logits)


def test_teacher_is_frozen_outside_the_state_and_gets_no_gradient(tmp_path):
  path, _, _ = _teacher_npz(tmp_path)
  config = _distill_config(path, kind='soft', temperature=2.0, alpha=0.5)
  config.model.distill_token = True
  task, batch = _task_and_batch(config, tmp_path)
  constants = task.training_constants()
  before = jax.tree.map(np.array, constants)
  parts = ModelParts(task.make_model(nnx.Rngs(params=0)))
  optimizer, mesh = optax.adam(1e-2), make_mesh()
  state = TrainState(step=np.int32(0), params=parts.params, opt_state=optimizer.init(parts.params))
  student_before = jax.tree.map(np.array, state.params)
  step = make_train_step(task, parts, optimizer, mesh, seed=0, constants=constants)
  metrics = task.train_metrics.empty()
  for _ in range(3):
    state, metrics = step(state, metrics, global_batch(batch, mesh))
  jax.tree.map(np.testing.assert_array_equal, before, jax.tree.map(np.array, task.training_constants()))
  moved = jax.tree.map(
    lambda a, b: not np.array_equal(a, b), student_before, jax.tree.map(np.array, state.params)
  )
  assert all(jax.tree.leaves(moved))  # every student parameter learns, the distillation token included
  student_leaves = len(jax.tree.leaves(task.make_model(nnx.Rngs(0))))
  assert len(jax.tree.leaves(state.params)) == student_leaves  # no teacher array in the state
  assert np.isfinite(float(metrics.compute()['distill_loss']))


def test_distillation_token_model_shapes_and_head_averaging():
  for pool, prefix in (('cls', 2), ('gap', 1)):
    model = make_vit(
      dict(width=16, depth=1, num_heads=2, mlp_dim=32, patch_size=2, pool=pool, distill_token=True),
      num_classes=5,
      image_shape=(8, 8, 1),
      rngs=nnx.Rngs(0),
    )
    assert model.distill_token.shape == (1, 1, 16) and model.distill_head.kernel.shape == (16, 5)
    assert model.num_prefix == prefix
    images = np.random.default_rng(0).normal(size=(3, 8, 8, 1)).astype(np.float32)
    logits, intermediates = model(images, return_weights=True)
    assert intermediates['attention_weights'][0].shape[-1] == 16 + prefix
    assert (
      logits.shape == intermediates['class_logits'].shape == intermediates['distill_logits'].shape == (3, 5)
    )
    average = (intermediates['class_logits'] + intermediates['distill_logits']) / 2
    np.testing.assert_allclose(logits, average, rtol=1e-6)


def test_evaluation_scores_the_average_of_the_two_heads(tmp_path):
  path, _, _ = _teacher_npz(tmp_path)
  config = _distill_config(path)
  config.model.distill_token = True
  task, batch = _task_and_batch(config, tmp_path)
  model = task.make_model(nnx.Rngs(params=0))
  batch['mask'] = np.ones(32, np.float32)
  outputs = task.eval_outputs(model, batch)
  _, intermediates = model(batch['image'])
  average = (intermediates['class_logits'] + intermediates['distill_logits']) / 2
  np.testing.assert_allclose(outputs['logits'], average, rtol=1e-6)


def test_no_teacher_is_the_default_and_keeps_the_plain_loss(tmp_path):
  task, _ = _task_and_batch(tiny_vit_config(), tmp_path)
  assert task.distillation is None and task.training_constants() is None
  config = tiny_vit_config()
  config.distill = ml_collections.ConfigDict(dict(teacher=''))
  assert load_task(config).distillation is None


@pytest.mark.parametrize(
  'fields, message',
  [
    (dict(kind='warm'), "config.distill.kind is 'warm'; allowed values: soft, hard."),
    (dict(temperature=0.0), 'config.distill.temperature is 0.0; it must be a finite number > 0.'),
    (dict(temperature=float('nan')), 'config.distill.temperature is nan'),
    (dict(alpha=1.5), 'config.distill.alpha is 1.5; it must be a number in [0, 1].'),
    (dict(alpha=True), 'config.distill.alpha is True'),
    (dict(checkpoint='first'), "config.distill.checkpoint is 'first'"),
    (dict(teachr='x'), 'unknown config field distill.teachr; the fields of distill are: teacher, checkpoint'),
    (dict(teacher=3), 'config.distill.teacher is 3'),
  ],
)
def test_bad_distill_fields_are_one_line_errors(fields, message):
  config = tiny_vit_config()
  config.distill = ml_collections.ConfigDict({'teacher': 'somewhere', **fields})
  with pytest.raises(ConfigError) as error:
    load_task(config)
  assert message in str(error.value) and '\n' not in str(error.value)


def test_teacher_problems_are_one_line_errors_before_training(tmp_path):
  config = tiny_vit_config()
  config.model.distill_token = True
  with pytest.raises(ConfigError, match='model.distill_token needs a teacher'):
    load_task(config)
  config = _distill_config(tmp_path / 'missing.npz')
  with pytest.raises(MissingFileError, match='missing.npz: no such file'):
    load_task(config).check_training_data()
  path, _, _ = _teacher_npz(tmp_path, num_classes=7)
  with pytest.raises(ConfigError, match='has 7 classes; the student has 10'):
    load_task(_distill_config(path)).check_training_data()
  path, _, _ = _teacher_npz(tmp_path, image_shape=(8, 8, 3))
  with pytest.raises(ConfigError, match='of 3 channels; the student has 1'):
    load_task(_distill_config(path)).check_training_data()


@pytest.mark.slow  # runs the trainer twice
def test_student_learns_from_a_teacher_workdir_end_to_end(tmp_path):
  teacher_dir, student_dir = tmp_path / 'teacher', tmp_path / 'student'
  teacher_config = tiny_vit_config(**{'model.width': 24, 'model.patch_size': 2})
  train_and_evaluate(teacher_config, teacher_dir)
  teacher_files = {p: p.read_bytes() for p in (teacher_dir / 'checkpoints').rglob('*') if p.is_file()}
  config = tiny_vit_config(**{'model.dropout': 0.0})
  config.model.distill_token = True
  config.distill = ml_collections.ConfigDict(dict(teacher=str(teacher_dir), kind='hard', alpha=0.5))
  result = train_and_evaluate(config, student_dir)
  assert result.step == 8 and 0.0 <= result.eval_metrics['accuracy'] <= 1.0
  train = [r for r in read_metrics(student_dir) if r['split'] == 'train']
  assert len(train) == 8 and all(np.isfinite(r['distill_loss']) for r in train)
  _, _, params, _ = restore_checkpoint(student_dir)
  saved = nnx.to_pure_dict(params)
  assert (
    'distill_token' in saved and 'distill_head' in saved and saved['patch_embedding']['kernel'].shape[0] == 4
  )
  student_leaves = len(jax.tree.leaves(load_task(config).make_model(nnx.Rngs(0))))
  assert len(jax.tree.leaves(saved)) == student_leaves  # the checkpoint holds the student only
  assert teacher_files == {p: p.read_bytes() for p in (teacher_dir / 'checkpoints').rglob('*') if p.is_file()}


def _sharded_teacher_config(teacher, grad_accum_steps=1):
  config = _distill_config(teacher, kind='soft', temperature=2.0, alpha=0.5)
  config.total_steps, config.eval_every_steps = 4, 4
  config.grad_accum_steps = grad_accum_steps
  return config


def train_with_teacher_on_eight_devices(teacher, workdir, grad_accum_steps=1):
  """On 8 devices: trains the student under fsdp=8; returns what each device holds of the teacher."""
  from trainer import run_step  # pylint: disable=g-import-not-at-top

  config = _sharded_teacher_config(teacher, grad_accum_steps)
  config.mesh.fsdp = 8
  held, original = {}, run_step.make_train_step

  def recording(*args, **kwargs):
    step = original(*args, **kwargs)
    arrays = jax.tree.leaves(step.constants)
    held['sharded'] = [list(a.sharding.spec) for a in arrays if any(a.sharding.spec)]
    held['bytes'] = [sum(a.nbytes for a in arrays), sum(a.addressable_shards[0].data.nbytes for a in arrays)]
    return step

  run_step.make_train_step = recording
  try:
    train_and_evaluate(config, workdir)
  finally:
    run_step.make_train_step = original
  return held


@pytest.mark.slow  # 8 host devices and the trainer twice
@pytest.mark.parametrize('grad_accum_steps', [1, 2])  # 2: the teacher reaches the per-device micro-batch loop
def test_a_sharded_teacher_trains_like_one_device(tmp_path, eight_devices, grad_accum_steps):
  teacher, _, _ = _teacher_npz(tmp_path, width=64, mlp_dim=128)
  one = tmp_path / 'one'
  train_and_evaluate(_sharded_teacher_config(teacher, grad_accum_steps), one)
  held = eight_devices(
    train_with_teacher_on_eight_devices,
    teacher=str(teacher),
    workdir=str(tmp_path / 'eight'),
    grad_accum_steps=grad_accum_steps,
  )
  assert held['sharded'] and all(spec.count('fsdp') == 1 for spec in held['sharded'])
  total, per_device = held['bytes']
  assert per_device < total / 2  # the teacher's large arrays are cut over the 8 devices, as the student's

  def losses(workdir):
    return {r['step']: (r['loss'], r['distill_loss']) for r in read_metrics(workdir) if r['split'] == 'train'}

  eight, single = losses(tmp_path / 'eight'), losses(one)
  assert sorted(eight) == sorted(single) == [1, 2, 3, 4]
  np.testing.assert_allclose([eight[s] for s in single], [single[s] for s in single], rtol=2e-5)


@pytest.mark.parametrize('pool', ['cls', 'gap'])
def test_a_distillation_token_model_is_written_and_read_back_as_npz(tmp_path, pool):
  options = dict(width=16, depth=1, num_heads=2, mlp_dim=32, patch_size=2, pool=pool, distill_token=True)
  options['head_zero_init'] = False
  model = make_vit(options, num_classes=5, image_shape=(8, 8, 1), rngs=nnx.Rngs(0))
  checkpoint_npz.write_official_npz(model, tmp_path / 'student.npz')
  arrays = checkpoint_npz.read_npz(tmp_path / 'student.npz')
  assert arrays['dist_token'].shape == (1, 1, 16) and arrays['head_dist/kernel'].shape == (16, 5)
  assert arrays[checkpoint_npz.POSEMB_KEY].shape == (1, model.num_prefix + 16, 16)
  fresh = make_vit(options, num_classes=5, image_shape=(8, 8, 1), rngs=nnx.Rngs(1))
  checkpoint_npz.canonical_to_model(fresh, checkpoint_npz.to_canonical(arrays))
  images = np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype(np.float32)
  np.testing.assert_allclose(fresh(images)[0], model(images)[0], rtol=1e-6)
  # a plain ViT's weights start a distillation-token student: the token and its head are new
  plain = make_vit(dict(options, distill_token=False), num_classes=5, image_shape=(8, 8, 1), rngs=nnx.Rngs(2))
  report = checkpoint_npz.canonical_to_model(
    fresh, checkpoint_npz.to_canonical(checkpoint_npz.model_to_official(plain))
  )
  assert 'dist_token: not in the checkpoint, freshly initialised' in report.adapted
  assert not np.any(np.asarray(fresh.distill_head.kernel[...]))
  np.testing.assert_array_equal(fresh.head.kernel[...], plain.head.kernel[...])


def test_the_model_flops_of_a_distilled_step_count_the_teachers_forward_pass(tmp_path):
  path, _, _ = _teacher_npz(tmp_path)
  counts = {}
  for name, config in (
    ('student', _distill_config('')),
    ('with teacher', _distill_config(path, kind='soft', temperature=2.0, alpha=0.5)),
  ):
    task = load_task(config)
    batch, metrics = task.batch_shapes(config.batch_size), train_metrics(task).empty()
    counts[name] = ModelFlops.of_task(config, task, num_steps=8)(metrics, batch)
  # the teacher (width 24, 16 patches of 16x16x1) runs forward only, inside the step
  assert counts['with teacher'] > counts['student'] > 0, counts


@pytest.mark.parametrize('distilled', [False, True])
def test_a_timm_folder_teacher_is_the_model_load_predictor_builds(tmp_path, distilled):
  """A timm folder as the teacher: timm's exact GELU, its distillation token and second head, its own
  mean and std and resolution, as ``trainer.predictor.load_predictor`` builds it for the same folder
  and as timm computes it (the NumPy forward of ``tests/test_vit_weights.py``)."""
  from tests import test_vit_weights as tw  # pylint: disable=g-import-not-at-top
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top
  from vit.distillation import load_teacher  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(40)
  arrays = tw.timm_arrays(rng, dist=distilled, classes=10, channels=1)
  name = 'deit_tiny_distilled_patch16_224' if distilled else 'deit_tiny_patch16_224'
  cfg = {'input_size': [1, tw.IMAGE, tw.IMAGE], 'crop_pct': 1.0, 'mean': [0.3], 'std': [0.2]}
  folder = tw.write_timm_folder(tmp_path / 'timm', arrays, name, pretrained_cfg=cfg)
  section = ml_collections.ConfigDict(dict(teacher=str(folder), checkpoint='latest', arch=''))
  teacher = load_teacher(section, num_classes=10, image_shape=(8, 8, 1), dtype='float32')
  assert teacher.image_shape == (tw.IMAGE, tw.IMAGE, 1) and (teacher.mean, teacher.std) == ((0.3,), (0.2,))
  student_images = rng.uniform(-1, 1, (2, 8, 8, 1)).astype(np.float32)  # normalised with mean = std = 0.5
  logits = np.asarray(teacher.logits(teacher.variables, student_images, (0.5,), (0.5,)))
  pixels = jax.image.resize(student_images * 0.5 + 0.5, (2, tw.IMAGE, tw.IMAGE, 1), method='bilinear')
  own = (np.asarray(pixels) - 0.3) / 0.2
  np.testing.assert_allclose(logits, np.asarray(load_predictor(folder).model(own)[0]), rtol=1e-5, atol=1e-5)
  expected = tw.timm_forward(arrays, own, act='gelu_exact', eps=1e-6, no_embed_class=False, pool='token')
  np.testing.assert_allclose(logits, expected, rtol=2e-4, atol=2e-4)


def test_a_transformers_folder_teacher_keeps_its_epsilon_and_distillation_head(tmp_path):
  """``DeiTForImageClassificationWithTeacher`` as the teacher: epsilon 1e-12, exact GELU, both heads
  averaged, its processor's mean and std, as transformers computes it."""
  from tests import test_vit_weights as tw  # pylint: disable=g-import-not-at-top
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top
  from vit.distillation import load_teacher  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(41)
  arrays = tw.transformers_arrays(rng, prefix='deit.', teacher=True, classes=10)
  processor = {
    'size': {'height': tw.IMAGE, 'width': tw.IMAGE},
    'image_mean': [0.4] * 3,
    'image_std': [0.3] * 3,
  }
  folder = tw.write_transformers_folder(
    tmp_path / 'hf', arrays, tw.transformers_config('deit', classes=10), processor
  )
  section = ml_collections.ConfigDict(dict(teacher=str(folder), checkpoint='latest', arch=''))
  teacher = load_teacher(section, num_classes=10, image_shape=(tw.IMAGE, tw.IMAGE, 3), dtype='float32')
  images = rng.uniform(-1, 1, (2, tw.IMAGE, tw.IMAGE, 3)).astype(np.float32)  # mean = std = 0.5
  logits = np.asarray(teacher.logits(teacher.variables, images, (0.5,) * 3, (0.5,) * 3))
  own = ((images * 0.5 + 0.5) - 0.4) / 0.3
  np.testing.assert_allclose(logits, np.asarray(load_predictor(folder).model(own)[0]), rtol=1e-5, atol=1e-5)
  expected, _ = tw.transformers_forward(arrays, own, act='gelu_exact', eps=1e-12, dinov2=False)
  np.testing.assert_allclose(logits, expected, rtol=2e-4, atol=2e-4)
