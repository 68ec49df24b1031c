"""The MNIST-to-digits chain's steps: numbers from a step's last line, refusals, the few-shot numbers."""

import json

import pytest

from benchmarks import mnist_to_digits


def test_a_step_gives_the_json_object_on_its_last_line():
  numbers, seconds = mnist_to_digits.run_step(
    'ok', ['-c', 'print("hello"); print(\'{"accuracy": 0.5, "step": 3}\')'], needs=('accuracy',)
  )
  assert numbers == {'accuracy': 0.5, 'step': 3} and seconds > 0


def test_a_step_that_fails_or_prints_no_numbers_stops_the_chain_naming_it():
  with pytest.raises(SystemExit, match='failing: .* exited with status 3'):
    mnist_to_digits.run_step('failing', ['-c', 'raise SystemExit(3)'])
  with pytest.raises(SystemExit, match='quiet: .* printed no JSON object with accuracy'):
    mnist_to_digits.run_step('quiet', ['-c', 'print("done")'], needs=('accuracy',))


def test_the_few_shot_numbers_are_the_last_evaluation_that_logged_them(tmp_path):
  entries = [
    {'step': 100, 'split': 'eval', 'accuracy': 0.5, 'fewshot_1shot': 0.2},
    {'step': 150, 'split': 'train', 'loss': 0.3},
    {'step': 200, 'split': 'eval', 'accuracy': 0.7, 'fewshot_1shot': 0.4, 'fewshot_1shot_std': 0.1},
  ]
  (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(entry) + '\n' for entry in entries))
  assert mnist_to_digits.last_fewshot(tmp_path) == {'fewshot_1shot': 0.4, 'fewshot_1shot_std': 0.1}
  (tmp_path / 'metrics.jsonl').write_text(json.dumps(entries[1]) + '\n')
  with pytest.raises(SystemExit, match='logged no few-shot evaluation'):
    mnist_to_digits.last_fewshot(tmp_path)
