"""An exponential moving average (EMA) of the parameters, kept beside them in the train state.

``config.ema.decay`` (0 = off; DeiT uses 0.99996, big_vision's Polyak averaging 0.9999) turns it on.
After each update the train step, inside the compiled program, sets

  ema = d * ema + (1 - d) * params

with ``d = decay``, as timm's ``ModelEmaV2`` (and the ``ModelEma`` DeiT trained with) does. With
``config.ema.warmup`` the decay grows towards ``decay`` as timm's ``ModelEmaV3`` with
``use_warmup=True`` (``--model-ema-warmup``) makes it grow:

  d = min(decay, 1 - (1 + t) ** (-2 / 3)),

where ``t`` is the number of updates made before this one; the first update copies the parameters
(``d = 0``), and ``d`` reaches 0.999 after about 31.6k updates and 0.9999 after about a million. The
average starts as a copy of the initial (or pretrained) parameters, has their shapes, dtypes and
shardings, and is saved and restored with them (``trainer/io/checkpoints.py``), so a resumed run's
average is the one an uninterrupted run has.

Evaluation during training reports the average's metrics beside the raw ones, each name prefixed
``ema_``; ``evaluate.py``, ``predict.py`` and the exports take ``--params ema``.
"""

import jax
import jax.numpy as jnp

#: the choice of parameters to evaluate, predict with or export
PARAMS_CHOICES = ('raw', 'ema')
#: the prefix of the average's evaluation metrics
METRIC_PREFIX = 'ema_'


#: timm's ``ModelEmaV3`` warm-up power (its default, ``warmup_power=2/3``, with ``warmup_gamma=1``)
WARMUP_POWER = 2.0 / 3.0


def ema_decay(config) -> float:
  """The configured decay (``trainer/config_schema.py``: ``Ema``); 0.0 is off."""
  return float(config.ema.decay)


def ema_warmup(config) -> bool:
  """Whether the decay warms up (``Ema.warmup``)."""
  return bool(config.ema.get('warmup', False))


def decay_at(decay: float, updates_before: jax.Array, warmup: bool = False) -> jax.Array:
  """The decay of the update after ``updates_before`` updates, in float32: ``decay``, or with
  ``warmup`` ``min(decay, 1 - (1 + t) ** -WARMUP_POWER)``."""
  if not warmup:
    return jnp.float32(decay)
  t = jnp.asarray(updates_before, jnp.float32)
  return jnp.minimum(jnp.float32(decay), 1.0 - (1.0 + t) ** -WARMUP_POWER)


def update_ema(ema_params, params, decay: float, updates_before: jax.Array, warmup: bool = False):
  """The average after one more update: ``d * ema + (1 - d) * params`` with ``d = decay_at(...)``."""
  d = decay_at(decay, updates_before, warmup)
  return jax.tree.map(lambda e, p: (d * e + (1.0 - d) * p).astype(e.dtype), ema_params, params)
