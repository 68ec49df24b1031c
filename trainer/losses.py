"""The losses the tasks share: softmax cross-entropy against integer labels, with optax's label smoothing.

``cross_entropy`` serves the classifiers (images, video); ``token_losses`` serves the
translators, which also need the unsmoothed likelihood for perplexity. Both smooth labels
the same way, so a loss value means the same in every family.
"""

import jax
import jax.numpy as jnp
import optax


def cross_entropy(logits: jax.Array, labels: jax.Array, label_smoothing: float = 0.0) -> jax.Array:
  """Per-example softmax cross-entropy against integer labels, optionally smoothed.

  Smoothing is optax's: the target is ``(1 - label_smoothing) * one_hot + label_smoothing / K``
  over the ``K`` classes (the label included), with no offset, as in ``token_losses``.
  """
  num_classes = logits.shape[-1]
  targets = optax.smooth_labels(jax.nn.one_hot(labels, num_classes), label_smoothing)
  return optax.softmax_cross_entropy(logits, targets)


def token_losses(
  logits: jax.Array, labels: jax.Array, label_smoothing: float = 0.0
) -> tuple[jax.Array, jax.Array]:
  """Per-token ``(smoothed cross-entropy, NLL)``, each ``[batch, length]``.

  Label smoothing is optax's (``optax.smooth_labels``), as in ``cross_entropy``: the target is
  ``(1 - label_smoothing) * one_hot + label_smoothing / K`` over the ``K`` classes, the label
  included. The loss is the cross-entropy against that target, with no offset (so its
  minimum is the target's entropy, not 0, and it equals ``cross_entropy``);
  ``label_smoothing=0`` gives the NLL. Computed without building the ``[..., K]`` target,
  which for a translator's vocabulary would be as large as the logits.
  """
  log_probs = jax.nn.log_softmax(logits)
  nll = -jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
  if not label_smoothing:
    return nll, nll
  # -sum_c target_c * log p_c = (1 - a) * nll + a * mean_c(-log p_c).
  uniform = -jnp.mean(log_probs, axis=-1)
  return (1.0 - label_smoothing) * nll + label_smoothing * uniform, nll
