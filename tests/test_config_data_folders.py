"""Every config whose data ``python -m pipelines.download`` fetches reads ``data/<name>`` by default, and
without that folder it fails in one line that names the folder and the command that fetches it."""

import importlib

import pytest

from pipelines import download
from pipelines.fetch_hint import FETCHABLE
from trainer.errors import MissingFileError
from trainer.task import load_task

CONFIGS = {
  'transformer_multi30k': 'multi30k',
  'transformer_multi30k_long': 'multi30k',
  'rnn_multi30k': 'multi30k',
  'vit_mnist': 'mnist',
  'vit_mnist_pretrain': 'mnist',
  'vit_cifar10': 'cifar10',
  'vit_cifar10_posemb': 'cifar10',
}


def _config(name):
  return importlib.import_module(f'configs.{name}').get_config()


def test_the_hint_knows_every_data_set_the_command_fetches():
  assert sorted(FETCHABLE) == sorted(download.DATA_SETS)


@pytest.mark.parametrize('name, data_set', CONFIGS.items())
def test_a_config_without_its_data_folder_names_it_and_the_download_command(
  name, data_set, tmp_path, monkeypatch
):
  monkeypatch.chdir(tmp_path)
  config = _config(name)
  assert config.data.path == f'data/{data_set}'
  with pytest.raises(MissingFileError) as raised:
    load_task(config)
  message = str(raised.value)
  assert '\n' not in message
  assert f'data/{data_set} does not exist' in message, message
  assert f'`python -m pipelines.download {data_set} --out data/{data_set}`' in message, message


def test_an_empty_multi30k_folder_says_what_it_lacks_and_how_to_fetch_it(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'data' / 'multi30k').mkdir(parents=True)
  (tmp_path / 'data' / 'multi30k' / 'train.de.gz.part').write_bytes(b'')  # an interrupted download
  with pytest.raises(MissingFileError) as raised:
    load_task(_config('transformer_multi30k'))
  assert str(raised.value) == (
    'data.path data/multi30k holds no de-en parallel text (<split>.de[.gz] beside <split>.en[.gz]); '
    'fetch it with `python -m pipelines.download multi30k --out data/multi30k` (or set --config.data.path)'
  )


def test_a_folder_of_another_name_is_named_without_a_command(tmp_path):
  config = _config('vit_mnist')
  config.data.path = str(tmp_path / 'digits')
  with pytest.raises(MissingFileError, match=r'IDX folder .*digits does not exist$'):
    load_task(config)
