"""A bad config, config file or workdir: one line naming the field, exit status 2, nothing written.

``COMMAND_LINE_CASES`` run ``train.py`` itself: a problem of each kind (the config file, an override
``config_flags`` refuses, a field the trainer's checks refuse, one the task's refuse) ends as one
line and status 2. ``FIELD_CASES`` run the same checks as ``train.py``, in order, in the test
process (``_train_in_process``): each must be one ``UserError`` naming its field, before anything is
written. The rest call the checks directly.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from tests.xla_flags import with_host_devices
from trainer import validation
from trainer.command_line import cli
from trainer.errors import ConfigError, UserError, WorkdirError
from trainer.io import workdir as workdir_lib

REPO = pathlib.Path(__file__).resolve().parent.parent
VIT = 'configs/vit_digits.py'
SCAN = 'configs/transformer_scan.py'


def _refused(field: str, value: str) -> tuple:
  """The case of a value the checks refuse: the message names the field and the value."""
  return VIT, [f'--config.{field}={value}'], f'config.{field} is {value}'


# (config file, overrides, what the one-line message must contain)
COMMAND_LINE_CASES = {
  'missing config file': ('configs/nosuch.py', [], 'nosuch.py not found'),
  'syntax error': ('{tmp}/syntax.py', [], 'syntax.py, line 1: syntax error'),
  'no get_config': ('{tmp}/noget.py', [], 'noget.py has no get_config'),
  'unknown field': (VIT, ['--config.nosuchfield=1'], 'config.nosuchfield'),
  'unknown nested field': (VIT, ['--config.model.nosuchfield=1'], 'config.model.nosuchfield'),
  'ill-typed field': (VIT, ['--config.batch_size=abc'], 'config.batch_size'),
  'batch_size 0': _refused('batch_size', '0'),
  'eval_split unknown': (VIT, ['--config.eval_split=nosuch'], 'config.eval_split is'),
  'packing not true or false': (SCAN, ['--config.data.packing=maybe'], 'config.data.packing'),
}
FIELD_CASES = {
  'batch_size negative': _refused('batch_size', '-8'),
  'eval_batch_size 0': _refused('eval_batch_size', '0'),
  'seed negative': _refused('seed', '-1'),
  'checkpoint_every_steps 0': _refused('checkpoint_every_steps', '0'),
  'log_every_steps 0': _refused('log_every_steps', '0'),
  'eval_every_steps 0': _refused('eval_every_steps', '0'),
  'grad_accum_steps 0': _refused('grad_accum_steps', '0'),
  'grad_accum_steps not dividing': (VIT, ['--config.grad_accum_steps=3'], 'config.grad_accum_steps (3)'),
  'learning rate negative': _refused('optimizer.learning_rate', '-0.1'),
  'learning rate nan': _refused('optimizer.learning_rate', 'nan'),
  'total_steps negative': _refused('total_steps', '-5'),
  'num_epochs negative': _refused('num_epochs', '-1'),
  'no duration': (VIT, ['--config.num_epochs=0'], 'config.total_steps and config.num_epochs'),
  'warmup_steps negative': _refused('optimizer.warmup_steps', '-1'),
  'keep_checkpoints 0': _refused('keep_checkpoints', '0'),
  'unknown optimizer': (VIT, ['--config.optimizer.name=adam'], 'config.optimizer.name is'),
  'unknown schedule': (VIT, ['--config.optimizer.schedule=step'], 'config.optimizer.schedule is'),
  'unknown best_mode': (VIT, ['--config.best_mode=up'], 'config.best_mode is'),
  'b2 of 1': _refused('optimizer.b2', '1.0'),
  'label smoothing 1': _refused('label_smoothing', '1.0'),
  'task not module:Class': (VIT, ['--config.task=vit.task'], 'config.task is'),
  'eval_split is a path': (SCAN, ['--config.eval_split=../../../outside'], 'config.eval_split is'),
  'train_split is a path': (SCAN, ['--config.data.train_split=/etc/passwd'], 'config.data.train_split is'),
  'language is a path': (SCAN, ['--config.data.src_lang=../../outside'], 'config.data.src_lang is'),
  'mesh.model 0': _refused('mesh.model', '0'),
  'packing the RNN': (
    'configs/rnn_scan.py',
    ['--config.data.packing=True'],
    'data.packing is for the Transformer',
  ),
  # These build the task (it finds the data).
  'mesh.model not dividing the devices': _refused('mesh.model', '3'),
  'best_metric unknown': (VIT, ['--config.best_metric=nosuch'], 'config.best_metric is'),
}


def _train(tmp_path, config, overrides, workdir):
  (tmp_path / 'syntax.py').write_text('def get_config(:\n')
  (tmp_path / 'noget.py').write_text('x = 1\n')
  command = [
    sys.executable,
    'train.py',
    f'--config={config.format(tmp=tmp_path)}',
    *overrides,
    f'--workdir={workdir}',
  ]
  return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def _error_lines(stderr: str) -> list[str]:
  """stderr without the lines libraries print while they load."""
  return [
    line
    for line in stderr.splitlines()
    if line.strip() and not line.startswith(('WARNING: All log messages', 'I0000', 'W0000'))
  ]


def _train_in_process(config_file, overrides, workdir):
  """What ``train.py`` does before it trains: the config file with the overrides (as
  ``config_flags`` applies them), the trainer's checks, the workdir's, then the training, whose own
  checks (the task's, the mesh's) come before it writes anything."""
  from trainer.loop import train_and_evaluate

  argv = ['train.py', f'--config={REPO / config_file}', *overrides]
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file('config', flag_values=flag_values, lock_config=True, sys_argv=argv)
  flag_values(argv)
  config = flag_values.config
  validation.check_trainer_fields(config)
  validation.check_workdir(workdir)
  train_and_evaluate(config, workdir)


@pytest.mark.slow
@pytest.mark.parametrize(
  'config, overrides, message', COMMAND_LINE_CASES.values(), ids=COMMAND_LINE_CASES.keys()
)
def test_bad_config_is_one_line_exit_2_and_writes_nothing(tmp_path, config, overrides, message):
  workdir = tmp_path / 'run'
  result = _train(tmp_path, config, overrides, workdir)
  assert result.returncode == 2, result.stderr
  lines = _error_lines(result.stderr)
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
  assert message in lines[0]
  assert not workdir.exists()


@pytest.mark.parametrize('config, overrides, message', FIELD_CASES.values(), ids=FIELD_CASES.keys())
def test_a_bad_field_is_one_user_error_before_anything_is_written(tmp_path, config, overrides, message):
  workdir = tmp_path / 'run'
  with pytest.raises(UserError) as error:
    _train_in_process(config, overrides, workdir)
  assert message in str(error.value) and '\n' not in str(error.value)
  assert not workdir.exists()


@pytest.mark.slow
def test_micro_batches_must_divide_each_devices_rows(tmp_path):
  """8 rows over 4 devices is 2 a device: 4 micro-batches would take rows from two devices."""
  env = dict(os.environ, XLA_FLAGS=with_host_devices(4), JAX_PLATFORMS='cpu')
  workdir = tmp_path / 'run'
  overrides = ['--config.batch_size=8', '--config.grad_accum_steps=4', '--config.eval_batch_size=8']
  command = [sys.executable, 'train.py', f'--config={VIT}', *overrides, f'--workdir={workdir}']
  result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stderr
  lines = _error_lines(result.stderr)
  assert lines == [
    'error: config.grad_accum_steps (4) must divide the rows each device gets: '
    'batch_size (8) / data x fsdp (4) = 2.'
  ], result.stderr
  assert not workdir.exists()


@pytest.mark.slow
def test_workdir_that_is_a_file(tmp_path):
  workdir = tmp_path / 'run'
  workdir.write_text('not a folder')
  result = _train(tmp_path, VIT, [], workdir)
  assert result.returncode == 2, result.stderr
  assert _error_lines(result.stderr) == [
    f'error: workdir {workdir} exists and is not a folder; choose another --workdir.'
  ]
  assert workdir.read_text() == 'not a folder'


@pytest.mark.slow
@pytest.mark.parametrize(
  'flag, message',
  [
    ('--split=../../outside', "--split is '../../outside'"),
    ('--batch_size=0', '--batch_size=0'),
    ('--average_last=0', '--average_last=0'),
  ],
)
def test_evaluate_flags(tmp_path, flag, message):
  command = [sys.executable, 'evaluate.py', f'--workdir={tmp_path}', flag]
  result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stderr
  lines = _error_lines(result.stderr)
  assert len(lines) == 1 and lines[0].startswith('error: ') and message in lines[0]
  assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_damaged_config_json_is_named_and_kept(tmp_path):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / 'config.json').write_text('{"task": "vit.task:Image')
  result = _train(tmp_path, VIT, [], workdir)
  assert result.returncode == 2, result.stderr
  lines = _error_lines(result.stderr)
  assert len(lines) == 1 and lines[0].startswith(f'error: {workdir / "config.json"} is damaged'), (
    result.stderr
  )
  assert [path.name for path in workdir.iterdir()] == ['config.json']
  assert (workdir / 'config.json').read_text() == '{"task": "vit.task:Image'


def test_workdir_that_cannot_be_written(tmp_path, monkeypatch):
  # A read-only file system answers os.access(..., W_OK) with False, even for root.
  monkeypatch.setattr(os, 'access', lambda path, mode: False)
  with pytest.raises(WorkdirError, match='not writable'):
    validation.check_workdir(tmp_path)
  with pytest.raises(WorkdirError, match='cannot be created'):
    validation.check_workdir(tmp_path / 'new' / 'run')
  assert not (tmp_path / 'new').exists()


def test_damaged_config_json_is_named(tmp_path):
  (tmp_path / 'config.json').write_text('{"task": "vit.task:Image')
  with pytest.raises(WorkdirError, match=f'{tmp_path / "config.json"} is damaged'):
    workdir_lib.load_config(tmp_path)
  from tests.vit_test_configs import tiny_vit_config

  with pytest.raises(WorkdirError, match='config.json is damaged'):
    workdir_lib.check_same_identity(tmp_path, tiny_vit_config())


def test_resume_ignores_where_the_data_lies_and_how_fast_it_is_read(tmp_path):
  from tests.vit_test_configs import tiny_vit_config

  workdir_lib.save_config(tmp_path, tiny_vit_config())
  moved = tiny_vit_config(
    **{
      'data.path': '/elsewhere',
      'data.num_threads': 1,
      'data.cache_dir': '/cache',
      'data.prefetch_batches': 1,
    }
  )
  workdir_lib.check_same_identity(tmp_path, moved)
  with pytest.raises(WorkdirError, match='data.augment.crop_padding'):
    workdir_lib.check_same_identity(tmp_path, tiny_vit_config(**{'data.augment.crop_padding': 0}))


def test_a_field_newer_than_the_workdir_is_named_with_the_way_to_resume(tmp_path):
  from tests.vit_test_configs import tiny_vit_config

  config = tiny_vit_config()
  workdir_lib.save_config(tmp_path, config)
  saved = json.loads((tmp_path / 'config.json').read_text())
  del saved['model']['activation']  # as if written before the field existed
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  with pytest.raises(
    WorkdirError, match=r"has no model.activation .*'gelu' now\. If that is what the run used"
  ):
    workdir_lib.check_same_identity(tmp_path, config)
  saved['model']['activation'] = 'gelu'
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  workdir_lib.check_same_identity(tmp_path, config)


def test_only_user_errors_are_one_line(capsys):
  def bug():
    raise ValueError('a shape bug inside a library')

  with pytest.raises(ValueError, match='shape bug'):
    cli.run_reporting_user_errors(bug)
  with pytest.raises(KeyError, match='missing'):
    cli.run_reporting_user_errors({}.__getitem__, 'missing')

  def mistake():
    raise ConfigError('config.seed is -1; it must be >= 0.')

  with pytest.raises(SystemExit) as exit_info:
    cli.run_reporting_user_errors(mistake)
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == 'error: config.seed is -1; it must be >= 0.\n'


def test_task_checks_split_and_metric_names():
  from tests.vit_test_configs import tiny_vit_config
  from trainer.task import load_task

  task = load_task(tiny_vit_config())
  assert set(task.eval_split_names()) == {'train', 'test'}
  assert set(task.eval_metric_names()) == {'loss', 'accuracy'}
  with pytest.raises(ConfigError, match='model: '):
    load_task(tiny_vit_config(**{'model.num_heads': 3}))
  with pytest.raises(ConfigError, match='split'):
    next(task.eval_batches('../test', batch_size=8, process_index=0, process_count=1))


def test_translator_split_is_a_name_not_a_path(tmp_path):
  from tests.translation_test_configs import tiny_parallel_config
  from trainer.task import load_task

  corpus, outside = tmp_path / 'data' / 'corpus', tmp_path / 'data'
  for directory, split in ((corpus, 'train'), (corpus, 'val'), (outside, 'outside')):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f'{split}.de').write_text('ein Hund .\n' * 4)
    (directory / f'{split}.en').write_text('a dog .\n' * 4)
  task = load_task(tiny_parallel_config(corpus))
  assert task.eval_split_names() == ('train', 'val')
  assert 'bleu' in task.eval_metric_names()
  with pytest.raises(ConfigError, match='plain name'):
    task.eval_pairs('../outside')
  with pytest.raises(UserError, match="split 'test'"):
    load_task(tiny_parallel_config(corpus, eval_split='test'))


def _fields(config, prefix=''):
  names = set()
  for key, value in config.items():
    names |= _fields(value, f'{prefix}{key}.') if hasattr(value, 'items') else {prefix + key}
  return names


@pytest.mark.parametrize(
  'name',
  sorted(path.stem for path in (REPO / 'configs').glob('*.py') if 'def get_config' in path.read_text()),
)
def test_every_config_is_complete_and_valid(name):
  """A config states what differs; its ``get_config()`` has every field of the trainer and of its
  family's sections (the optional ones where it writes them), and nothing else."""
  import importlib

  from configs.common import trainer_config

  config = importlib.import_module(f'configs.{name}').get_config()
  if config.task == 'vit.task:ImageClassification':
    from vit import distillation, input_pipeline, model, pretrained
    from vit import task as vit_task

    sections = dict(data=input_pipeline.default_data_config(), model=model.model_section({}))
    # optional sections: written out whole where a config has them
    if 'init_from' in config:
      sections['init_from'] = pretrained.default_init_from_config()
    if 'fewshot' in config:
      sections['fewshot'] = vit_task.default_fewshot_config()
    if 'distill' in config:
      sections['distill'] = distillation.default_distill_config()
  elif config.task == 'video.task:VideoClassification':
    from video import input_pipeline, model

    sections = dict(data=input_pipeline.default_data_config(), model=model.model_section({}))
  else:
    from seq2seq import architectures, task

    model_section = architectures.model_section(
      {'architecture': config.model.architecture} if 'architecture' in config.model else {}
    )
    sections = dict(data=task.default_data_config(), model=model_section, decode=task.default_decode_config())
  assert _fields(config) == _fields(trainer_config()) | _fields(sections)
  validation.check_trainer_fields(config)


def test_a_config_that_lacks_fields_gets_their_defaults():
  """Once every field had to be written; now the trainer's and the family's defaults fill the rest."""
  import ml_collections

  from trainer.task import task_class

  config = ml_collections.ConfigDict(
    dict(
      task='vit.task:ImageClassification',
      num_epochs=1.0,
      model=dict(width=32),
      data=dict(augment=dict(flip=True)),
    )
  )
  validation.resolve_config(config, task_class(config.task))
  assert config.batch_size == 128 and config.optimizer.name == 'adamw' and config.mesh.data == -1
  assert config.label_smoothing == 0.0 and config.ema.decay == 0.0 and config.wandb.project == ''
  assert config.model.width == 32 and config.model.depth == 6  # given, and vit.model's default
  assert config.data.augment.flip and config.data.augment.crop_ratio == (3 / 4, 4 / 3)
  assert 'init_from' not in config and 'fewshot' not in config  # optional sections stay absent
  with pytest.raises(ConfigError, match=r'unknown config field data\.nosuch; the fields of data are'):
    validation.resolve_config(
      ml_collections.ConfigDict(dict(task=config.task, num_epochs=1.0, data=dict(nosuch=1))),
      task_class(config.task),
    )
  with pytest.raises(ConfigError, match=r'config\.data\.augment\.flip is 1; it must be True or False'):
    validation.resolve_config(
      ml_collections.ConfigDict(dict(task=config.task, num_epochs=1.0, data=dict(augment=dict(flip=1)))),
      task_class(config.task),
    )


@pytest.mark.parametrize(
  'field, value, message',
  [
    ('label_smoothing', 1.0, 'config.label_smoothing is 1.0; it must be a number in [0, 1)'),
    ('num_epochs', float('inf'), 'config.num_epochs is inf; it must be a finite number >= 0'),
    ('optimizer.learning_rate', 0.0, 'config.optimizer.learning_rate is 0.0; it must be a finite number > 0'),
    ('optimizer.layer_decay', 1.5, 'config.optimizer.layer_decay is 1.5; it must be a number in (0, 1]'),
    ('optimizer.name', 'adam', "config.optimizer.name is 'adam'; allowed values: adamw, sgd"),
    ('mesh.data', 0, 'config.mesh.data is 0; it must be -1 (all devices left) or >= 1'),
    ('batch_size', 'big', "config.batch_size is 'big'; it must be an integer"),
    ('eval_splits', ('test', 'test'), "config.eval_splits is ('test', 'test'); each split may be named once"),
    ('profile_steps', (3, 2), 'config.profile_steps is (3, 2); it must be a tuple of step numbers >= 1'),
    ('wandb.name', ' run', "config.wandb.name is ' run'; it must be a name without surrounding spaces"),
  ],
)
def test_the_schema_checks_each_trainer_field_in_one_place(field, value, message):
  import ml_collections

  config = ml_collections.ConfigDict(dict(task='vit.task:ImageClassification', num_epochs=1.0))
  *sections, name = field.split('.')
  section = config
  for part in sections:
    section[part] = section.get(part) or ml_collections.ConfigDict()
    section = section[part]
  section[name] = value
  with pytest.raises(ConfigError) as error:
    validation.check_trainer_fields(config)
  assert str(error.value).startswith(message) and '\n' not in str(error.value)
