"""The XLA flag of the fastest CPU throughput command (docs/performance.md) is accepted and changes
no result.

``--xla_cpu_experimental_ynn_fusion_type=-individual_dot`` (benchmarks/vit_throughput.py) is
an experimental XLA flag, and XLA aborts on a flag it does not know: this fails if an
installed jaxlib drops it.
"""

import os
import pathlib
import subprocess
import sys

import pytest

from tests.xla_flags import as_users_run

pytestmark = pytest.mark.slow  # each test starts a subprocess with its XLA flags

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_EIGEN_MATMULS = '--xla_cpu_experimental_ynn_fusion_type=-individual_dot'

# A dense layer's loss and gradients; the weight gradient's matmul takes a transposed operand,
# the case the flag changes. Compared with float64 NumPy.
_DENSE_GRADIENTS = """
import jax, jax.numpy as jnp, numpy as np
assert jax.default_backend() == 'cpu'
rng = np.random.default_rng(0)
x, w, target = rng.normal(size=(96, 48)), rng.normal(size=(48, 80)), rng.normal(size=(96, 80))
loss = lambda x, w: 0.5 * jnp.sum((x @ w - target.astype(np.float32)) ** 2)
value, (dx, dw) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(x.astype(np.float32), w.astype(np.float32))
residual = x @ w - target
np.testing.assert_allclose(value, 0.5 * np.sum(residual ** 2), rtol=1e-4)
np.testing.assert_allclose(dx, residual @ w.T, rtol=1e-4, atol=1e-3)
np.testing.assert_allclose(dw, x.T @ residual, rtol=1e-4, atol=1e-3)
print('ok')
"""


@pytest.mark.parametrize('xla_flags', ['', _EIGEN_MATMULS])
def test_dense_gradients_on_the_cpu(xla_flags):
  # the flag acts in XLA's optimising passes: the command compiles as its users run it
  env = {**as_users_run(os.environ), 'XLA_FLAGS': xla_flags, 'JAX_PLATFORMS': 'cpu'}
  result = subprocess.run(
    [sys.executable, '-c', _DENSE_GRADIENTS], cwd=_ROOT, env=env, capture_output=True, text=True, timeout=120
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.split()[-1] == 'ok'
