"""ablate.py on a tiny ViT: the sweep, its tables, its pictures, reruns, bad axes and printed commands."""

import csv
import itertools
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import flax
import numpy as np
import optax
import pytest
from absl import flags
from clu import metrics as clu_metrics
from flax import nnx
from matplotlib.figure import Figure
from ml_collections import config_flags

from ablation import sweep, tables
from ablation.plots import plot_ablation, plot_workdir
from attention import drawing
from attention.drawing import attention_rollout
from tests.translation_test_configs import tiny_translation_config
from tests.vit_test_configs import tiny_vit_config
from trainer.evaluation import evaluate_workdir
from trainer.loop import TrainResult
from trainer.observe.reporting import Reporting
from trainer.task import NotApplicable, Task, load_task

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = dict(total_steps=3, eval_every_steps=3, checkpoint_every_steps=3, log_every_steps=3)
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


def tiny_config(**overrides):
  return tiny_vit_config(**{**TINY, **overrides})


def quiet(line):
  del line


@pytest.fixture(scope='module')
def sweep_dir(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('ablation')
  plan = sweep.plan_sweep(tiny_config(), ['model.posemb=none,learn2d'], 1, workdir)
  tables.write_results(workdir, sweep.run_sweep(plan, log=quiet))
  return workdir


@pytest.fixture
def no_training(monkeypatch):
  """Records the runs the sweep would train instead of training them."""
  trained = []

  def fake_train_and_evaluate(config, workdir, task=None):
    trained.append(pathlib.Path(workdir).name)
    return TrainResult(
      step=config.total_steps, interrupted=False, eval_metrics={'accuracy': 0.5, 'loss': 1.0}
    )

  monkeypatch.setattr(sweep, 'train_and_evaluate', fake_train_and_evaluate)
  return trained


def _png(path):
  return path.exists() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.slow  # runs a sweep
def test_sweep_writes_results_json_csv_and_markdown(sweep_dir):
  results = json.loads((sweep_dir / 'results.json').read_text())
  assert results['axes'] == {'model.posemb': ['none', 'learn2d']} and results['seeds'] == [0]
  runs = results['runs']
  assert [run['overrides'] for run in runs] == [
    {'model.posemb': 'none', 'seed': 0},
    {'model.posemb': 'learn2d', 'seed': 0},
  ]
  assert [pathlib.Path(run['workdir']) for run in runs] == [
    sweep_dir / 'posemb=none,seed=0',
    sweep_dir / 'posemb=learn2d,seed=0',
  ]
  for run in runs:  # the cost columns of a sweep's record: training examples a second, the model's facts
    assert run['cost']['train_examples_per_second'] > 0
    assert all(isinstance(value, float) for value in run['cost'].values())
  evaluated = evaluate_workdir(runs[1]['workdir'])
  assert set(runs[1]['metrics']) == set(evaluated)
  assert runs[1]['metrics']['step'] == 3 and runs[1]['metrics']['accuracy'] == pytest.approx(
    evaluated['accuracy']
  )
  with (sweep_dir / 'results.csv').open() as file:
    rows = list(csv.DictReader(file))
  assert [(row['model.posemb'], row['seed']) for row in rows] == [('none', '0'), ('learn2d', '0')]
  assert float(rows[1]['accuracy']) == runs[1]['metrics']['accuracy']
  table = (sweep_dir / 'results.md').read_text()
  assert '| model.posemb | test accuracy (%) |' in table
  assert re.search(r'^\| none \| \d+\.\d \|$', table, re.M) and re.search(
    r'^\| learn2d \| \d+\.\d \|$', table, re.M
  )


@pytest.mark.slow  # reads a sweep that trained
def test_rerun_trains_only_what_is_not_finished(sweep_dir, no_training):
  plan = sweep.plan_sweep(tiny_config(), ['model.posemb=none,learn2d'], 2, sweep_dir)
  summary = sweep.run_sweep(plan, log=quiet)
  assert no_training == ['posemb=none,seed=1', 'posemb=learn2d,seed=1']
  before = json.loads((sweep_dir / 'results.json').read_text())['runs']
  assert [run for run in summary['runs'] if run['overrides']['seed'] == 0] == before


def test_a_sweep_trains_with_the_task_it_checked_and_then_lets_it_go(tmp_path, monkeypatch):
  built, trained_with = [], []
  monkeypatch.setattr(sweep, 'load_task', lambda config: built.append(load_task(config)) or built[-1])

  def fake_train_and_evaluate(config, workdir, task=None):
    trained_with.append(task)
    return TrainResult(step=config.total_steps, interrupted=False, eval_metrics={'accuracy': 0.5})

  monkeypatch.setattr(sweep, 'train_and_evaluate', fake_train_and_evaluate)
  plan = sweep.plan_sweep(tiny_config(), ['model.posemb=none,learn2d'], 2, tmp_path)
  sweep.run_sweep(plan, log=quiet)
  assert len(built) == 2 and trained_with == [built[0], built[0], built[1], built[1]]
  assert all(run.task is None for run in plan.runs)  # the data of finished runs is not held


@pytest.mark.slow  # reads a sweep that trained
def test_a_run_without_its_final_evaluation_is_not_finished(sweep_dir, tmp_path):
  shutil.copytree(sweep_dir / 'posemb=none,seed=0', tmp_path / 'posemb=none,seed=0')
  [run] = sweep.plan_sweep(tiny_config(), ['model.posemb=none'], 1, tmp_path).runs
  assert sweep.finished_metrics(run)['step'] == 3
  [longer] = sweep.plan_sweep(tiny_config(total_steps=6), ['model.posemb=none'], 1, tmp_path).runs
  assert sweep.finished_metrics(longer) is None  # resumes to step 6
  metrics = run.workdir / 'metrics.jsonl'
  metrics.write_text(
    ''.join(line + '\n' for line in metrics.read_text().splitlines() if '"eval"' not in line)
  )
  assert sweep.finished_metrics(run) is None


@pytest.mark.slow  # runs a sweep
def test_pictures_render_from_saved_workdirs(sweep_dir):
  paths = plot_workdir(sweep_dir)
  assert {path.name for path in paths} == {
    'ablation.png',
    'training_curves.png',
    'attention_posemb=none,seed=0.png',
    'attention_posemb=learn2d,seed=0.png',
    'posemb_similarity_posemb=learn2d,seed=0.png',
  }
  assert all(path.parent == sweep_dir / 'plots' and _png(path) for path in paths)
  run_dir = sweep_dir / 'posemb=learn2d,seed=0'
  assert {path.name for path in plot_workdir(run_dir)} == {
    'training_curves.png',
    'attention_posemb=learn2d,seed=0.png',
    'posemb_similarity_posemb=learn2d,seed=0.png',
  }
  assert all(_png(path) for path in (run_dir / 'plots').iterdir())


def test_attention_rollout_averages_heads_adds_identity_and_multiplies():
  rng = np.random.default_rng(0)
  weights = [rng.dirichlet(np.ones(5), size=(3, 5)) for _ in range(2)]  # [heads, T, T] per layer
  first, second = attention_rollout(weights)
  mixed = [0.5 * layer.mean(axis=0) + 0.5 * np.eye(5) for layer in weights]
  np.testing.assert_allclose(first, mixed[0])
  np.testing.assert_allclose(second, mixed[1] @ mixed[0])
  np.testing.assert_allclose(second.sum(axis=-1), 1.0)


def test_bad_axes_fail_before_any_run(tmp_path, no_training):
  cases = [
    ('model.posembb=none', "the config has no field 'model.posembb'"),
    ('model.width=16,wide', "'wide' is not of the field's type, int"),
    (
      'model.posemb=none,learn3d',
      "config.model.posemb is 'learn3d'; allowed values: none, learn1d, learn2d",
    ),
    ('model.posemb_injection=stem,everywhere', 'allowed values: stem, every_layer, every_layer_shared'),
    ('model.pool=cls,avg', "config.model.pool is 'avg'; allowed values: cls, gap, map."),
    ('model.posemb', "expected 'path=value1,value2,...'"),
    ('seed=1,2', 'use --seeds'),
  ]
  for spec, message in cases:
    with pytest.raises(ValueError, match=re.escape(message)):
      sweep.plan_sweep(tiny_config(), [spec], 1, tmp_path)
  assert no_training == [] and not any(tmp_path.iterdir())


@pytest.mark.slow  # reads a sweep that trained
def test_a_workdir_of_another_model_fails_before_any_run(sweep_dir, no_training):
  with pytest.raises(ValueError, match='model.width'):
    sweep.plan_sweep(tiny_config(**{'model.width': 32}), ['model.posemb=none,learn2d'], 1, sweep_dir)
  assert no_training == []


def test_injection_axis_skips_combinations_that_do_not_exist(tmp_path):
  plan = sweep.plan_sweep(
    tiny_config(), ['model.posemb=none,learn1d', 'model.posemb_injection=stem,every_layer'], 2, tmp_path
  )
  assert [run.name for run in plan.runs] == [
    'posemb=none,posemb_injection=stem,seed=0',
    'posemb=none,posemb_injection=stem,seed=1',
    'posemb=learn1d,posemb_injection=stem,seed=0',
    'posemb=learn1d,posemb_injection=stem,seed=1',
    'posemb=learn1d,posemb_injection=every_layer,seed=0',
    'posemb=learn1d,posemb_injection=every_layer,seed=1',
  ]
  assert plan.not_applicable == [{'model.posemb': 'none', 'model.posemb_injection': 'every_layer'}]
  records = [
    dict(
      overrides=run.overrides,
      name=run.name,
      workdir=str(run.workdir),
      metrics={'accuracy': 0.9 + 0.01 * i, 'loss': 0.3},
    )
    for i, run in enumerate(plan.runs)
  ]
  table = tables.markdown(sweep.summarize(plan, records))
  assert '| model.posemb | stem | every_layer |' in table
  assert '| none | 90.5 ± 0.7 | N/A |' in table and '| learn1d | 92.5 ± 0.7 | 94.5 ± 0.7 |' in table


def test_runs_that_measured_few_shot_accuracy_get_a_second_table_of_the_same_shape(tmp_path):
  plan = sweep.plan_sweep(
    tiny_config(), ['model.posemb=none,learn1d', 'model.posemb_injection=stem,every_layer'], 2, tmp_path
  )
  records = [
    dict(
      overrides=run.overrides,
      name=run.name,
      workdir=str(run.workdir),
      metrics={
        'accuracy': 0.9 + 0.01 * i,
        'fewshot_1shot': 0.2,
        'fewshot_5shot': 0.5 + 0.02 * i,
        'fewshot_5shot_std': 0.01,
      },
    )
    for i, run in enumerate(plan.runs)
  ]
  table = tables.markdown(sweep.summarize(plan, records))
  accuracy, fewshot = table.split('5-shot linear accuracy (%)')
  assert '| none | 90.5 ± 0.7 | N/A |' in accuracy and '| learn1d | 92.5 ± 0.7 | 94.5 ± 0.7 |' in accuracy
  assert '| none | 51.0 ± 1.4 | N/A |' in fewshot and '| learn1d | 55.0 ± 1.4 | 59.0 ± 1.4 |' in fewshot
  assert '| model.posemb | stem | every_layer |' in fewshot


def test_other_axes_get_one_row_per_combination(tmp_path):
  plan = sweep.plan_sweep(
    tiny_config(), ['model.width=16,32', 'optimizer.learning_rate=0.001,0.01'], 1, tmp_path
  )
  assert [run.name for run in plan.runs][:2] == [
    'width=16,learning_rate=0.001,seed=0',
    'width=16,learning_rate=0.01,seed=0',
  ]
  records = [
    dict(
      overrides=run.overrides,
      name=run.name,
      workdir=str(run.workdir),
      metrics={'accuracy': 0.25 * i, 'loss': 1.0},
    )
    for i, run in enumerate(plan.runs[:3])
  ]
  table = tables.markdown(sweep.summarize(plan, records))
  assert '| model.width | optimizer.learning_rate | accuracy | loss |' in table
  assert '| 16 | 0.01 | 0.2500 | 1.0000 |' in table and '| 32 | 0.01 | not run | not run |' in table


def test_translator_table_has_perplexity_bleu_and_exact_match(tmp_path):
  config = tiny_translation_config()
  plan = sweep.plan_sweep(config, ['model.posemb=sincos1d,learn1d,none'], 2, tmp_path)
  records = [
    dict(
      overrides=run.overrides,
      name=run.name,
      workdir=str(run.workdir),
      metrics={'perplexity': 2.0 + i, 'bleu': 40.0 + i, 'exact_match': 0.1, 'loss': 1.0, 'accuracy': 0.5},
    )
    for i, run in enumerate(plan.runs[:4])
  ]
  table = tables.markdown(sweep.summarize(plan, records))
  assert '| model.posemb | test PPL | test BLEU | test exact match (%) |' in table
  assert '| sincos1d | 2.50 ± 0.71 | 40.5 ± 0.7 | 10.0 ± 0.0 |' in table
  assert '| none | not run | not run | not run |' in table


def test_translator_table_puts_each_data_split_in_its_own_columns(tmp_path):
  config = tiny_translation_config()
  plan = sweep.plan_sweep(config, ['model.posemb=sincos1d,none', 'data.split=simple,length'], 1, tmp_path)
  records = [
    dict(
      overrides=run.overrides,
      name=run.name,
      workdir=str(run.workdir),
      metrics={'perplexity': 1.0 + i, 'exact_match': 0.25 * i},
    )
    for i, run in enumerate(plan.runs)
  ]
  table = tables.markdown(sweep.summarize(plan, records))
  assert (
    '| model.posemb | simple test PPL | simple test exact match (%) | length test PPL '
    '| length test exact match (%) |'
  ) in table
  assert '| sincos1d | 1.00 | 0.0 | 2.00 | 25.0 |' in table
  assert '| none | 3.00 | 50.0 | 4.00 | 75.0 |' in table
  assert _png(plot_ablation(sweep.summarize(plan, records), tmp_path / 'ablation.png'))


@pytest.mark.slow  # prepares the data and draws
def test_cross_attention_picture_of_a_translator(tmp_path):
  task = load_task(tiny_translation_config(**{'model.posemb': 'learn1d'}))
  task.prepare(tmp_path)
  paths = task.reporting.draw_pictures(
    task, task.make_model(nnx.Rngs(0)), tmp_path / 'plots', 'run', 'untrained'
  )
  assert {path.name for path in paths} == {'cross_attention_run.png', 'posemb_similarity_run.png'}
  assert all(_png(path) for path in paths)


def _parse_train_command(argv):
  """The config and workdir train.py would run with (its flags, in a fresh flag registry)."""
  registry = flags.FlagValues()
  config = config_flags.DEFINE_config_file('config', None, flag_values=registry, sys_argv=argv)
  workdir = flags.DEFINE_string('workdir', None, '', flag_values=registry)
  registry(argv)
  return config.value, workdir.value


@pytest.mark.slow
def test_print_commands_prints_runnable_train_commands(tmp_path):
  config_file = tmp_path / 'tiny.py'
  config_file.write_text(
    'from tests.vit_test_configs import tiny_vit_config\n\n\n'
    f'def get_config():\n  return tiny_vit_config(**{TINY!r})\n'
  )
  workdir = tmp_path / 'sweep'
  result = subprocess.run(
    [
      sys.executable,
      'ablate.py',
      '--config',
      str(config_file),
      '--workdir',
      str(workdir),
      '--seeds',
      '2',
      '--axis',
      'model.posemb=none,learn1d',
      '--axis',
      'model.posemb_injection=stem,every_layer',
      '--config.optimizer.learning_rate=0.01',
      '--print_commands',
    ],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS='cpu'),
    capture_output=True,
    text=True,
    check=True,
  )
  commands = result.stdout.splitlines()
  assert len(commands) == 6 and not workdir.exists()
  expected = [
    (posemb, injection, seed)
    for posemb, injection in [('none', 'stem'), ('learn1d', 'stem'), ('learn1d', 'every_layer')]
    for seed in (0, 1)
  ]
  for command, (posemb, injection, seed) in zip(commands, expected):
    argv = shlex.split(command)
    assert argv[:2] == ['python', 'train.py'] and (ROOT / argv[1]).exists()
    config, run_dir = _parse_train_command(argv[1:])
    assert run_dir == str(workdir / f'posemb={posemb},posemb_injection={injection},seed={seed}')
    assert (config.model.posemb, config.model.posemb_injection, config.seed) == (posemb, injection, seed)
    assert config.optimizer.learning_rate == 0.01 and config.total_steps == 3


# A family that ablation/ has never heard of ----------------------------------------------------


@flax.struct.dataclass
class _ToyMetrics(clu_metrics.Collection):
  loss: clu_metrics.Average.from_output('loss')
  accuracy: clu_metrics.Accuracy


class _ToyReporting(Reporting):
  """The toy's own table and pictures."""

  def ablation_table(self, summary):
    if list(summary['axes']) != ['optimizer.learning_rate']:
      return None
    groups = tables.group_runs(summary)
    rows = [
      [
        f'{rate:g}',
        'N/A'
        if tables.is_not_applicable(summary, (rate,))
        else tables.cell(
          tables.metric_values(groups.get((rate,), []), 'accuracy'), len(summary['seeds']), 100
        ),
      ]
      for rate in summary['axes']['optimizer.learning_rate']
    ]
    return 'Toy table.\n\n' + tables.markdown_rows(['rate', 'toy accuracy (%)'], rows)

  def draw_pictures(self, task, model, out_dir, name, title):
    figure = Figure(figsize=(3, 3))
    figure.subplots().imshow(np.asarray(model.kernel[...]))
    figure.suptitle(title)
    return [drawing.save(figure, out_dir / f'kernel_{name}.png')]


class ToyTask(Task):
  """The sign of a point's first coordinate; learning rates above 1 do not exist (its N/A cells)."""

  train_metrics = eval_metrics = _ToyMetrics
  reporting = _ToyReporting()

  def __init__(self, config):
    super().__init__(config)
    if config.optimizer.learning_rate > 1:
      raise NotApplicable('the toy has no learning rate above 1')

  def eval_split_names(self):
    return ('test',)

  def eval_metric_names(self):
    return ('loss', 'accuracy')

  def make_model(self, rngs):
    return nnx.Linear(2, 2, rngs=rngs)

  @staticmethod
  def _points(seed, rows):
    points = np.random.default_rng(seed).normal(size=(rows, 2)).astype(np.float32)
    return {'x': points, 'label': (points[:, 0] > 0).astype(np.int32)}

  def train_batches(self, *, batch_size, seed, start_step, process_index, process_count):
    for step in itertools.count(start_step):
      yield self._points([seed, step, process_index], batch_size // process_count)

  def eval_batches(self, split, *, batch_size, process_index, process_count):
    rows = batch_size // process_count
    return iter([dict(self._points([7, process_index], rows), mask=np.ones(rows, np.float32))])

  def loss_and_outputs(self, model, batch, *, rngs, deterministic):
    logits = model(batch['x'])
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch['label'])
    return losses.sum(), losses.shape[0], {'loss': losses, 'logits': logits, 'labels': batch['label']}

  def eval_outputs(self, model, batch):
    return dict(self.loss_and_outputs(model, batch, rngs=None, deterministic=True)[2], mask=batch['mask'])


@pytest.mark.slow  # runs a sweep
def test_a_new_family_brings_its_own_table_and_pictures(tmp_path):
  config = tiny_config(task=f'{__name__}:ToyTask')
  plan = sweep.plan_sweep(config, ['optimizer.learning_rate=0.1,0.5,2.0'], 1, tmp_path)
  assert [run.name for run in plan.runs] == ['learning_rate=0.1,seed=0', 'learning_rate=0.5,seed=0']
  assert plan.not_applicable == [{'optimizer.learning_rate': 2.0}]
  table = tables.write_results(tmp_path, sweep.run_sweep(plan, log=quiet))
  assert 'Toy table.' in table and '| rate | toy accuracy (%) |' in table and '| 2 | N/A |' in table
  assert re.search(r'^\| 0\.1 \| \d+\.\d \|$', table, re.M)
  paths = plot_workdir(tmp_path)
  assert {path.name for path in paths} == {
    'ablation.png',
    'training_curves.png',
    'kernel_learning_rate=0.1,seed=0.png',
    'kernel_learning_rate=0.5,seed=0.png',
  }
  assert all(_png(path) for path in paths)
  other = sweep.plan_sweep(config, ['batch_size=16,32'], 1, tmp_path)
  records = [
    dict(overrides=run.overrides, name=run.name, workdir=str(run.workdir), metrics={'accuracy': 0.5})
    for run in other.runs
  ]
  assert '| batch_size | accuracy |' in tables.markdown(sweep.summarize(other, records))


def test_ablation_code_names_no_family():
  """Families come in through the task interface only: ablation/ imports, reads and dispatches on none."""
  for path in (ROOT / 'ablation').glob('*.py'):
    text = path.read_text()
    for word in ('vit', 'seq2seq', 'posemb', 'positional', 'source_tokenizer', 'translat', 'startswith'):
      assert not re.search(rf'\b{word}', text, re.I), f'{path.name} mentions {word!r}'
