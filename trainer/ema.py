"""An exponential moving average (EMA) of the parameters, kept beside them in the train state.

``config.ema.decay`` (0 = off; DeiT uses 0.99996, big_vision's Polyak averaging 0.9999) turns it on.
After each update the train step, inside the compiled program, sets

  ema = decay_t * ema + (1 - decay_t) * params,   decay_t = min(decay, (1 + t) / (10 + t)),

where ``t`` is the number of updates made before this one (TensorFlow's
``ExponentialMovingAverage`` with ``num_updates``; not timm's ``ModelEmaV3`` warm-up). The warm-up
keeps the average from remembering the random initialisation: the first update gives the old
average weight 0.1, the 91st 0.91, and ``decay`` itself is reached after about
``9 / (1 - decay)`` updates. The average starts as a copy of the initial (or pretrained)
parameters, has their shapes, dtypes and shardings, and is saved and restored with them
(``trainer/io/checkpoints.py``), so a resumed run's average is the one an uninterrupted run has.

Evaluation during training reports the average's metrics beside the raw ones, each name prefixed
``ema_``; ``evaluate.py``, ``predict.py`` and the exports take ``--params ema``.
"""

import jax
import jax.numpy as jnp

#: the choice of parameters to evaluate, predict with or export
PARAMS_CHOICES = ('raw', 'ema')
#: the prefix of the average's evaluation metrics
METRIC_PREFIX = 'ema_'


def ema_decay(config) -> float:
  """The configured decay (``trainer/config_schema.py``: ``Ema``); 0.0 is off."""
  return float(config.ema.decay)


def warmed_up_decay(decay: float, updates_before: jax.Array) -> jax.Array:
  """``min(decay, (1 + t) / (10 + t))`` for ``t = updates_before``, in float32."""
  t = jnp.asarray(updates_before, jnp.float32)
  return jnp.minimum(jnp.float32(decay), (1.0 + t) / (10.0 + t))


def update_ema(ema_params, params, decay: float, updates_before: jax.Array):
  """The average after one more update: ``d * ema + (1 - d) * params`` with the warmed-up ``d``."""
  d = warmed_up_decay(decay, updates_before)
  return jax.tree.map(lambda e, p: (d * e + (1.0 - d) * p).astype(e.dtype), ema_params, params)


def metrics_of_average(metrics: dict) -> dict:
  """The average's evaluation metrics, named as the raw ones with ``ema_`` in front."""
  return {METRIC_PREFIX + name: value for name, value in metrics.items()}
