"""Typed config sections (``trainer.config_sections``): defaults, checked values, one-line errors."""

import dataclasses
import typing

import ml_collections
import pytest

from trainer.config_sections import from_section, optional, section_reader, to_section
from trainer.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class _Inner:
  rate: float = 0.5


@dataclasses.dataclass(frozen=True)
class _Options:
  width: int = 8
  pool: typing.Literal['cls', 'gap'] = 'cls'
  scale: float = 1.0
  bias: bool = True
  name: str = 'a'
  shape: tuple[int, int] = (2, 2)
  path: str | None = None
  patch: int | tuple[int, int] = 4
  inner: _Inner = _Inner()

  def __post_init__(self):
    if self.width < 1:
      raise ValueError(f'width must be >= 1, got {self.width}')


def test_fields_a_section_lacks_take_their_defaults_and_given_ones_are_kept():
  options = from_section(_Options, ml_collections.ConfigDict(dict(width=16, pool='gap')), 'model')
  assert options == _Options(width=16, pool='gap')
  assert from_section(_Options, None, 'model') == _Options()


def test_values_are_converted_to_what_the_field_holds():
  options = from_section(_Options, dict(scale=2, shape=[3, 4], inner=dict(rate=1)), 'model')
  assert options.scale == 2.0 and isinstance(options.scale, float)
  assert options.shape == (3, 4)
  assert options.inner == _Inner(rate=1.0)
  assert from_section(_Options, dict(patch=(2, 3)), 'model').patch == (2, 3)


def test_the_complete_section_round_trips():
  options = _Options(width=3, inner=_Inner(0.25))
  section = to_section(options)
  assert section.inner.rate == 0.25 and set(section) == {f.name for f in dataclasses.fields(_Options)}
  assert from_section(_Options, section, 'model') == options


@pytest.mark.parametrize(
  'section, message',
  [
    (dict(widht=3), 'unknown config field model.widht; the fields of model are: width, pool'),
    (dict(width='8'), "config.model.width is '8'; it must be an integer."),
    (dict(width=True), 'config.model.width is True; it must be an integer.'),
    (dict(pool='avg'), "config.model.pool is 'avg'; allowed values: cls, gap."),
    (dict(bias=1), 'config.model.bias is 1; it must be True or False.'),
    (dict(shape=(1, 2, 3)), 'config.model.shape is (1, 2, 3); it must be a tuple.'),
    (dict(inner=dict(rat=1.0)), 'unknown config field model.inner.rat;'),
    (dict(width=0), 'config.model: width must be >= 1, got 0'),
    (dict(patch='4'), "config.model.patch is '4'; it must be an integer or it must be a tuple."),
  ],
)
def test_a_bad_field_is_one_line_naming_it(section, message):
  with pytest.raises(ConfigError) as caught:
    from_section(_Options, section, 'model')
  assert message in str(caught.value) and '\n' not in str(caught.value)


def test_a_none_default_is_a_typed_reference_the_command_line_can_set():
  section = to_section(_Options())
  assert section.path is None
  section.path = '/data'  # a str field: an int would be refused
  with pytest.raises(TypeError):
    section.path = 3


def test_an_optional_section_stays_absent_until_given():
  read = optional(section_reader(_Options, 'extra'))
  assert read(None) is None
  assert read(dict(width=3)).width == 3 and read(dict(width=3)).pool == 'cls'
  with pytest.raises(ConfigError, match=r'config\.extra\.width is .a.; it must be an integer'):
    read(dict(width='a'))
