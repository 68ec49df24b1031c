"""The optimizer and learning-rate schedule, built with optax from ``config.optimizer``.

Fields: ``name`` ('adamw' | 'sgd'), ``learning_rate``, ``schedule`` ('constant' |
'cosine' | 'linear' | 'rsqrt'), ``warmup_steps``, ``end_learning_rate``,
``weight_decay`` (decoupled, on the parameters ``weight_decay_regex`` selects), ``b1``, ``b2``,
``eps`` (AdamW), ``momentum``, ``nesterov`` (SGD), ``grad_clip_norm`` (the global norm of the
trained parameters' gradients; 0 = off). Every field's default and allowed values are in
``trainer/config_schema.py`` (``Optimizer``), which ``trainer.validation`` checks.

Optional fields that select parameters by their path (``'encoder.blocks.3.mlp.fc1.kernel'``,
matched with ``re.search``), so linear probes and partial fine-tuning are configs:
``weight_decay_regex``: the parameters weight decay applies to (default ``'kernel$'``: the
weight matrices of dense, convolution and recurrent layers, as big_vision; biases, norms,
position tables, class tokens and token embeddings are not decayed). ``describe_weight_decay``
says how many arrays and values match; the trainer prints it at start-up.
``frozen``: a regular expression; matching parameters are never updated ('' = none;
``'^(?!head\\.)'`` trains the head alone, a linear probe); one that matches no parameter is an
error, and ``describe_frozen`` says how many arrays and values it freezes (printed at start-up).
Under ``model.scan_layers`` a regex must not name layer numbers (``trainer.parameter_regexes``).
``layer_decay``: layer-wise learning-rate decay (1.0 = off): the parameters of layer ``i``
(the number ``layer_regex`` captures, default ``'blocks\\.(\\d+)\\.'``) of ``L`` learn at
``layer_decay ** (L - i)`` times the rate, those matching ``layer_decay_stem`` (the embeddings)
at ``layer_decay ** (L + 1)``, all others (head, final norm) at the full rate: one transformation
after the optimizer multiplies each parameter's update by its group's factor (``_scale_by_group``),
the factors computed from the whole parameter tree (frozen layers count towards ``L``, so freezing
the top block moves no other layer's rate). Gradient clipping sees the trained
parameters' gradients only: a frozen backbone's gradient norm does not scale a probe's head
update (and the train step does not compute frozen gradients, ``trainer/state.py``).
"""

import re

import jax
import ml_collections
import optax

from trainer.config_schema import Optimizer
from trainer.config_sections import to_section
from trainer.errors import ConfigError


def learning_rate_schedule(config: ml_collections.ConfigDict, total_steps: int) -> optax.Schedule:
  """Linear warmup from 0 to ``learning_rate``, then the named decay to ``end_learning_rate``.

  ``rsqrt`` is Vaswani et al.'s: ``learning_rate * sqrt(warmup / step)`` after warmup.
  """
  peak, warmup = config.learning_rate, config.warmup_steps
  end = config.get('end_learning_rate', 0.0)
  decay_steps = max(total_steps - warmup, 1)
  if config.schedule == 'constant':
    decay = optax.constant_schedule(peak)
  elif config.schedule == 'cosine':
    decay = optax.cosine_decay_schedule(peak, decay_steps, alpha=end / peak if peak else 0.0)
  elif config.schedule == 'linear':
    decay = optax.linear_schedule(peak, end, decay_steps)
  elif config.schedule == 'rsqrt':

    def decay(step):
      return peak * jax.lax.rsqrt((step + max(warmup, 1)) / max(warmup, 1))
  else:
    raise ConfigError(
      f'Unknown schedule {config.schedule!r}; allowed values: constant, cosine, linear, rsqrt.'
    )
  if warmup == 0:
    return decay
  return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), decay], [warmup])


DEFAULT_WEIGHT_DECAY_REGEX = Optimizer.weight_decay_regex


def _decay_mask(config: ml_collections.ConfigDict):
  """``params -> tree of bools``: whether weight decay applies to each parameter."""
  decayed = compile_regex(config, 'weight_decay_regex', DEFAULT_WEIGHT_DECAY_REGEX)

  def mask(params):
    return jax.tree_util.tree_map_with_path(
      lambda key, _: bool(decayed and decayed.search(parameter_path(key))), params
    )

  return mask


def _base_optimizer(
  config: ml_collections.ConfigDict, schedule: optax.Schedule
) -> optax.GradientTransformation:
  decay_mask = _decay_mask(config)
  if config.name == 'adamw':
    optimizer = optax.adamw(
      schedule, b1=config.b1, b2=config.b2, eps=config.eps, weight_decay=config.weight_decay, mask=decay_mask
    )
  elif config.name == 'sgd':
    optimizer = optax.chain(
      optax.add_decayed_weights(config.weight_decay, mask=decay_mask),
      optax.sgd(schedule, momentum=config.momentum or None, nesterov=config.nesterov),
    )
  else:
    raise ConfigError(f'Unknown optimizer {config.name!r}; allowed values: adamw, sgd.')
  return optimizer


def compile_regex(config: ml_collections.ConfigDict, field: str, default: str) -> re.Pattern | None:
  pattern = config.get(field, default) or ''
  try:
    return re.compile(pattern) if pattern else None
  except re.error as error:
    raise ConfigError(
      f'config.optimizer.{field} {pattern!r} is not a regular expression ({error}).'
    ) from None


def parameter_path(key_path) -> str:
  """``'encoder.blocks.0.mlp.fc1.kernel'`` for a leaf of a parameter tree."""
  path = jax.tree_util.keystr(key_path, simple=True, separator='.')
  return path.removesuffix('.value')


def _group_options(config: ml_collections.ConfigDict):
  """The parameter-group fields, regular expressions compiled: (frozen, layer_regex, stem, layer_decay)."""
  frozen = compile_regex(config, 'frozen', Optimizer.frozen)
  layer_regex = compile_regex(config, 'layer_regex', Optimizer.layer_regex)
  stem = compile_regex(config, 'layer_decay_stem', Optimizer.layer_decay_stem)
  return frozen, layer_regex, stem, config.get('layer_decay', Optimizer.layer_decay)


def layer_numbers(config: ml_collections.ConfigDict, paths: list[str]) -> dict[str, int]:
  """The layer number ``layer_regex`` gives each of ``paths`` that it matches."""
  layer_regex = _group_options(config)[1]
  return {path: int(found.group(1)) for path in paths if layer_regex and (found := layer_regex.search(path))}


def parameter_groups(config: ml_collections.ConfigDict, params) -> dict[str, float | None]:
  """Each parameter path -> its learning-rate multiplier, or ``None`` when frozen."""
  frozen, _, stem, decay = _group_options(config)
  paths = [parameter_path(key) for key, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
  layers = layer_numbers(config, paths)
  depth = max(layers.values(), default=-1) + 1
  groups = {}
  for path in paths:
    if frozen and frozen.search(path):
      groups[path] = None
    elif path in layers:
      groups[path] = decay ** (depth - layers[path])
    elif stem and stem.search(path):
      groups[path] = decay ** (depth + 1)
    else:
      groups[path] = 1.0
  if frozen and all(scale is None for scale in groups.values()):
    raise ConfigError(f'config.optimizer.frozen {frozen.pattern!r} freezes every parameter.')

  return groups


def _scale_by_group(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Multiplies each update by its group's factor (the same as scaling its learning rate)."""

  def scale(updates, params):
    del params
    groups = parameter_groups(config, updates)  # the whole tree: frozen updates are zeros
    return jax.tree_util.tree_map_with_path(
      lambda key, u: u if groups[parameter_path(key)] is None else u * groups[parameter_path(key)], updates
    )

  return optax.stateless(scale)


def frozen_paths(config: ml_collections.ConfigDict, params) -> frozenset[str]:
  """The paths of the parameters ``config.frozen`` freezes (empty when nothing is frozen)."""
  if not config.get('frozen', ''):
    return frozenset()
  groups = parameter_groups(config, params)
  frozen = frozenset(path for path, scale in groups.items() if scale is None)
  if not frozen:
    raise ConfigError(
      f"config.optimizer.frozen '{config.frozen}' matches no parameter (their paths look like "
      f'{sorted(groups)[len(groups) // 2]!r}).'
    )
  return frozen


def describe_frozen(config: ml_collections.ConfigDict, params) -> str | None:
  """One line: how many parameter arrays and values ``frozen`` freezes (``None`` when it is not set)."""
  frozen = frozen_paths(config, params)
  if not frozen:
    return None
  sizes = {
    parameter_path(key): int(leaf.size) for key, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
  }
  chosen = [size for path, size in sizes.items() if path in frozen]
  return (
    f'frozen: {len(chosen)} of {len(sizes)} parameter arrays ({sum(chosen):,} of {sum(sizes.values()):,} '
    f"values) match '{config.frozen}'"
  )


def describe_weight_decay(config: ml_collections.ConfigDict, params) -> str:
  """One line: how many parameter arrays and values weight decay applies to, and the regex."""
  pattern = config.get('weight_decay_regex', DEFAULT_WEIGHT_DECAY_REGEX)
  if not config.weight_decay:
    return 'weight decay: off (optimizer.weight_decay is 0)'
  mask = _decay_mask(config)(params)
  frozen = frozen_paths(config, params)
  sizes = {
    parameter_path(key): (int(leaf.size), decayed)
    for (key, leaf), decayed in zip(jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(mask))
  }
  trained = {path: entry for path, entry in sizes.items() if path not in frozen}
  chosen = [size for size, decayed in trained.values() if decayed]
  values = sum(size for size, _ in trained.values())
  what = 'trained parameter arrays' if frozen else 'parameter arrays'
  return (
    f'weight decay {config.weight_decay:g}: {len(chosen)} of {len(trained)} {what} '
    f'({sum(chosen):,} of {values:,} values) match {pattern!r}'
  )


def make_optimizer(config: ml_collections.ConfigDict, total_steps: int) -> optax.GradientTransformation:
  _group_options(config)  # bad group options fail here, before any parameter exists
  _decay_mask(config)  # and a bad weight_decay_regex
  optimizer = _base_optimizer(config, learning_rate_schedule(config, total_steps))
  layer_decay, frozen = config.get('layer_decay', 1.0) != 1.0, bool(config.get('frozen', ''))
  if layer_decay and not frozen:
    optimizer = optax.chain(optimizer, _scale_by_group(config))
  if config.grad_clip_norm:  # inside the frozen/trained split: only trained gradients count
    optimizer = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), optimizer)
  if frozen:

    def label(params):
      groups = parameter_groups(config, params)
      return jax.tree_util.tree_map_with_path(
        lambda key, _: 'frozen' if groups[parameter_path(key)] is None else 'trained', params
      )

    optimizer = optax.multi_transform({'trained': optimizer, 'frozen': optax.set_to_zero()}, label)
    if layer_decay:  # outside the split, so the depth counts the frozen layers too
      optimizer = optax.chain(optimizer, _scale_by_group(config))
  return optimizer


def default_optimizer_config() -> ml_collections.ConfigDict:
  """Every ``optimizer`` field with its default (``trainer.config_schema.Optimizer``)."""
  return to_section(Optimizer())
