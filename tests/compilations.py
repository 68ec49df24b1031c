"""Counting XLA compilations in a test, through JAX's monitoring events."""

import contextlib

import jax

# A program compiled by XLA, or one read from the persistent compilation cache (``tests/conftest.py``)
# that would otherwise have been compiled.
_EVENTS = ('/jax/core/compile/backend_compile_duration', '/jax/compilation_cache/cache_retrieval_time_sec')


@contextlib.contextmanager
def counted_compilations():
  """A list that gets one entry per XLA compilation made inside the block."""
  compiles = []

  def on_event(event, duration, **kwargs):
    del duration, kwargs
    if event in _EVENTS:
      compiles.append(event)

  jax.monitoring.register_event_duration_secs_listener(on_event)
  try:
    yield compiles
  finally:
    jax.monitoring.unregister_event_duration_listener(on_event)
