"""The minimum family of ``docs/adding_a_family.md`` trains and evaluates as the page says, and the
reporting protocol (``trainer.reporting``) gives it the generic table and no pictures."""

import re
import sys
import types

import pytest
from flax import nnx

from configs.common import trainer_config
from trainer.loop import train_and_evaluate
from trainer.reporting import Reporting
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


def test_the_minimum_family_trains_and_evaluates(signs, tmp_path):
  result = train_and_evaluate(_config(), tmp_path / 'run')
  assert result.step == 4 and 0.0 <= result.eval_metrics['accuracy'] <= 1.0


def test_tables_and_pictures_are_a_protocol_of_their_own_with_defaults(signs):
  task = load_task(_config())
  assert issubclass(Task, Reporting)
  assert not {'ablation_table', 'draw_pictures', 'percent_metrics', 'model_facts'} & set(vars(Task))
  assert signs.SignTask.ablation_table({}) is None and task.percent_metrics == ()
  assert (
    task.draw_pictures(task.make_model(nnx.Rngs(0)), None, 'run', 'title') == [] and task.model_facts() == {}
  )


def test_the_evaluation_names_are_part_of_the_contract(signs):
  class WithoutMetricNames(signs.SignTask):
    eval_metric_names = Task.eval_metric_names

  with pytest.raises(TypeError, match='eval_metric_names'):
    WithoutMetricNames(_config())
