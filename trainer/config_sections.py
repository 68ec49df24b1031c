"""Typed config sections: a frozen dataclass is the one place a section's fields and defaults live.

``from_section(Options, config.model, 'model')`` returns an ``Options`` whose fields are the
dataclass defaults with the section's values over them. Each value is checked against its field's
annotation (``bool``, ``int``, ``float``, ``str``, ``tuple``, ``X | None``, ``typing.Literal``
choices, a nested dataclass) and against the range its metadata gives, if any
(``trainer/config_schema.py``), and an unknown field, a value of the wrong type or out of range, or a
choice not allowed is a ``ConfigError`` of one line that names the field by its dotted path. ``to_section``
gives the complete section back, for the resolved config a workdir records; a field that is ``None``
there is a typed ``FieldReference``, so the command line can still set it (``--config.data.path=DIR``).
``optional(read)`` marks a section that stays absent unless a config writes it
(``trainer.task.Task.config_sections``).
"""

import dataclasses
import math
import numbers
import types
import typing

import ml_collections

from trainer.errors import ConfigError


def field_names(options_type) -> tuple[str, ...]:
  return tuple(field.name for field in dataclasses.fields(options_type))


def from_section(options_type, section, path: str):
  """An ``options_type`` (a dataclass) from ``section`` (``ConfigDict``, ``dict`` or ``None``)."""
  if section is None:
    section = {}
  if dataclasses.is_dataclass(section) and not isinstance(section, type):
    section = to_section(section)
  if not isinstance(section, (ml_collections.ConfigDict, dict)):
    raise ConfigError(f'config.{path} is {section!r}; it must be a section of fields.')
  names = field_names(options_type)
  unknown = [name for name in section.keys() if name not in names]
  if unknown:
    raise ConfigError(
      f'unknown config field{"s" if len(unknown) > 1 else ""} '
      f'{", ".join(_join(path, name) for name in unknown)}; the fields of {path or "a config"} are: '
      f'{", ".join(names)}.'
    )
  hints = typing.get_type_hints(options_type)
  values = {name: _checked(hints[name], section[name], _join(path, name)) for name in section.keys()}
  for field in dataclasses.fields(options_type):
    if field.name in values and 'range' in field.metadata:
      _check_range(_join(path, field.name), values[field.name], *field.metadata['range'])
  try:
    return options_type(**values)
  except (TypeError, ValueError) as error:
    if isinstance(error, ConfigError):
      raise
    raise ConfigError(f'config{"." if path else ""}{path}: {error}') from None


def to_section(options) -> ml_collections.ConfigDict:
  """Every field of the dataclass ``options`` as a ``ConfigDict`` (nested dataclasses as sections; a
  ``None`` of an ``X | None`` field as a ``FieldReference`` of ``X``'s type, as ``configs.common.unset``)."""
  hints = typing.get_type_hints(type(options))
  return ml_collections.ConfigDict(
    {
      field.name: to_section(value)
      if dataclasses.is_dataclass(value)
      else _unset_or(value, hints[field.name])
      for field in dataclasses.fields(options)
      for value in [getattr(options, field.name)]
    }
  )


def section_reader(options_type, path: str):
  """``(section, config) -> complete ConfigDict`` for ``options_type``: a ``Task.config_sections`` entry
  whose fields decide alone (``config``, the whole config, is not read)."""

  def read(section, config=None):
    del config
    return to_section(from_section(options_type, section, path))

  return read


def optional(read):
  """A ``Task.config_sections`` entry for a section that stays absent (``None``) unless a config has it."""

  def read_if_given(section, config=None):
    return None if section is None else read(section, config)

  return read_if_given


def _check_range(path: str, value, lowest, lowest_allowed: bool, highest, highest_allowed: bool) -> None:
  """A field's ``range`` metadata (``trainer/config_schema.py``): ``value`` within it, else a ``ConfigError``."""
  below = value < lowest or (value == lowest and not lowest_allowed)
  above = value > highest or (value == highest and not highest_allowed)
  if math.isfinite(value) and not below and not above:
    return
  if isinstance(value, int) and lowest_allowed and highest == math.inf:
    allowed = f'it must be >= {lowest}'
  elif highest == math.inf:
    allowed = f'it must be a finite number {">=" if lowest_allowed else ">"} {lowest:g}'
  else:
    interval = f'{"[" if lowest_allowed else "("}{lowest:g}, {highest:g}{"]" if highest_allowed else ")"}'
    allowed = f'it must be a number in {interval}'
  raise ConfigError(f'config.{path} is {value!r}; {allowed}.')


def _join(path: str, name: str) -> str:
  return f'{path}.{name}' if path else name


def _unset_or(value, annotation):
  inner = _optional_of(annotation)
  if value is not None or inner is None:
    return value
  field_type = typing.get_origin(inner) or inner
  if field_type in (typing.Union, types.UnionType, typing.Literal):
    return None
  return ml_collections.FieldReference(None, field_type=field_type)


def _describe(annotation) -> str:
  if typing.get_origin(annotation) is typing.Literal:
    return 'allowed values: ' + ', '.join(str(choice) for choice in typing.get_args(annotation))
  if _optional_of(annotation) is not None:
    return _describe(_optional_of(annotation)) + ', or None'
  if typing.get_origin(annotation) in (typing.Union, types.UnionType):
    return ' or '.join(_describe(argument) for argument in typing.get_args(annotation))
  names = {bool: 'True or False', int: 'an integer', float: 'a number', str: 'a string', tuple: 'a tuple'}
  origin = typing.get_origin(annotation) or annotation
  return f'it must be {names.get(origin, getattr(origin, "__name__", str(origin)))}'


def _optional_of(annotation):
  """``X`` for ``X | None`` (or ``Optional[X]``), else ``None``."""
  if typing.get_origin(annotation) in (typing.Union, types.UnionType):
    rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if len(rest) == 1 and len(typing.get_args(annotation)) == 2:
      return rest[0]
  return None


def _checked(annotation, value, path: str):
  """``value`` as the field holds it (a list becomes a tuple, an int a float), or a ``ConfigError``."""

  def fail():
    raise ConfigError(f'config.{path} is {value!r}; {_describe(annotation)}.')

  if annotation is typing.Any:
    return value
  inner = _optional_of(annotation)
  if inner is not None:
    return None if value is None else _checked(inner, value, path)
  origin = typing.get_origin(annotation)
  if origin is typing.Literal:
    choices = typing.get_args(annotation)
    if isinstance(value, bool) or value not in choices or type(value) not in {type(c) for c in choices}:
      fail()
    return value
  if dataclasses.is_dataclass(annotation):
    return from_section(annotation, value, path)
  if annotation is bool:
    if not isinstance(value, bool):
      fail()
    return value
  if annotation is int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
      fail()
    return int(value)
  if annotation is float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
      fail()
    return float(value)
  if annotation is str:
    if not isinstance(value, str):
      fail()
    return value
  if annotation is tuple or origin is tuple:
    if not isinstance(value, (tuple, list)):
      fail()
    arguments = typing.get_args(annotation)
    if arguments and arguments[-1] is Ellipsis:
      return tuple(_checked(arguments[0], item, f'{path}[{i}]') for i, item in enumerate(value))
    if arguments:
      if len(arguments) != len(value):
        fail()
      return tuple(_checked(a, item, f'{path}[{i}]') for i, (a, item) in enumerate(zip(arguments, value)))
    return tuple(value)
  if origin in (typing.Union, types.UnionType):
    for argument in typing.get_args(annotation):
      try:
        return _checked(argument, value, path)
      except ConfigError:
        pass
    fail()
  raise TypeError(f'config field {path} has an annotation {annotation!r} that from_section cannot check')
