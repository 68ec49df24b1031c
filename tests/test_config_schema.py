"""A config states what differs: ``configs.common.experiment`` completes it, and the command line still
sets every field, the ones a config does not write included."""

import pathlib

import ml_collections
import pytest
from absl import flags
from ml_collections import config_flags

from configs.common import experiment, unset
from trainer import config_schema, validation
from trainer.errors import ConfigError
from trainer.task import Task, task_class

REPO = pathlib.Path(__file__).resolve().parent.parent


def _load(config_file: str, *overrides: str) -> ml_collections.ConfigDict:
  """The config ``train.py`` would get (its ``--config`` flag, in a fresh flag registry)."""
  argv = ['train.py', f'--config={REPO / config_file}', *overrides]
  registry = flags.FlagValues()
  config = config_flags.DEFINE_config_file(
    'config', None, flag_values=registry, lock_config=True, sys_argv=argv
  )
  registry(argv)
  return config.value


def test_the_command_line_sets_fields_a_config_does_not_write():
  config = _load(
    'configs/vit_digits.py',
    '--config.model.posemb=sincos2d',  # a model default
    '--config.data.path=/elsewhere',  # a typed field without a value
    '--config.data.image_size=(16,16)',
    '--config.optimizer.frozen=^(?!head\\.)',  # a trainer default
    '--config.wandb.project=lab',
  )
  assert config.model.posemb == 'sincos2d' and config.data.path == '/elsewhere'
  assert tuple(config.data.image_size) == (16, 16) and config.optimizer.frozen == '^(?!head\\.)'
  assert config.wandb.project == 'lab'
  translator = _load('configs/transformer_scan.py', '--config.data.tokenizer.model_file=/m.model')
  assert translator.data.tokenizer.model_file == '/m.model'
  finetune = _load('configs/vit_digits_finetune.py', '--config.init_from.path=')
  assert finetune.init_from.path == '' and finetune.data.path is None  # unset(str) over the base's path


def test_experiment_keeps_the_base_and_fills_what_it_lacks():
  base = experiment('vit.task:ImageClassification', num_epochs=2.0, model=dict(width=32))
  assert base.batch_size == config_schema.Trainer.batch_size and base.model.width == 32
  derived = experiment(base, batch_size=64, model=dict(depth=2), fewshot=dict(shots=(5,)))
  assert derived.batch_size == 64 and derived.model.width == 32 and derived.model.depth == 2
  assert derived.fewshot.shots == (5,) and derived.fewshot.seeds == 3  # an optional section, completed
  assert experiment('vit.task:ImageClassification', data=dict(path=unset(str))).data.path is None


def test_a_section_reader_error_names_the_field():
  with pytest.raises(ConfigError, match=r'config\.decode\.beam_size is 1\.5; it must be an integer'):
    experiment('seq2seq.task:Translation', total_steps=1, decode=dict(beam_size=1.5))
  with pytest.raises(ConfigError, match=r"model: unknown field 'widht'"):
    experiment('vit.task:ImageClassification', num_epochs=1.0, model=dict(widht=3))


def test_a_family_without_sections_keeps_its_own_fields_as_they_are():
  class Bare(Task):
    pass

  config = ml_collections.ConfigDict(dict(task='x:Bare', total_steps=1, model=dict(anything=1)))
  validation.resolve_config(config, Bare)
  assert config.model.to_dict() == {'anything': 1} and config.optimizer.name == 'adamw'


def test_the_translator_model_section_follows_its_architecture():
  rnn = experiment('seq2seq.task:Translation', total_steps=1, model=dict(architecture='rnn'))
  assert 'encoder_hidden' in rnn.model and 'num_heads' not in rnn.model
  transformer = experiment('seq2seq.task:Translation', total_steps=1)
  assert 'num_heads' in transformer.model and 'architecture' not in transformer.model  # as 0.4 recorded
  assert task_class(transformer.task).config_sections.keys() == {'model', 'data', 'decode'}
