"""Counting XLA compilations in a test, through JAX's monitoring events."""

import contextlib

import jax

_COMPILED = '/jax/core/compile/backend_compile_duration'


@contextlib.contextmanager
def counted_compilations():
  """A list that gets one entry per XLA compilation made inside the block."""
  compiles = []

  def on_event(event, duration, **kwargs):
    del duration, kwargs
    if event == _COMPILED:
      compiles.append(event)

  jax.monitoring.register_event_duration_secs_listener(on_event)
  try:
    yield compiles
  finally:
    jax.monitoring.unregister_event_duration_listener(on_event)
