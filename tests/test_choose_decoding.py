"""``seq2seq.choose_decoding``: the setting is chosen on one split and scored once on another."""

import json
import subprocess
import sys

import pytest

from seq2seq import choose_decoding
from tests.translation_test_configs import tiny_translation_config
from trainer.errors import ConfigError


def test_greedy_is_tried_once_and_the_order_is_the_tie_rule():
  assert choose_decoding.settings([4, 1, 2], [1.0, 0.6]) == [(1, 0.6), (2, 0.6), (2, 1.0), (4, 0.6), (4, 1.0)]
  assert choose_decoding.parse_settings(['5', '1'], ['1'], ['0.6']) == ([1, 5], [(1, 0.6)])
  with pytest.raises(ConfigError, match='beam sizes >= 1'):
    choose_decoding.parse_settings(['1'], ['0'], ['0.6'])
  with pytest.raises(ConfigError, match='checkpoint counts >= 1'):
    choose_decoding.parse_settings(['0'], ['1'], ['0.6'])
  with pytest.raises(ConfigError, match='--beam_sizes take whole numbers'):
    choose_decoding.parse_settings(['1'], ['two'], ['0.6'])


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
  from trainer.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top

  config = tiny_translation_config(total_steps=6, eval_every_steps=6, checkpoint_every_steps=3)
  config.data.holdout = 40
  path = tmp_path_factory.mktemp('choose') / 'run'
  train_and_evaluate(config, path)
  return path


def test_chosen_on_holdout_then_scored_once_on_test(workdir, monkeypatch):
  from seq2seq.task import Translation  # pylint: disable=g-import-not-at-top

  translated = []
  evaluate = Translation.extra_evaluation

  def counted(self, model, split, output_dir, devices):
    translated.append((split, self.config.decode.beam_size, self.config.decode.alpha))
    return evaluate(self, model, split, output_dir, devices)

  monkeypatch.setattr(Translation, 'extra_evaluation', counted)
  tried = choose_decoding.settings([1, 2], [0.6, 1.0])
  result = choose_decoding.choose(workdir, 'holdout', 'test', tried, average_last=(1, 2))
  assert translated[:-1] == [('holdout', beam, alpha) for beam, alpha in tried] * 2
  assert [row['averaged_checkpoints'] for row in result['table']] == [1] * 3 + [2] * 3
  best = max(result['table'], key=lambda row: row['bleu'])
  assert result['chosen'] == {name: best[name] for name in ('averaged_checkpoints', 'beam_size', 'alpha')}
  assert translated[-1] == ('test', best['beam_size'], best['alpha'])
  assert set(result['reported']) >= {'bleu', 'chrf', 'exact_match'}
  assert result['step'] == 6


def test_bad_splits_are_one_line(workdir):
  with pytest.raises(ConfigError, match="--report_on is 'holdout', the split the setting is chosen on"):
    choose_decoding.choose(workdir, 'holdout', 'holdout', [(1, 0.6)])
  with pytest.raises(ConfigError, match="--choose_on is 'valid'; this data has the splits"):
    choose_decoding.choose(workdir, 'valid', None, [(1, 0.6)])


@pytest.mark.slow
def test_the_command_prints_and_keeps_its_json(workdir):
  command = [sys.executable, '-m', 'seq2seq.choose_decoding', f'--workdir={workdir}', '--beam_sizes=1,2']
  run = subprocess.run(command, capture_output=True, text=True, check=False)
  assert run.returncode == 0, run.stderr
  result = json.loads(run.stdout.strip().splitlines()[-1])
  assert [row['beam_size'] for row in result['table']] == [1, 2, 2]
  assert 'reported' not in result
  assert json.loads((workdir / 'decoding_holdout_step6.json').read_text())['chosen'] == result['chosen']
