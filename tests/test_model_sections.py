"""Each family builds its model one way, from its ``config.model`` section: every default lives in the
family's options dataclass, a section that lacks a field gets that default, a field the family does
not have or a value of the wrong type is a one-line error naming it, and options reach the modules
when they are built."""

import dataclasses
import inspect

import numpy as np
import pytest
from flax import nnx

from attention import Encoder
from attention.positional import PositionalEncoding, big_vision_sincos_2d, sincos_2d_table
from attention.stacks import StackOptions
from seq2seq import architectures, rnn_model
from seq2seq import model as transformer_model
from tests.vit_test_configs import tiny_vit_config
from trainer.config_sections import to_section
from trainer.errors import ConfigError
from trainer.task import load_task
from video import model as video_model
from vit import model as vit_model

# family -> (model class, its options, its model_section, a small section, build(section or options))
FAMILIES = {
  'vit': (
    vit_model.VisionTransformer,
    vit_model.ViTOptions,
    vit_model.model_section,
    dict(width=8, depth=1, num_heads=2, mlp_dim=16, patch_size=4),
    lambda section: vit_model.make_vit(section, num_classes=3, image_shape=(8, 8, 1), rngs=nnx.Rngs(0)),
  ),
  'video': (
    video_model.VideoTransformer,
    video_model.VideoOptions,
    video_model.model_section,
    dict(width=8, depth=1, temporal_depth=1, num_heads=2, mlp_dim=16, tubelet=(1, 4, 4)),
    lambda section: video_model.make_video_model(
      section, num_classes=3, clip_shape=(2, 8, 8, 1), rngs=nnx.Rngs(0)
    ),
  ),
  'transformer': (
    transformer_model.Transformer,
    transformer_model.TransformerOptions,
    architectures.model_section,
    dict(variant='custom', features=8, encoder_layers=1, decoder_layers=1, num_heads=2, mlp_features=16),
    lambda section: architectures.make_translator(
      section, source_vocab_size=7, target_vocab_size=9, rngs=nnx.Rngs(0)
    ),
  ),
  'rnn': (
    rnn_model.RNNTranslator,
    rnn_model.RnnOptions,
    architectures.model_section,
    dict(architecture='rnn', embedding_features=4, encoder_hidden=4, decoder_hidden=6),
    lambda section: architectures.make_translator(
      section, source_vocab_size=7, target_vocab_size=9, rngs=nnx.Rngs(0)
    ),
  ),
}


def _same_model(first, second):
  assert nnx.graphdef(first) == nnx.graphdef(second)
  for (path, a), (other, b) in zip(nnx.to_flat_state(nnx.state(first)), nnx.to_flat_state(nnx.state(second))):
    assert path == other
    np.testing.assert_array_equal(np.asarray(a[...]), np.asarray(b[...]), err_msg=str(path))


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_the_model_class_takes_the_options_whole_and_keeps_no_default(family):
  model_class, options, _, _, _ = FAMILIES[family]
  parameters = inspect.signature(model_class.__init__).parameters
  assert list(parameters)[:2] == ['self', 'options']
  assert not {field.name for field in dataclasses.fields(options)} & set(parameters)
  assert [name for name, p in parameters.items() if p.default is not inspect.Parameter.empty] == []
  assert all(field.default is not dataclasses.MISSING for field in dataclasses.fields(options))


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_a_section_without_a_field_gets_the_default_and_options_build_the_same_model(family):
  _, options, model_section, small, build = FAMILIES[family]
  full = dict(to_section(options()).items(), **small)
  model = build(small)
  _same_model(model, build(full))
  _same_model(model, build(options(**small)))
  complete = model_section(small)
  assert set(complete) == {field.name for field in dataclasses.fields(options)}
  assert complete.to_dict() == full


def test_a_transformer_section_is_complete_without_the_architecture_unless_it_gives_it():
  assert 'architecture' not in architectures.model_section({})
  assert architectures.model_section({'architecture': 'transformer'}).architecture == 'transformer'
  assert architectures.model_section({'architecture': 'rnn'}).to_dict() == dataclasses.asdict(
    rnn_model.RnnOptions()
  )


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_a_field_the_family_does_not_have_is_an_error_naming_it(family):
  _, _, _, small, build = FAMILIES[family]
  with pytest.raises(ConfigError, match=r'^unknown config field model\.widht; the fields of model are: '):
    build(dict(small, widht=3))


@pytest.mark.parametrize(
  'family, field, value, message',
  [
    ('vit', 'width', '8', r"^config\.model\.width is '8'; it must be an integer\.$"),
    ('vit', 'pool', 'avg', r"^config\.model\.pool is 'avg'; allowed values: cls, gap, map\.$"),
    ('vit', 'norm_pre', 1, r'^config\.model\.norm_pre is 1; it must be True or False\.$'),
    ('vit', 'variant', 'XL/16', r"^config\.model: Unknown ViT variant 'XL/16'"),
    ('video', 'tubelet', (1, 4), r'^config\.model\.tubelet is \(1, 4\); it must be a tuple\.$'),
    (
      'video',
      'spatial_posemb',
      'learn3d',
      r"^model\.spatial_posemb 'learn3d' already encodes time; temporal_posemb must be 'none'",
    ),
    ('transformer', 'norm_placement', 'sandwich', r"^config\.model\.norm_placement is 'sandwich'; allowed"),
    (
      'transformer',
      'variant',
      'huge',
      r"^config\.model\.variant is 'huge'; allowed values: tiny, small, base",
    ),
    ('rnn', 'encoder_cell', 'rnn', r"^config\.model\.encoder_cell is 'rnn'; allowed values: gru, lstm\.$"),
    ('rnn', 'decoder_hidden', 0, r'^config\.model: embedding_features, encoder_hidden and decoder_hidden'),
  ],
)
def test_an_ill_typed_or_bad_field_is_one_line_naming_it(family, field, value, message):
  _, _, model_section, small, build = FAMILIES[family]
  for read in (model_section, build):
    with pytest.raises(ConfigError, match=message) as raised:
      read(dict(small, **{field: value}))
    assert '\n' not in str(raised.value)


def test_the_task_reports_an_unknown_model_field_as_a_config_error():
  config = tiny_vit_config()
  config.model.widht, config.model.dropuot = 3, 0.1  # misspelt in a config file
  with pytest.raises(
    ConfigError, match='^unknown config fields model.(dropuot|widht), model.(dropuot|widht); '
  ):
    load_task(config)


def test_the_layernorm_epsilon_is_given_to_every_layernorm_when_it_is_built(monkeypatch):
  built = []
  original = nnx.LayerNorm.__init__

  def recording(self, *args, **kwargs):
    original(self, *args, **kwargs)
    built.append(kwargs.get('epsilon'))

  monkeypatch.setattr(nnx.LayerNorm, '__init__', recording)
  _, _, _, small, build = FAMILIES['vit']
  for scan_layers in (False, True):
    built.clear()
    model = build(dict(small, layernorm_epsilon=1e-3, pool='map', scan_layers=scan_layers))
    # two per block, the encoder's final one and the attention-pooling head's
    assert built == [1e-3] * (2 * small['depth'] + 2)
    norms = [module for _, module in nnx.iter_graph(model) if isinstance(module, nnx.LayerNorm)]
    assert norms and all(norm.epsilon == 1e-3 for norm in norms)


def test_the_big_vision_sincos2d_table_is_built_in_place():
  encoding = PositionalEncoding(
    'sincos2d', dim=8, num_heads=2, num_layers=1, grid=(2, 3), sincos2d_layout='big_vision', rngs=nnx.Rngs(0)
  )
  np.testing.assert_array_equal(encoding.tables[0]()[...], big_vision_sincos_2d(2, 3, 8))
  ours = PositionalEncoding('sincos2d', dim=8, num_heads=2, num_layers=1, grid=(2, 3), rngs=nnx.Rngs(0))
  np.testing.assert_array_equal(ours.tables[0]()[...], sincos_2d_table(2, 3, 8))
  options = StackOptions(
    features=8,
    depth=2,
    num_heads=2,
    mlp_features=16,
    posemb='sincos2d',
    posemb_injection='every_layer',
    sincos2d_layout='big_vision',
  )
  encoder = Encoder(options, grid=(2, 3), rngs=nnx.Rngs(0))
  for table in encoder.positional.tables:
    np.testing.assert_array_equal(table()[...], big_vision_sincos_2d(2, 3, 8))
  with pytest.raises(ValueError, match="Unknown sincos2d_layout 'columns_rows'"):
    PositionalEncoding(
      'sincos2d',
      dim=8,
      num_heads=2,
      num_layers=1,
      grid=(2, 3),
      sincos2d_layout='columns_rows',
      rngs=nnx.Rngs(0),
    )
