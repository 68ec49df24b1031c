"""Refuses parameter regexes that select something other than what they mean.

``check_layer_numbering``: ``optimizer.layer_regex`` numbers the layers for ``layer_decay``; a
model whose paths do not spell its depth (a video layout with two stacks) says each parameter's
real layer, and a regex that numbers any parameter otherwise is a one-line ``ConfigError``.

``check_scanned_layers`` (``check_regexes_under_scan`` for a whole config):

A model whose layers are scanned (``model.scan_layers``) keeps each stack in one array per
parameter, on a leading depth axis, and its path has no layer number: the unrolled
``encoder.blocks.3.mlp.fc1.kernel`` is the scanned ``encoder.blocks.mlp.fc1.kernel``. A regex
that picks some layers of a stack (``^encoder\\.blocks\\.[0-1]\\.``), or that needs the number to
match at all (``blocks\\.\\d+\\.``), would silently select something else. ``check_regexes_under_scan``
compares what ``optimizer.frozen`` and ``optimizer.weight_decay_regex`` select in the two forms of
the same model and raises a one-line ``ConfigError`` where they differ; ``optimizer.layer_decay``
is refused outright. The task calls it with its model builder, since the task knows how to build
its model either way.
"""

from collections.abc import Callable

import jax
import ml_collections
from flax import nnx

from trainer.errors import ConfigError
from trainer.optim import DEFAULT_WEIGHT_DECAY_REGEX, compile_regex, layer_numbers, parameter_path


def _abstract_paths(build: Callable[[], nnx.Module]) -> list[str]:
  params = nnx.state(nnx.eval_shape(build), nnx.Param)
  return [parameter_path(key) for key, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def _scanned_twins(unrolled: list[str], scanned: list[str]) -> dict[str, str]:
  """Each unrolled path -> the scanned path holding it: itself, or itself without one layer number."""
  present, twins = set(scanned), {}
  for path in unrolled:
    parts = path.split('.')
    candidates = [path] + [
      '.'.join(parts[:i] + parts[i + 1 :]) for i, part in enumerate(parts) if part.isdigit()
    ]
    found = next((candidate for candidate in candidates if candidate in present), None)
    if found is not None:
      twins[path] = found
  return twins


def check_regexes_under_scan(
  config: ml_collections.ConfigDict | None, build: Callable[[bool], nnx.Module]
) -> None:
  """``build(scan_layers)`` makes the model scanned or unrolled; raises if a regex of ``config`` (the
  optimizer section) selects a parameter of one form and not the same parameter of the other."""
  config = config or ml_collections.ConfigDict()
  fields = []
  if config.get('frozen', ''):
    fields.append(('frozen', compile_regex(config, 'frozen', '')))
  if config.get('weight_decay', 0.0):
    fields.append(
      ('weight_decay_regex', compile_regex(config, 'weight_decay_regex', DEFAULT_WEIGHT_DECAY_REGEX))
    )
  fields = [(field, regex) for field, regex in fields if regex is not None]
  if not fields:
    return
  twins = _scanned_twins(_abstract_paths(lambda: build(False)), _abstract_paths(lambda: build(True)))
  for field, regex in fields:
    for unrolled, scanned in twins.items():
      if bool(regex.search(unrolled)) != bool(regex.search(scanned)):
        which = (
          f'matches {unrolled!r} but not' if regex.search(unrolled) else f'does not match {unrolled!r} but'
        )
        raise ConfigError(
          f"config.optimizer.{field} '{regex.pattern}' {which} its scanned array {scanned!r}: "
          'model.scan_layers stacks the layers into one array whose path has no layer number; set '
          'model.scan_layers=False or write the regex without layer numbers.'
        )


def check_scanned_layers(
  config: ml_collections.ConfigDict, build: Callable[[ml_collections.ConfigDict], nnx.Module]
) -> None:
  """For a config whose model scans its layers: ``optimizer.layer_decay`` is refused (it needs one
  parameter per layer), and so is a regex that selects otherwise scanned than unrolled;
  ``build(model_section)`` makes the model a ``model`` section describes."""
  model = config.model
  if not model.get('scan_layers', False):
    return
  optimizer = config.get('optimizer') or ml_collections.ConfigDict()
  if optimizer.get('layer_decay', 1.0) != 1.0:
    raise ConfigError(
      'config.optimizer.layer_decay needs one parameter per layer: set model.scan_layers=False '
      '(a scanned stack keeps its layers in one array).'
    )
  check_regexes_under_scan(
    optimizer, lambda scan: build(ml_collections.ConfigDict({**model.to_dict(), 'scan_layers': scan}))
  )


def check_layer_numbering(
  config: ml_collections.ConfigDict | None,
  build: Callable[[], nnx.Module],
  real_layer: Callable[[str], int | None],
  what: str,
) -> None:
  """With ``layer_decay`` on, raises unless ``layer_regex`` gives every parameter of the model
  ``build`` makes the layer ``real_layer(path)`` says (``None``: in no layer); ``what`` names the model."""
  config = config or ml_collections.ConfigDict()
  if config.get('layer_decay', 1.0) == 1.0:
    return
  paths = _abstract_paths(build)
  given = layer_numbers(config, paths)
  for path in paths:
    if given.get(path) != real_layer(path):
      pattern = config.get('layer_regex', r'blocks\.(\d+)\.')
      raise ConfigError(
        f"config.optimizer.layer_regex '{pattern}' does not number {what}'s layers by depth: {path!r} is "
        f'in layer {real_layer(path)}, the regex says {given.get(path)}; set one that does, or '
        'optimizer.layer_decay=1.0.'
      )
