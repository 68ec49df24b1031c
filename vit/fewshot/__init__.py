"""Few-shot linear evaluation of frozen ViT features (the ViT paper's k-shot linear accuracy).

As big_vision's few-shot evaluator: the pre-logits features of a frozen model; for each seed,
``k`` training examples per class are drawn, a closed-form L2-regularised least-squares
classifier is fitted to targets of +1 / -1 per class, and its accuracy on the test split is
averaged over the seeds. The regulariser is chosen per draw, from a grid of powers of two, by
the accuracy on other training examples (``held_out_per_class`` per class, disjoint from the
draw), so the test split picks nothing. The draws come from a pool of training examples
(``pool_ids``): a random subset of the train split drawn with a fixed seed, the same rows on every
process and every run, so a split stored class by class gives a pool of every class.

The features are computed on the trainer's devices (``trainer.partitioning.Devices``): each process
reads its own rows of every batch, the batch is split over the mesh's data axis, and the
features of every process are gathered, so each process solves the same closed-form problem
(``fewshot_results``, a pure function of the features) and gets the same accuracies. The
feature extractor is compiled once: it takes the parameters as arguments, so later
evaluations (new parameters of the same model) reuse it.

The command that evaluates a workdir, ``python -m vit.fewshot``, is ``vit/fewshot/__main__.py``;
nothing here imports it.
"""

import functools

import jax
import numpy as np
from flax import nnx

L2_GRID = tuple(2.0**power for power in range(-10, 11, 2))
POOL_SEED = 0


def pool_ids(num_train: int, size: int | None, seed: int = POOL_SEED) -> np.ndarray:
  """Sorted ids of the few-shot pool: ``size`` of the ``num_train`` training examples drawn without
  replacement by ``seed`` (all of them, in order, when ``size`` is None or not below ``num_train``)."""
  if size is None or size >= num_train:
    return np.arange(num_train)
  return np.sort(np.random.default_rng(seed).choice(num_train, size=size, replace=False))


@functools.partial(jax.jit, static_argnums=0)
def _pre_logits(graphdef: nnx.GraphDef, state: nnx.State, images: jax.Array) -> jax.Array:
  return nnx.merge(graphdef, state)(images)[1]['pre_logits']


def extract_features(model, batches, devices) -> tuple[np.ndarray, np.ndarray]:
  """``(features [n, d], labels [n])`` of every process's rows that the batches' ``mask`` keeps.

  ``batches`` are this process's rows of each global batch; ``devices`` (a
  ``trainer.partitioning.Devices``) spreads them over the mesh and gathers the features back, in
  the order of the global batches, on every process.
  """
  graphdef, state = nnx.split(model)
  features, labels = [], []
  for local in batches:
    batch = devices.shard({name: local[name] for name in ('image', 'label', 'mask')})
    batch_features, label, mask = devices.gather(
      (_pre_logits(graphdef, state, batch['image']), batch['label'], batch['mask'])
    )
    keep = mask > 0
    features.append(np.asarray(batch_features, np.float64)[keep])
    labels.append(label[keep])
  return np.concatenate(features), np.concatenate(labels)


def _fit(x: np.ndarray, y: np.ndarray, l2: float):
  """Ridge regression with an intercept, in its dual form (fewer examples than features)."""
  x_mean, y_mean = x.mean(0), y.mean(0)
  x, y = x - x_mean, y - y_mean
  weights = x.T @ np.linalg.solve(x @ x.T + l2 * np.eye(len(x)), y)
  return lambda features: (features - x_mean) @ weights + y_mean


def _draw(
  labels: np.ndarray, classes: np.ndarray, shots: int, held_out: int, rng
) -> tuple[np.ndarray, np.ndarray]:
  train, validation = [], []
  for label in classes:
    order = rng.permutation(np.flatnonzero(labels == label))
    train.append(order[:shots])
    validation.append(order[shots : shots + held_out])
  return np.concatenate(train), np.concatenate(validation)


def fewshot_accuracy(
  train: tuple[np.ndarray, np.ndarray],
  test: tuple[np.ndarray, np.ndarray],
  shots: int,
  *,
  seeds: int = 3,
  held_out_per_class: int = 10,
) -> tuple[float, float]:
  """Mean and standard deviation over ``seeds`` draws of the ``shots``-per-class test accuracy."""
  (train_x, train_y), (test_x, test_y) = train, test
  classes = np.unique(train_y)
  scale = np.mean(np.linalg.norm(train_x - train_x.mean(0), axis=1)) or 1.0
  train_x, test_x = train_x / scale, test_x / scale
  accuracies = []
  for seed in range(seeds):
    rng = np.random.default_rng(seed)
    chosen, validation = _draw(train_y, classes, shots, held_out_per_class, rng)
    targets = 2.0 * (train_y[chosen, None] == classes[None]) - 1.0

    def accuracy(predict, x, y):
      return float(np.mean(classes[np.argmax(predict(x), axis=1)] == y))

    fits = [_fit(train_x[chosen], targets, l2) for l2 in L2_GRID]
    if len(validation):
      best = max(range(len(fits)), key=lambda i: accuracy(fits[i], train_x[validation], train_y[validation]))
    else:
      best = len(fits) // 2
    accuracies.append(accuracy(fits[best], test_x, test_y))
  return float(np.mean(accuracies)), float(np.std(accuracies))


def fewshot_results(
  train: tuple[np.ndarray, np.ndarray],
  test: tuple[np.ndarray, np.ndarray],
  shots: tuple[int, ...],
  *,
  seeds: int = 3,
  held_out_per_class: int = 10,
) -> dict[str, float]:
  """``{'fewshot_5shot': mean accuracy, 'fewshot_5shot_std': ..., ...}`` for each k in ``shots``."""
  results = {}
  for k in shots:
    mean, std = fewshot_accuracy(train, test, k, seeds=seeds, held_out_per_class=held_out_per_class)
    results[f'fewshot_{k}shot'], results[f'fewshot_{k}shot_std'] = mean, std
  return results
