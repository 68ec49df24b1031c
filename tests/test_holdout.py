"""``data.holdout``: training pairs moved to the split 'holdout', a fixed draw, to choose by instead of test."""

import pytest

from ablation import sweep, tables
from seq2seq import config_sections as sections
from seq2seq.sources import HOLDOUT_SPLIT, open_source
from seq2seq.task import Translation
from tests.translation_test_configs import tiny_translation_config
from trainer.errors import ConfigError
from trainer.io.metrics_io import read_metrics


def scan_data(**fields):
  """A complete ``data`` section, read as a config's is."""
  return sections.SECTIONS['data'](dict(source='scan', split='simple', **fields))


def test_held_out_pairs_leave_training_and_are_the_same_draw_every_time():
  whole = open_source(scan_data()).read('train')
  source = open_source(scan_data(holdout=500))
  held, kept = source.read(HOLDOUT_SPLIT), source.read('train')
  assert set(source.split_names()) == {'holdout', 'test', 'train'}
  assert len(held) == 500 and len(kept) == len(whole) - 500
  assert sorted(held + kept) == sorted(whole)
  assert not set(held) & set(kept)
  assert open_source(scan_data(holdout=500)).read(HOLDOUT_SPLIT) == held
  assert open_source(scan_data(holdout=500)).read('test') == open_source(scan_data()).read('test')
  # Not the first pairs of the file: a draw over the whole split.
  assert held != whole[:500]


def test_no_holdout_is_the_source_itself():
  source = open_source(scan_data(holdout=0))
  assert set(source.split_names()) == {'test', 'train'}


@pytest.mark.parametrize(
  'value, message',
  [
    (-1, 'it must be a whole number of pairs >= 0'),
    (2.5, 'it must be an integer'),
    (True, 'it must be an integer'),
    ('10', 'it must be an integer'),
  ],
)
def test_a_holdout_that_is_not_a_count_is_refused(value, message):
  with pytest.raises(ConfigError, match=f'^config.data.holdout is {value!r}; {message}'):
    scan_data(holdout=value)


def test_a_holdout_as_large_as_the_training_split_is_refused():
  source = open_source(scan_data(holdout=10**6))
  with pytest.raises(ConfigError, match='data.holdout is 1000000, but the training split'):
    source.read('train')


def test_the_task_trains_without_the_held_out_pairs_and_evaluates_on_them():
  config = tiny_translation_config(eval_split='holdout')
  config.data.holdout = 200
  task = Translation(config)
  assert 'holdout' in task.eval_split_names()
  assert len(task.eval_pairs('holdout')) == 48  # max_eval_examples
  held = set(open_source(config.data).read(HOLDOUT_SPLIT))
  assert len(held) == 200 and not held & set(task.train_pairs)


def test_a_sweep_with_eval_splits_shows_the_first_split_and_keeps_the_others():
  config = tiny_translation_config(eval_split='test', eval_splits=('holdout', 'test'))
  config.data.holdout = 200
  metrics = {'holdout_exact_match': 0.9, 'holdout_loss': 0.1, 'test_exact_match': 0.8, 'test_loss': 0.2}
  record = sweep._metrics_record(config, 4, metrics)
  assert record == dict(exact_match=0.9, loss=0.1, test_exact_match=0.8, test_loss=0.2, step=4) | dict(
    split='holdout', checkpoint='latest'
  )


@pytest.mark.slow  # trains a tiny translator
def test_a_sweep_chooses_on_the_held_out_split_and_reports_test_beside_it(tmp_path):
  config = tiny_translation_config(eval_split='test', eval_splits=('holdout', 'test'))
  config.data.holdout = 200
  summary = sweep.run_sweep(sweep.plan_sweep(config, ['total_steps=2'], 1, tmp_path), log=lambda _: None)
  assert summary['eval_split'] == 'holdout' and summary['best_metric'] == 'exact_match'
  assert summary['logged_metric'] == 'holdout_exact_match'  # the name the curves read
  for run in summary['runs']:
    assert {'exact_match', 'bleu', 'test_exact_match', 'test_bleu'} <= set(run['metrics'])
    logged = [record for record in read_metrics(tmp_path / run['name']) if record.get('split') == 'eval']
    assert logged and all(summary['logged_metric'] in record for record in logged)
  table = tables.markdown(summary)
  assert (
    'Translation: holdout metrics' in table and '| exact_match |' in table and '| test_exact_match |' in table
  )
  assert 'not run' not in table
