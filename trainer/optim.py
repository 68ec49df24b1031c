"""The optimizer and learning-rate schedule, built with optax from ``config.optimizer``.

Fields: ``name`` ('adamw' | 'sgd'), ``learning_rate``, ``schedule`` ('constant' |
'cosine' | 'linear' | 'rsqrt'), ``warmup_steps``, ``end_learning_rate``,
``weight_decay`` (decoupled; never applied to biases, norms, or positional and
relative-bias tables with fewer than 2 dimensions), ``b1``, ``b2``, ``eps`` (AdamW),
``momentum``, ``nesterov`` (SGD), ``grad_clip_norm`` (global norm; 0 = off).
"""

import jax
import ml_collections
import optax

from trainer.errors import ConfigError
from trainer.validation import OPTIMIZERS, SCHEDULES


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
    raise ConfigError(f'Unknown schedule {config.schedule!r}; allowed values: {", ".join(SCHEDULES)}.')
  if warmup == 0:
    return decay
  return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), decay], [warmup])


def _decay_mask(params):
  return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(config: ml_collections.ConfigDict, total_steps: int) -> optax.GradientTransformation:
  schedule = learning_rate_schedule(config, total_steps)
  if config.name == 'adamw':
    optimizer = optax.adamw(
      schedule, b1=config.b1, b2=config.b2, eps=config.eps, weight_decay=config.weight_decay, mask=_decay_mask
    )
  elif config.name == 'sgd':
    optimizer = optax.chain(
      optax.add_decayed_weights(config.weight_decay, mask=_decay_mask),
      optax.sgd(schedule, momentum=config.momentum or None, nesterov=config.nesterov),
    )
  else:
    raise ConfigError(f'Unknown optimizer {config.name!r}; allowed values: {", ".join(OPTIMIZERS)}.')
  if config.grad_clip_norm:
    optimizer = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), optimizer)
  return optimizer


def default_optimizer_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(
    dict(
      name='adamw',
      learning_rate=1e-3,
      schedule='cosine',
      warmup_steps=0,
      end_learning_rate=0.0,
      weight_decay=0.0,
      b1=0.9,
      b2=0.999,
      eps=1e-8,
      momentum=0.9,
      nesterov=False,
      grad_clip_norm=1.0,
    )
  )
