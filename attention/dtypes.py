"""The compute dtypes a model config may name (``model.dtype``), for every model family."""

import jax.numpy as jnp

DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


def resolve_dtype(name: str):
  """``'bfloat16'`` -> ``jnp.bfloat16``; parameters stay float32 whatever is computed in."""
  if name not in DTYPES:
    raise ValueError(f'Unknown dtype {name!r}; allowed values: {", ".join(DTYPES)}.')
  return DTYPES[name]
