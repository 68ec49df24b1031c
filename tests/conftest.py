"""What every test process shares.

- The trainer's log filters, as the command lines install them (``trainer.log_filters``).
- ``jax_disable_most_optimizations``: the tests' programs are tiny, and XLA's optimisation passes
  cost more than running them unoptimised (about 40% of the fast tier's CPU time).
- ``eight_devices``: runs a test's 8-device half in one worker process shared by the session's
  tests (``tests/eight_devices.py``).
"""

import jax
import pytest

from tests.eight_devices import EightDevices
from trainer import log_filters

log_filters.install()
jax.config.update('jax_disable_most_optimizations', True)


@pytest.fixture(scope='session')
def eight_devices(tmp_path_factory):
  worker = EightDevices(tmp_path_factory.mktemp('eight_devices') / 'log.txt')
  yield worker
  worker.close()
