"""Both families' losses: one label smoothing (optax's), checked against NumPy and each other;
the translation task's loss and metrics over padded targets."""

import types

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seq2seq.task import Translation, TranslationEvalMetrics, TranslationMetrics
from trainer.losses import cross_entropy, token_losses

CLASSES = 7


def _logits_and_labels(seed=0):
  rng = np.random.default_rng(seed)
  logits = rng.normal(scale=3.0, size=(3, 4, CLASSES)).astype(np.float32)
  return logits, rng.integers(0, CLASSES, size=(3, 4))


def _numpy_smoothed_cross_entropy(logits, labels, alpha):
  """-sum_c target_c log p_c with target = (1 - alpha) * one_hot + alpha / K (alpha / K on every class)."""
  logits = logits.astype(np.float64)
  shifted = logits - logits.max(-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  target = (1 - alpha) * np.eye(CLASSES)[labels] + alpha / CLASSES
  return -(target * log_probs).sum(-1), -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]


@pytest.mark.parametrize('alpha', [0.0, 0.1, 0.5])
def test_token_losses_are_optax_label_smoothing(alpha):
  logits, labels = _logits_and_labels()
  loss, nll = token_losses(jnp.asarray(logits), jnp.asarray(labels), alpha)
  expected_loss, expected_nll = _numpy_smoothed_cross_entropy(logits, labels, alpha)
  np.testing.assert_allclose(loss, expected_loss, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(nll, expected_nll, rtol=1e-5, atol=1e-5)
  targets = optax.smooth_labels(jnp.eye(CLASSES)[labels], alpha)
  np.testing.assert_allclose(
    loss, optax.softmax_cross_entropy(jnp.asarray(logits), targets), rtol=1e-5, atol=1e-5
  )


@pytest.mark.parametrize('alpha', [0.0, 0.1])
def test_translation_and_classification_smooth_labels_the_same_way(alpha):
  logits, labels = _logits_and_labels(1)
  flat_logits, flat_labels = logits.reshape(-1, CLASSES), labels.reshape(-1)
  per_token, _ = token_losses(jnp.asarray(flat_logits), jnp.asarray(flat_labels), alpha)
  per_image = cross_entropy(jnp.asarray(flat_logits), jnp.asarray(flat_labels), alpha)
  np.testing.assert_allclose(per_token, per_image, rtol=1e-5, atol=1e-6)


def test_smoothed_loss_is_smallest_at_the_smoothed_target_with_its_entropy_as_value():
  alpha = 0.1
  target = (1 - alpha) * np.eye(CLASSES)[2] + alpha / CLASSES
  best_logits = jnp.asarray(np.log(target)[None].astype(np.float32))
  loss, _ = token_losses(best_logits, jnp.asarray([2]), alpha)
  np.testing.assert_allclose(loss, [-(target * np.log(target)).sum()], rtol=1e-5)
  for other in (jnp.zeros((1, CLASSES)), best_logits.at[0, 2].add(1.0), best_logits.at[0, 2].add(-1.0)):
    assert float(token_losses(other, jnp.asarray([2]), alpha)[0][0]) > float(loss[0])


def _translation_outputs(label_smoothing):
  """The translation task's training loss sum, its weight and training metrics, and its evaluation
  metrics, for fixed logits, with padding and a padded row."""
  logits, _ = _logits_and_labels(2)
  labels = np.array([[4, 5, 6, 0], [2, 0, 0, 0], [3, 6, 1, 0]])  # 0 is PAD; row 2 is a padding row
  batch = {
    'src': jnp.zeros((3, 2), jnp.int32),
    'tgt_in': jnp.zeros((3, 4), jnp.int32),
    'tgt_out': jnp.asarray(labels),
    'mask': jnp.asarray([1, 1, 0]),
  }
  task = types.SimpleNamespace(label_smoothing=label_smoothing)

  def model(src, tgt_in, **kwargs):
    return jnp.asarray(logits), None

  loss_sum, weight, outputs = Translation.loss_and_outputs(task, model, batch, rngs=None, deterministic=True)
  train_metrics = TranslationMetrics.single_from_model_output(**outputs).compute()
  metrics = TranslationEvalMetrics.single_from_model_output(**Translation.eval_outputs(task, model, batch))
  return logits, labels, (loss_sum, weight, train_metrics), metrics.compute()


@pytest.mark.parametrize('alpha', [0.0, 0.1])
def test_translation_loss_and_metrics_count_only_real_target_tokens(alpha):
  logits, labels, (loss_sum, weight, train_metrics), metrics = _translation_outputs(alpha)
  smoothed, nll = _numpy_smoothed_cross_entropy(logits, labels, alpha)
  train_tokens = labels != 0
  assert int(weight) == train_tokens.sum() == 7
  np.testing.assert_allclose(loss_sum, smoothed[train_tokens].sum(), rtol=1e-5)
  np.testing.assert_allclose(train_metrics['loss'], smoothed[train_tokens].mean(), rtol=1e-5)
  eval_tokens = train_tokens & (np.array([1, 1, 0])[:, None] > 0)  # the padding row never counts
  assert eval_tokens.sum() == 4
  np.testing.assert_allclose(metrics['loss'], nll[eval_tokens].mean(), rtol=1e-5)
  np.testing.assert_allclose(metrics['perplexity'], np.exp(nll[eval_tokens].mean()), rtol=1e-5)
  correct = logits.argmax(-1) == labels
  np.testing.assert_allclose(metrics['accuracy'], correct[eval_tokens].mean(), rtol=1e-6)


def test_translation_evaluation_loss_is_the_unsmoothed_likelihood_while_training_smooths():
  """One meaning of evaluation loss in every family: the NLL per target, whatever was trained."""
  logits, labels, (_, _, train_metrics), metrics = _translation_outputs(0.3)
  smoothed, nll = _numpy_smoothed_cross_entropy(logits, labels, 0.3)
  eval_tokens = (labels != 0) & (np.array([1, 1, 0])[:, None] > 0)
  np.testing.assert_allclose(metrics['loss'], nll[eval_tokens].mean(), rtol=1e-5)
  assert abs(smoothed[eval_tokens].mean() - nll[eval_tokens].mean()) > 0.1  # the two differ here
  np.testing.assert_allclose(train_metrics['loss'], smoothed[labels != 0].mean(), rtol=1e-5)
