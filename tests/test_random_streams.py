"""Every random stream of a run comes from ``key(seed)`` and a fixed number per stream."""

import jax
import numpy as np

from trainer import random_streams


def _root(seed, stream):
  return tuple(np.asarray(jax.random.key_data(random_streams.key(seed, stream))).ravel())


def test_seeds_share_no_stream_root():
  roots = {
    (seed, name): _root(seed, number) for seed in range(3) for name, number in random_streams.STREAMS.items()
  }
  assert len(set(roots.values())) == len(roots)
  assert _root(0, random_streams.DROPOUT) != _root(1, random_streams.PARAMS)


def test_a_stream_is_key_of_the_seed_folded_with_its_number():
  assert len(set(random_streams.STREAMS.values())) == len(random_streams.STREAMS)
  expected = jax.random.fold_in(jax.random.key(7), random_streams.DROPOUT)
  assert _root(7, random_streams.DROPOUT) == tuple(np.asarray(jax.random.key_data(expected)).ravel())
