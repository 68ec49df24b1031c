"""Watching a run: the model FLOPs utilisation, profiles of chosen steps, several evaluation splits, W&B."""

import json
import re
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import vit_digits
from tests.compilations import counted_compilations
from tests.vit_test_configs import tiny_vit_config
from trainer import loop, validation
from trainer.errors import ConfigError
from trainer.evaluation import restore_checkpoint
from trainer.io.checkpoints import Checkpoints
from trainer.io.metrics_io import read_metrics
from trainer.observe import observe_config, profiling, wandb_log
from trainer.observe.model_flops import ModelFlops
from trainer.observe.step_cost import Utilisation, compiled_flops
from trainer.run_step import build_step
from trainer.state import train_metrics
from trainer.task import load_task

# The utilisation -----------------------------------------------------------------------------


def test_utilisation_is_flops_per_second_of_one_device_over_its_peak():
  assert Utilisation(400.0).fraction(100e12) == pytest.approx(0.25)


def test_the_configs_peak_wins_and_a_known_peak_needs_bfloat16():
  config = vit_digits.get_config()
  assert Utilisation.of_run(config, 'cpu') is None
  assert Utilisation.of_run(config, 'NVIDIA H100 80GB HBM3') is None  # float32: no known peak
  config.model.dtype = 'bfloat16'
  assert Utilisation.of_run(config, 'NVIDIA H100 80GB HBM3').peak_tflops == 989.4
  config.peak_tflops = 123.0
  assert Utilisation.of_run(config, 'NVIDIA H100 80GB HBM3').peak_tflops == 123.0
  assert Utilisation.of_run(config, 'cpu').peak_tflops == 123.0


def test_the_progress_line_shows_the_mfu_of_the_counted_steps_flops_over_their_time(monkeypatch):
  now = [100.0]
  monkeypatch.setattr(loop.time, 'perf_counter', lambda: now[0])
  progress = loop._Progress(num_steps=10, batch_size=4)
  for _ in range(4):
    progress.count_step(flops=5e12)
  now[0] += 2.0  # 4 steps of 5 TFLOPs in 2 s: 10 TFLOP/s, a quarter of a 40 TFLOP/s peak
  rate = progress.steps_per_sec()
  mfu = Utilisation(40.0).fraction(progress.flops_per_sec)
  assert rate == pytest.approx(2.0) and mfu == pytest.approx(0.25)
  line = progress.line(4, {'loss': 1.5, 'steps_per_sec': rate, 'mfu': mfu})
  assert line == 'step 4/10 | loss 1.5 | 2.00 steps/s, 8 examples/s, MFU 25.0% (training only) | ETA 3s'
  assert 'MFU' not in progress.line(4, {'loss': 1.5, 'steps_per_sec': rate})


def test_without_a_model_count_asking_a_jitted_step_for_its_flops_compiles_nothing_twice():
  step = jax.jit(lambda w, x, y: (w * 2.0, (x @ w).sum() + y), donate_argnums=(0,))
  w, x, y = jnp.ones((16, 16)), jnp.ones((8, 16)), jnp.zeros(())
  with counted_compilations() as compiles:
    flops = Utilisation(1.0).flops_of(step, w, x, y)
    step(w, x, y)
  assert flops >= 2 * 8 * 16 * 16 and len(compiles) == 1


def test_with_a_model_count_the_flops_of_a_step_are_one_devices_share_of_it():
  utilisation = Utilisation(1.0, count_model_flops=lambda metrics, batch: 8e9)
  assert utilisation.flops_of(None, None, None, None) == pytest.approx(8e9 / jax.device_count())


def test_a_model_count_that_fails_falls_back_to_the_compiled_count_and_says_so(caplog):
  def broken(metrics, batch):
    raise RuntimeError('no CPU backend here')

  step = jax.jit(lambda w, x, y: (w * 2.0, (x @ w).sum() + y))
  w, x, y = jnp.ones((16, 16)), jnp.ones((8, 16)), jnp.zeros(())
  utilisation = Utilisation(1.0, count_model_flops=broken)
  assert utilisation.flops_of(step, w, x, y) >= 2 * 8 * 16 * 16
  assert utilisation.count_model_flops is None and 'no CPU backend here' in caplog.text
  config = vit_digits.get_config()
  config.peak_tflops = 1.0
  made = Utilisation.of_run(config, 'cpu', lambda: broken(None, None))
  assert made.peak_tflops == 1.0 and made.count_model_flops is None


def test_a_runs_model_flops_are_its_plain_steps_whatever_the_scan_and_the_micro_batches():
  counts, compiled = [], []
  for scan, micro_batches in ((False, 1), (True, 2)):
    config = tiny_vit_config(
      **{'model.depth': 2, 'model.scan_layers': scan, 'grad_accum_steps': micro_batches}
    )
    task = load_task(config)
    batch, metrics = task.batch_shapes(config.batch_size), train_metrics(task).empty()
    counts.append(ModelFlops.of_task(config, task, num_steps=8)(metrics, batch))
    run_step = build_step(config, task, num_steps=8, devices=jax.devices()[:1])
    init = run_step.init
    step = run_step.train_step(init.parts(init.rest()))
    compiled.append(compiled_flops(step.lower(init.abstract_state, metrics, batch).compile()))
  assert counts[0] > 0 and counts[1] == pytest.approx(counts[0], rel=1e-6), counts
  # XLA's count of the compiled step goes through the scanned layers and the micro-batches once
  assert compiled[1] < 0.6 * counts[1], (compiled, counts)


# Checks of the fields --------------------------------------------------------------------------


@pytest.mark.parametrize(
  'field, value, message',
  [
    ('eval_splits', 'test', 'config.eval_splits is'),
    ('eval_splits', ('test', 'test'), 'each split may be named once'),
    ('eval_splits', ('../test',), 'plain name'),
    ('peak_tflops', -1.0, 'config.peak_tflops is -1.0'),
    ('peak_tflops', float('nan'), 'config.peak_tflops is nan'),
    ('profile_steps', (3, 2), 'increasing order'),
    ('profile_steps', (0,), 'step numbers >= 1'),
    ('profile_steps', (1.5,), 'config.profile_steps[0] is 1.5; it must be an integer'),
    ('profile_steps', 5, 'config.profile_steps is 5'),
    ('wandb.project', 3, 'config.wandb.project is 3'),
    ('wandb.name', ' x', "config.wandb.name is ' x'"),
  ],
)
def test_a_bad_field_is_one_line(field, value, message):
  config = vit_digits.get_config()
  with config.ignore_type():
    section, name = (config.wandb, field.split('.')[1]) if '.' in field else (config, field)
    section[name] = value
  with pytest.raises(ConfigError, match=re.escape(message)) as error:
    validation.check_trainer_fields(config)
  assert '\n' not in str(error.value)


def test_the_fields_are_off_by_default_and_filled_in_where_missing():
  config = vit_digits.get_config()
  validation.check_trainer_fields(config)
  assert observe_config.eval_splits(config) == () and observe_config.profile_steps(config) == ()
  assert wandb_log.wandb_project(config) == '' and config.peak_tflops == 0.0
  assert observe_config.checkpoint_metric(config) == 'accuracy'
  for field in ('eval_splits', 'profile_steps', 'peak_tflops', 'wandb'):
    del config[field]  # a config that does not write them: the schema's defaults
  validation.check_trainer_fields(config)
  assert observe_config.checkpoint_metric(config) == 'accuracy' and wandb_log.wandb_project(config) == ''


def test_eval_splits_must_be_splits_of_the_data_and_profile_steps_steps_of_the_run():
  config = vit_digits.get_config()
  config.eval_splits = ('test', 'val')
  with pytest.raises(ConfigError, match=re.escape("config.eval_splits is ('test', 'val'); this data has")):
    validation.check_eval_splits(config, ('train', 'test'))
  config.profile_steps = (7, 8, 9)
  with pytest.raises(ConfigError, match='this run has steps 1 to 8 only'):
    validation.check_profile_steps(config, 8)
  with pytest.raises(ConfigError, match='local workdir only'):
    validation.check_profile_workdir(config, 'gs://bucket/run')


def test_each_splits_metrics_are_named_by_it_and_the_first_chooses_the_best():
  config = vit_digits.get_config()
  per_split = {'test': {'accuracy': 0.9, 'loss': 0.3}}
  assert loop.named_metrics(config, per_split) == {'accuracy': 0.9, 'loss': 0.3}
  config.eval_splits = ('test', 'train')
  per_split['train'] = {'accuracy': 0.95, 'loss': 0.2}
  assert loop.named_metrics(config, per_split) == {
    'test_accuracy': 0.9,
    'test_loss': 0.3,
    'train_accuracy': 0.95,
    'train_loss': 0.2,
  }
  assert observe_config.checkpoint_metric(config) == 'test_accuracy'


# Profiles ------------------------------------------------------------------------------------


def test_windows_are_runs_of_consecutive_steps():
  assert profiling.windows([2, 3, 4, 7, 9, 10]) == [(2, 4), (7, 7), (9, 10)]
  assert profiling.windows([]) == []


def test_only_the_chosen_steps_are_traced(tmp_path, capsys):
  profiler = profiling.StepProfiler((2, 3, 5), tmp_path, print_summary=True)
  step_fn = jax.jit(lambda x: jnp.tanh(x @ x))
  x = jnp.ones((32, 32))
  traced = []
  for step in range(1, 7):
    profiler.before_step(step, x)
    x = step_fn(x)
    if profiler.window_ends(step):
      traced.append(step)
      profiler.stop()
  profiler.stop()  # nothing in progress: nothing happens
  assert traced == [3, 5]
  assert sorted(p.name for p in (tmp_path / 'profile').iterdir()) == ['steps_2-3', 'steps_5-5']
  for window in ('steps_2-3', 'steps_5-5'):
    assert list((tmp_path / 'profile' / window).glob('plugins/profile/*/*.xplane.pb'))
  printed = capsys.readouterr().out
  assert 'profile of 2 step(s) in' in printed and 'profile of 1 step(s) in' in printed
  assert 'where the time goes' in printed


def test_a_resumed_run_traces_the_rest_of_a_window_it_starts_in(tmp_path):
  profiler = profiling.StepProfiler((4, 5, 6), tmp_path, print_summary=False)
  profiler.before_step(5, None)  # resumed from step 4
  assert not profiler.window_ends(5) and profiler.window_ends(6)
  profiler.stop()
  assert [p.name for p in (tmp_path / 'profile').iterdir()] == ['steps_5-6']


# Weights & Biases ----------------------------------------------------------------------------


class _FakeRun:
  def __init__(self, calls):
    self.calls = calls

  def define_metric(self, name, **kwargs):
    self.calls.append(('define_metric', name, kwargs))

  def log(self, values):
    self.calls.append(('log', values))

  def finish(self):
    self.calls.append(('finish',))


@pytest.fixture
def fake_wandb(monkeypatch):
  """A ``wandb`` module that records what it is asked."""
  calls = []
  module = types.ModuleType('wandb')
  module.init = lambda **kwargs: calls.append(('init', kwargs)) or _FakeRun(calls)
  monkeypatch.setitem(sys.modules, 'wandb', module)
  return calls


def test_wandb_gets_the_scalars_against_the_step_and_the_resolved_config(fake_wandb, tmp_path):
  config = vit_digits.get_config()
  assert wandb_log.make_writers(config, tmp_path) == {}  # off: no run
  config.wandb.project = 'attention-lab'
  writers = wandb_log.make_writers(config, tmp_path)
  writers['train'].write_scalars(5, {'loss': np.float32(0.5), 'steps_per_sec': 3.0})
  writers['eval'].write_scalars(5, {'accuracy': 0.75})
  writers['train'].close()
  writers['eval'].close()
  (_, init), *rest = fake_wandb
  assert init['project'] == 'attention-lab' and init['entity'] is None and init['name'] == tmp_path.name
  assert (
    re.fullmatch('[0-9a-f]{12}', init['id']) and init['resume'] == 'allow' and init['dir'] == str(tmp_path)
  )
  assert init['config']['batch_size'] == 128 and init['config']['model']['width'] == 64
  assert ('define_metric', 'train/*', {'step_metric': 'step'}) in rest
  logged = [call[1] for call in rest if call[0] == 'log']
  assert logged == [
    {'step': 5, 'train/loss': 0.5, 'train/steps_per_sec': 3.0},
    {'step': 5, 'eval/accuracy': 0.75},
  ]
  assert rest.count(('finish',)) == 1
  assert json.loads((tmp_path / 'wandb.json').read_text()) == {'id': init['id']}
  wandb_log.make_writers(config, tmp_path)  # resuming the workdir continues the same W&B run
  assert [call[1]['id'] for call in fake_wandb if call[0] == 'init'] == [init['id'], init['id']]


def test_a_run_wandb_cannot_start_is_one_line(monkeypatch, tmp_path):
  class NotLoggedIn(Exception):
    pass

  def init(**kwargs):
    raise NotLoggedIn('api_key not configured (no-tty). call wandb.login(key=[your_api_key])\nmore detail')

  module = types.ModuleType('wandb')
  module.init, module.errors = init, types.SimpleNamespace(Error=NotLoggedIn)
  monkeypatch.setitem(sys.modules, 'wandb', module)
  config = vit_digits.get_config()
  config.wandb.project = 'attention-lab'
  with pytest.raises(ConfigError) as error:
    wandb_log.make_writers(config, tmp_path)
  assert str(error.value) == (
    "config.wandb.project is 'attention-lab' but W&B could not start a run (api_key not configured "
    '(no-tty). call wandb.login(key=[your_api_key])); run `wandb login`, or set WANDB_MODE=offline to '
    'log to disk.'
  )


def test_a_missing_wandb_package_is_one_line_naming_the_pip_command(monkeypatch):
  monkeypatch.setitem(sys.modules, 'wandb', None)  # ``import wandb`` raises ImportError
  config = vit_digits.get_config()
  wandb_log.check_available(config)  # not asked for: nothing to import
  config.wandb.project = 'attention-lab'
  with pytest.raises(ConfigError) as error:
    wandb_log.check_available(config)
  message = str(error.value)
  assert '\n' not in message and 'pip install wandb==0.31.0' in message
  assert message.startswith("config.wandb.project is 'attention-lab' but the wandb package is not installed")


# End to end ----------------------------------------------------------------------------------


@pytest.fixture(scope='module')
def watched_run(tmp_path_factory):
  """A tiny ViT with two evaluation splits, a profiled window and a given peak."""
  workdir = tmp_path_factory.mktemp('watched')
  config = tiny_vit_config(eval_splits=('test', 'train'), profile_steps=(3, 4), peak_tflops=1.0)
  result = loop.train_and_evaluate(config, workdir)
  return workdir, result


@pytest.mark.slow  # runs the trainer
def test_each_split_is_evaluated_and_named_and_the_best_checkpoint_follows_the_first(watched_run):
  workdir, result = watched_run
  evals = [r for r in read_metrics(workdir) if r['split'] == 'eval']
  assert [r['step'] for r in evals] == [4, 8]
  for record in evals:
    assert {'test_accuracy', 'test_loss', 'train_accuracy', 'train_loss'} <= set(record)
    assert 'accuracy' not in record and 'loss' not in record
  assert set(result.eval_metrics) >= {'test_accuracy', 'train_accuracy'}
  by_test = max(evals, key=lambda r: (r['test_accuracy'], r['step']))['step']
  checkpoints = Checkpoints(workdir, best_metric='test_accuracy', read_only=True)
  try:
    assert checkpoints.best_step() == by_test
    assert set(checkpoints.manager.metrics(8)) >= {'test_accuracy', 'train_accuracy'}
  finally:
    checkpoints.close()
  assert restore_checkpoint(workdir, 'best')[3] == by_test


@pytest.mark.slow  # runs the trainer
def test_the_chosen_steps_are_profiled_into_the_workdir(watched_run):
  workdir, _ = watched_run
  assert [p.name for p in (workdir / 'profile').iterdir()] == ['steps_3-4']
  assert list((workdir / 'profile' / 'steps_3-4').glob('plugins/profile/*/*.xplane.pb'))


@pytest.mark.slow  # runs the trainer
def test_the_utilisation_is_logged_where_a_peak_is_given(watched_run):
  workdir, _ = watched_run
  rated = [r for r in read_metrics(workdir) if r['split'] == 'train' and 'steps_per_sec' in r]
  assert rated and all(0 < r['mfu'] < 1 for r in rated)  # a tiny model on a CPU: far below 1 TFLOP/s
  assert all('steps_per_sec' in r for r in read_metrics(workdir) if 'mfu' in r)


@pytest.mark.slow  # runs the trainer and W&B's offline client
def test_a_run_logs_to_wandb_offline(tmp_path, monkeypatch):
  pytest.importorskip('wandb')
  monkeypatch.setenv('WANDB_MODE', 'offline')
  monkeypatch.setenv('WANDB_SILENT', 'true')
  config = tiny_vit_config(**{'wandb.project': 'attention-lab-test', 'total_steps': 4})
  loop.train_and_evaluate(config, tmp_path)
  run_id = json.loads((tmp_path / 'wandb.json').read_text())['id']
  (run_file,) = (tmp_path / 'wandb').glob(f'offline-run-*-{run_id}/run-{run_id}.wandb')
  logged = run_file.read_bytes()  # W&B's record log: the keys are plain strings in it
  for key in (b'train/loss', b'train/steps_per_sec', b'eval/accuracy', b'eval/loss', b'batch_size'):
    assert key in logged, key
