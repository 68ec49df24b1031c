"""The minimum family of ``docs/adding_a_family.md`` trains and evaluates as the page says; without
the optional protocols it gets the generic table and no pictures (``trainer.observe.reporting``), and
``predict.py`` says in one line that it cannot predict (``trainer.prediction``)."""

import re
import sys
import types

import pytest
from flax import nnx

from configs.common import trainer_config
from trainer.errors import ConfigError, WorkdirError
from trainer.loop import train_and_evaluate
from trainer.observe.reporting import reporting_of
from trainer.predictor import load_predictor
from trainer.task import Task, load_task

PAGE = 'docs/adding_a_family.md'


@pytest.fixture(scope='module')
def signs():
  """The page's code, as the module ``signs_task`` (what ``config.task`` imports)."""
  with open(PAGE) as page:
    section = page.read().split('## The minimum family', 1)[1]
  code = re.search(r'```python\n(.*?)```', section, re.S).group(1)
  module = types.ModuleType('signs_task')
  sys.modules['signs_task'] = module
  exec(compile(code, PAGE, 'exec'), module.__dict__)  # pylint: disable=exec-used
  yield module
  del sys.modules['signs_task']


def _config():
  config = trainer_config()
  config.task = 'signs_task:SignTask'
  config.update(batch_size=16, eval_batch_size=16, total_steps=4, log_every_steps=2, eval_every_steps=4)
  config.update(checkpoint_every_steps=4)
  config.optimizer.learning_rate = 0.1
  return config


def test_the_minimum_family_trains_and_evaluates_and_says_it_cannot_predict(signs, tmp_path):
  result = train_and_evaluate(_config(), tmp_path / 'run')
  assert result.step == 4 and 0.0 <= result.eval_metrics['accuracy'] <= 1.0
  with pytest.raises(
    WorkdirError, match=r'its task \(SignTask\) cannot predict: it has no prediction protocol'
  ):
    load_predictor(tmp_path / 'run')


def test_prediction_and_reporting_are_optional_protocols_held_by_composition(signs):
  task = load_task(_config())
  assert task.prediction is None and task.reporting is None and task.sizes is None
  protocols = {'read_input', 'predict', 'present', 'explain', 'class_names', 'input_names'}
  protocols |= {'ablation_table', 'draw_pictures', 'percent_metrics', 'model_facts'}
  assert not protocols & set(dir(Task))
  defaults = reporting_of(signs.SignTask)
  assert defaults.ablation_table({}) is None and defaults.percent_metrics == ()
  model = task.make_model(nnx.Rngs(0))
  assert defaults.draw_pictures(task, model, None, 'run', 'title') == [] and defaults.model_facts(task) == {}
  with pytest.raises(ConfigError, match='SignTask cannot be built without its data: it has no Sizes record'):
    signs.SignTask.without_data(_config(), {})


def test_the_evaluation_names_are_part_of_the_contract(signs):
  """The split names are the family's to give; the metric names are, by default, ``eval_metrics``' fields."""

  class WithoutSplitNames(signs.SignTask):
    eval_split_names = Task.eval_split_names

  with pytest.raises(TypeError, match='eval_split_names'):
    WithoutSplitNames(_config())
  assert signs.SignTask(_config()).eval_metric_names() == ('loss', 'accuracy')
