"""What every test process shares.

- The trainer's log filters, as the command lines install them (``trainer.command_line.log_filters``).
- ``jax_disable_most_optimizations``: the tests' programs are tiny, and XLA's optimisation passes
  cost more than running them unoptimised (about 40% of the fast tier's CPU time). It is also set in
  the environment, so that the processes the tests start (``train.py`` and the other command lines,
  the 8-device worker, the two-process runs, the tutorial's kernel) compile the same way.
- The longest test files are collected first (``LONGEST_FILES``), so that ``--dist loadfile`` hands
  them out before the short ones.
- ``eight_devices``: runs a test's 8-device half in one worker process shared by the session's
  tests (``tests/eight_devices.py``).
"""

import os

import jax
import pytest

from tests.eight_devices import EightDevices
from trainer.command_line import log_filters

# The test files that take longest (the notebook, processes that train), run first.
LONGEST_FILES = ('test_tutorial.py', 'test_multihost.py', 'test_tensor_parallel.py')

log_filters.install()
os.environ['JAX_DISABLE_MOST_OPTIMIZATIONS'] = '1'
jax.config.update('jax_disable_most_optimizations', True)


def pytest_collection_modifyitems(items):
  """The longest files first, each kept whole and in order: the two workers then end together
  rather than one waiting while the other runs a long file taken last."""
  first = {name: rank for rank, name in enumerate(LONGEST_FILES)}
  items.sort(key=lambda item: first.get(item.path.name, len(first)))


@pytest.fixture(scope='session')
def eight_devices(tmp_path_factory):
  worker = EightDevices(tmp_path_factory.mktemp('eight_devices') / 'log.txt')
  yield worker
  worker.close()
