"""Parameter regexes (``optimizer.frozen``, ``optimizer.weight_decay_regex``) select what they say or fail:
one naming a layer number under ``model.scan_layers`` is a config error, so is a ``frozen`` regex that
matches nothing, and the start-up line says what is frozen."""

import jax
import pytest
from flax import nnx

from tests.test_video_training import tiny_video_config
from tests.translation_test_configs import tiny_translation_config
from tests.vit_test_configs import tiny_vit_config
from trainer.errors import ConfigError
from trainer.optim import (
  default_optimizer_config,
  describe_frozen,
  frozen_paths,
  parameter_groups,
  parameter_path,
)
from trainer.task import load_task
from vit.model import make_vit

LAYER_REGEX_UNDER_SCAN = r'model.scan_layers stacks'


def _with(config, fields):
  """``config`` with each ``'section.field'`` set, new fields (``optimizer.frozen``) included."""
  for path, value in fields.items():
    section, name = path.split('.')
    config[section][name] = value
  return config


def _vit(**fields):
  return _with(tiny_vit_config(**{'model.depth': 2, 'model.scan_layers': True}), fields)


@pytest.mark.parametrize(
  'overrides',
  [
    {'optimizer.frozen': r'^encoder\.blocks\.[0-1]\.'},
    {'optimizer.frozen': r'blocks\.\d+\.mlp'},  # every layer alike, but only in the unrolled paths' form
    {'optimizer.weight_decay': 0.1, 'optimizer.weight_decay_regex': r'blocks\.1\..*kernel$'},
  ],
)
def test_a_regex_naming_layers_of_a_scanned_vit_is_a_one_line_config_error(overrides):
  with pytest.raises(ConfigError, match=LAYER_REGEX_UNDER_SCAN) as raised:
    load_task(_vit(**overrides))
  assert '\n' not in str(raised.value)
  field = 'frozen' if 'optimizer.frozen' in overrides else 'weight_decay_regex'
  assert f'config.optimizer.{field}' in str(raised.value)


def test_regexes_without_layer_numbers_are_fine_on_a_scanned_vit():
  load_task(_vit(**{'optimizer.frozen': r'^(?!head\.)'}))
  load_task(_vit(**{'optimizer.weight_decay': 0.1, 'optimizer.weight_decay_regex': r'mlp.*kernel$'}))
  load_task(_vit(**{'optimizer.weight_decay': 0.1}))  # the default 'kernel$'
  load_task(_with(tiny_vit_config(**{'model.depth': 2}), {'optimizer.frozen': r'^encoder\.blocks\.0\.'}))


def test_a_regex_naming_layers_of_a_scanned_video_model_or_translator_is_a_config_error():
  video = _with(tiny_video_config(), {'model.scan_layers': True, 'optimizer.frozen': r'layout\.blocks\.0\.'})
  with pytest.raises(ConfigError, match=LAYER_REGEX_UNDER_SCAN):
    load_task(video)
  translator = _with(
    tiny_translation_config(), {'model.scan_layers': True, 'optimizer.frozen': r'encoder\.blocks\.0\.'}
  )
  with pytest.raises(ConfigError, match=LAYER_REGEX_UNDER_SCAN):
    load_task(translator)


def _params(depth=2):
  section = dict(patch_size=4, width=8, depth=depth, num_heads=2, mlp_dim=16)
  return nnx.state(make_vit(section, num_classes=3, image_shape=(8, 8, 1), rngs=nnx.Rngs(0)), nnx.Param)


def test_a_frozen_regex_that_matches_no_parameter_is_a_config_error():
  config = default_optimizer_config()
  config.frozen = r'^backbone\.'
  with pytest.raises(ConfigError, match=r"config.optimizer.frozen '\^backbone\\\.' matches no parameter"):
    frozen_paths(config, _params())


def test_the_frozen_line_counts_arrays_and_values():
  params, config = _params(), default_optimizer_config()
  assert describe_frozen(config, params) is None
  config.frozen = r'^(?!head\.)'
  leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  frozen = [leaf.size for key, leaf in leaves if not parameter_path(key).startswith('head.')]
  total = sum(leaf.size for _, leaf in leaves)
  assert describe_frozen(config, params) == (
    f'frozen: {len(frozen)} of {len(leaves)} parameter arrays ({sum(frozen):,} of {total:,} values) '
    r"match '^(?!head\.)'"
  )


def _video_decay(layout, **fields):
  config = tiny_video_config(**{'model.attention': layout, 'model.depth': 2, 'model.temporal_depth': 2})
  return _with(config, {'optimizer.layer_decay': 0.5, **fields})


@pytest.mark.parametrize('layout', ['divided', 'factorised_encoder'])
def test_layer_decay_on_a_video_layout_whose_paths_misnumber_its_layers_is_a_config_error(layout):
  """The default ``blocks\\.(\\d+)\\.`` gives 'divided''s temporal sublayers no layer, and the factorised
  encoder's temporal blocks (the top of the network) the numbers of the spatial blocks below them."""
  with pytest.raises(ConfigError, match=f"does not number the {layout!r} layout's layers by depth") as raised:
    load_task(_video_decay(layout))
  assert '\n' not in str(raised.value)


def test_layer_decay_on_video_layouts_numbered_by_depth_gives_each_layer_its_rate():
  load_task(_video_decay('spacetime'))
  load_task(_video_decay('factorised_dot_product'))
  task = load_task(_video_decay('divided', **{'optimizer.layer_regex': r'(?:blocks|temporal)\.(\d+)\.'}))
  params = nnx.state(task.make_model(nnx.Rngs(0)), nnx.Param)
  groups = parameter_groups(task.config.optimizer, params)
  assert groups['layout.temporal.1.attention.out.kernel'] == groups['layout.blocks.1.mlp.fc1.kernel'] == 0.5
  assert groups['layout.temporal.0.attention.out.kernel'] == groups['layout.blocks.0.mlp.fc1.kernel'] == 0.25
  assert groups['head.kernel'] == 1.0
  relative = _video_decay('spacetime', **{'model.temporal_posemb': 'relative'})  # a time bias per layer
  with pytest.raises(ConfigError, match="'layout.time_biases.0.table' is in layer 0, the regex says None"):
    load_task(relative)
  relative.optimizer.layer_regex = r'(?:blocks|time_biases)\.(\d+)\.'
  load_task(relative)
