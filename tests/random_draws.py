"""What a training pass draws: each Bernoulli mask (dropout, stochastic depth) with its keep probability.

``recorded_draws(run)`` runs ``run()`` (jitted or not, scanned or unrolled) with
``jax.random.bernoulli`` wrapped so that each call also sends its keep probability and its mask to
the host (``jax.debug.callback``), and returns them in the order the computation made them. A
stochastic-depth mask has one value per row (shape ``[rows, 1, ...]``); a dropout mask has the
activations' shape.
"""

import contextlib

import jax
import numpy as np

_bernoulli = jax.random.bernoulli


@contextlib.contextmanager
def _recording(draws: list):
  def record(key, p=0.5, shape=None, **options):
    mask = _bernoulli(key, p, shape, **options)
    jax.debug.callback(lambda p, mask: draws.append((float(p), np.asarray(mask))), p, mask, ordered=True)
    return mask

  jax.random.bernoulli = record
  try:
    yield
  finally:
    jax.random.bernoulli = _bernoulli


def recorded_draws(run) -> list[tuple[float, np.ndarray]]:
  draws = []
  with _recording(draws):
    jax.block_until_ready(run())
  jax.effects_barrier()
  return draws


def _drops_rows(mask: np.ndarray) -> bool:
  return all(size == 1 for size in mask.shape[1:])


def drop_path_masks(draws) -> list[tuple[float, np.ndarray]]:
  """The stochastic-depth draws: one value per row (an example, or an example's frame or patch
  position where a layout drops over those), flattened."""
  return [(p, mask.reshape(-1)) for p, mask in draws if _drops_rows(mask)]


def dropout_masks(draws) -> list[np.ndarray]:
  """The element-wise dropout draws."""
  return [mask for _, mask in draws if not _drops_rows(mask)]


def assert_masks_differ(masks: list[np.ndarray]) -> None:
  """No two masks of the same shape are equal (a shared key would draw the same mask)."""
  assert len(masks) >= 2, len(masks)
  for i, first in enumerate(masks):
    for second in masks[i + 1 :]:
      if first.shape == second.shape:
        assert not np.array_equal(first, second), 'two layers drew the same dropout mask'


def assert_drop_path_follows(draws, rates, per_layer: int) -> None:
  """``per_layer`` stochastic-depth draws (one per residual branch) in each layer whose rate is above 0
  (a scanned layer of rate 0 may draw and keep everything); the keep probabilities are ``1 - rates``
  and the kept fractions agree with them within 5 standard deviations."""
  masks = drop_path_masks(draws)
  drawn = [(p, mask) for p, mask in masks if p < 1.0]
  expected = [1.0 - rate for rate in rates if rate > 0 for _ in range(per_layer)]
  np.testing.assert_allclose(sorted(p for p, _ in drawn), sorted(expected), rtol=1e-6)
  for p, mask in drawn:
    spread = 5 * np.sqrt(p * (1 - p) / mask.size)
    assert abs(mask.mean() - p) <= spread, (p, mask.mean())
  assert all(mask.all() for p, mask in masks if p == 1.0)
