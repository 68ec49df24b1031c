"""ablate.py on a tiny ViT: the sweep, its tables, its pictures, reruns, bad axes and printed commands."""

import csv
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest
from absl import flags
from flax import nnx
from ml_collections import config_flags

from ablation import sweep, tables
from ablation.plots import attention_rollout, plot_ablation, plot_cross_attention, plot_workdir
from tests.translation_test_configs import tiny_translation_config
from tests.vit_test_configs import tiny_vit_config
from trainer.evaluation import evaluate_workdir
from trainer.loop import TrainResult
from trainer.task import load_task

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

  def fake_train_and_evaluate(config, workdir):
    trained.append(pathlib.Path(workdir).name)
    return TrainResult(step=config.total_steps, interrupted=False, eval_metrics={'accuracy': 0.5, 'loss': 1.0})

  monkeypatch.setattr(sweep, 'train_and_evaluate', fake_train_and_evaluate)
  return trained


def _png(path):
  return path.exists() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_SIGNATURE


def test_sweep_writes_results_json_csv_and_markdown(sweep_dir):
  results = json.loads((sweep_dir / 'results.json').read_text())
  assert results['axes'] == {'model.posemb': ['none', 'learn2d']} and results['seeds'] == [0]
  runs = results['runs']
  assert [run['overrides'] for run in runs] == [{'model.posemb': 'none', 'seed': 0},
                                                {'model.posemb': 'learn2d', 'seed': 0}]
  assert [pathlib.Path(run['workdir']) for run in runs] == [sweep_dir / 'posemb=none,seed=0',
                                                           sweep_dir / 'posemb=learn2d,seed=0']
  evaluated = evaluate_workdir(runs[1]['workdir'])
  assert set(runs[1]['metrics']) == set(evaluated)
  assert runs[1]['metrics']['step'] == 3 and runs[1]['metrics']['accuracy'] == pytest.approx(evaluated['accuracy'])
  with (sweep_dir / 'results.csv').open() as file:
    rows = list(csv.DictReader(file))
  assert [(row['model.posemb'], row['seed']) for row in rows] == [('none', '0'), ('learn2d', '0')]
  assert float(rows[1]['accuracy']) == runs[1]['metrics']['accuracy']
  table = (sweep_dir / 'results.md').read_text()
  assert '| model.posemb | test accuracy (%) |' in table
  assert re.search(r'^\| none \| \d+\.\d \|$', table, re.M) and re.search(r'^\| learn2d \| \d+\.\d \|$', table, re.M)


def test_rerun_trains_only_what_is_not_finished(sweep_dir, no_training):
  plan = sweep.plan_sweep(tiny_config(), ['model.posemb=none,learn2d'], 2, sweep_dir)
  summary = sweep.run_sweep(plan, log=quiet)
  assert no_training == ['posemb=none,seed=1', 'posemb=learn2d,seed=1']
  before = json.loads((sweep_dir / 'results.json').read_text())['runs']
  assert [run for run in summary['runs'] if run['overrides']['seed'] == 0] == before


def test_a_run_without_its_final_evaluation_is_not_finished(sweep_dir, tmp_path):
  shutil.copytree(sweep_dir / 'posemb=none,seed=0', tmp_path / 'posemb=none,seed=0')
  [run] = sweep.plan_sweep(tiny_config(), ['model.posemb=none'], 1, tmp_path).runs
  assert sweep.finished_metrics(run)['step'] == 3
  [longer] = sweep.plan_sweep(tiny_config(total_steps=6), ['model.posemb=none'], 1, tmp_path).runs
  assert sweep.finished_metrics(longer) is None  # resumes to step 6
  metrics = run.workdir / 'metrics.jsonl'
  metrics.write_text(''.join(line + '\n' for line in metrics.read_text().splitlines() if '"eval"' not in line))
  assert sweep.finished_metrics(run) is None


def test_pictures_render_from_saved_workdirs(sweep_dir):
  paths = plot_workdir(sweep_dir)
  assert {path.name for path in paths} == {
      'ablation.png', 'training_curves.png', 'attention_posemb=none,seed=0.png',
      'attention_posemb=learn2d,seed=0.png', 'posemb_similarity_posemb=learn2d,seed=0.png'}
  assert all(path.parent == sweep_dir / 'plots' and _png(path) for path in paths)
  run_dir = sweep_dir / 'posemb=learn2d,seed=0'
  assert {path.name for path in plot_workdir(run_dir)} == {
      'training_curves.png', 'attention_posemb=learn2d,seed=0.png', 'posemb_similarity_posemb=learn2d,seed=0.png'}
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
      ('model.posemb=none,learn3d', "unknown value 'learn3d'; allowed values: none, learn1d, learn2d"),
      ('model.posemb_injection=stem,everywhere', 'allowed values: stem, every_layer, every_layer_shared'),
      ('model.pool=cls,avg', "Unknown pool 'avg'"),
      ('model.posemb', "expected 'path=value1,value2,...'"),
      ('seed=1,2', 'use --seeds'),
  ]
  for spec, message in cases:
    with pytest.raises(ValueError, match=re.escape(message)):
      sweep.plan_sweep(tiny_config(), [spec], 1, tmp_path)
  assert no_training == [] and not any(tmp_path.iterdir())


def test_a_workdir_of_another_model_fails_before_any_run(sweep_dir, no_training):
  with pytest.raises(ValueError, match='model.width'):
    sweep.plan_sweep(tiny_config(**{'model.width': 32}), ['model.posemb=none,learn2d'], 1, sweep_dir)
  assert no_training == []


def test_injection_axis_skips_combinations_that_do_not_exist(tmp_path):
  plan = sweep.plan_sweep(tiny_config(), ['model.posemb=none,learn1d', 'model.posemb_injection=stem,every_layer'],
                          2, tmp_path)
  assert [run.name for run in plan.runs] == [
      'posemb=none,posemb_injection=stem,seed=0', 'posemb=none,posemb_injection=stem,seed=1',
      'posemb=learn1d,posemb_injection=stem,seed=0', 'posemb=learn1d,posemb_injection=stem,seed=1',
      'posemb=learn1d,posemb_injection=every_layer,seed=0', 'posemb=learn1d,posemb_injection=every_layer,seed=1']
  assert plan.not_applicable == [{'model.posemb': 'none', 'model.posemb_injection': 'every_layer'}]
  records = [dict(overrides=run.overrides, name=run.name, workdir=str(run.workdir),
                  metrics={'accuracy': 0.9 + 0.01 * i, 'loss': 0.3}) for i, run in enumerate(plan.runs)]
  table = tables.markdown(sweep.summarize(plan, records))
  assert '| model.posemb | stem | every_layer |' in table
  assert '| none | 90.5 ± 0.7 | N/A |' in table and '| learn1d | 92.5 ± 0.7 | 94.5 ± 0.7 |' in table


def test_other_axes_get_one_row_per_combination(tmp_path):
  plan = sweep.plan_sweep(tiny_config(), ['model.width=16,32', 'optimizer.learning_rate=0.001,0.01'], 1, tmp_path)
  assert [run.name for run in plan.runs][:2] == ['width=16,learning_rate=0.001,seed=0',
                                                 'width=16,learning_rate=0.01,seed=0']
  records = [dict(overrides=run.overrides, name=run.name, workdir=str(run.workdir),
                  metrics={'accuracy': 0.25 * i, 'loss': 1.0}) for i, run in enumerate(plan.runs[:3])]
  table = tables.markdown(sweep.summarize(plan, records))
  assert '| model.width | optimizer.learning_rate | accuracy | loss |' in table
  assert '| 16 | 0.01 | 0.2500 | 1.0000 |' in table and '| 32 | 0.01 | not run | not run |' in table


def test_translator_table_has_perplexity_bleu_and_exact_match(tmp_path):
  config = tiny_translation_config()
  plan = sweep.plan_sweep(config, ['model.posemb=sincos1d,learn1d,none'], 2, tmp_path)
  records = [dict(overrides=run.overrides, name=run.name, workdir=str(run.workdir),
                  metrics={'perplexity': 2.0 + i, 'bleu': 40.0 + i, 'exact_match': 0.1, 'loss': 1.0, 'accuracy': 0.5})
             for i, run in enumerate(plan.runs[:4])]
  table = tables.markdown(sweep.summarize(plan, records))
  assert '| model.posemb | test PPL | test BLEU | test exact match (%) |' in table
  assert '| sincos1d | 2.50 ± 0.71 | 40.5 ± 0.7 | 10.0 ± 0.0 |' in table
  assert '| none | not run | not run | not run |' in table


def test_translator_table_puts_each_data_split_in_its_own_columns(tmp_path):
  config = tiny_translation_config()
  plan = sweep.plan_sweep(config, ['model.posemb=sincos1d,none', 'data.split=simple,length'], 1, tmp_path)
  records = [dict(overrides=run.overrides, name=run.name, workdir=str(run.workdir),
                  metrics={'perplexity': 1.0 + i, 'exact_match': 0.25 * i}) for i, run in enumerate(plan.runs)]
  table = tables.markdown(sweep.summarize(plan, records))
  assert ('| model.posemb | simple test PPL | simple test exact match (%) | length test PPL '
          '| length test exact match (%) |') in table
  assert '| sincos1d | 1.00 | 0.0 | 2.00 | 25.0 |' in table
  assert '| none | 3.00 | 50.0 | 4.00 | 75.0 |' in table
  assert _png(plot_ablation(sweep.summarize(plan, records), tmp_path / 'ablation.png'))


def test_cross_attention_picture_of_a_translator(tmp_path):
  config = tiny_translation_config()
  task = load_task(config)
  task.prepare(tmp_path)
  model = task.make_model(nnx.Rngs(0))
  path = plot_cross_attention(model, task, config, 'untrained', tmp_path / 'cross_attention.png')
  assert _png(path)


def _parse_train_command(argv):
  """The config and workdir train.py would run with (its flags, in a fresh flag registry)."""
  registry = flags.FlagValues()
  config = config_flags.DEFINE_config_file('config', None, flag_values=registry, sys_argv=argv)
  workdir = flags.DEFINE_string('workdir', None, '', flag_values=registry)
  registry(argv)
  return config.value, workdir.value


def test_print_commands_prints_runnable_train_commands(tmp_path):
  config_file = tmp_path / 'tiny.py'
  config_file.write_text('from tests.vit_test_configs import tiny_vit_config\n\n\n'
                         f'def get_config():\n  return tiny_vit_config(**{TINY!r})\n')
  workdir = tmp_path / 'sweep'
  result = subprocess.run(
      [sys.executable, 'ablate.py', '--config', str(config_file), '--workdir', str(workdir), '--seeds', '2',
       '--axis', 'model.posemb=none,learn1d', '--axis', 'model.posemb_injection=stem,every_layer',
       '--config.optimizer.learning_rate=0.01', '--print_commands'],
      cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS='cpu'), capture_output=True, text=True, check=True)
  commands = result.stdout.splitlines()
  assert len(commands) == 6 and not workdir.exists()
  expected = [(posemb, injection, seed) for posemb, injection in
              [('none', 'stem'), ('learn1d', 'stem'), ('learn1d', 'every_layer')] for seed in (0, 1)]
  for command, (posemb, injection, seed) in zip(commands, expected):
    argv = shlex.split(command)
    assert argv[:2] == ['python', 'train.py'] and (ROOT / argv[1]).exists()
    config, run_dir = _parse_train_command(argv[1:])
    assert run_dir == str(workdir / f'posemb={posemb},posemb_injection={injection},seed={seed}')
    assert (config.model.posemb, config.model.posemb_injection, config.seed) == (posemb, injection, seed)
    assert config.optimizer.learning_rate == 0.01 and config.total_steps == 3
