"""What every test process shares.

- The trainer's log filters, as the command lines install them (``trainer.command_line.log_filters``).
- ``jax_disable_most_optimizations``: the tests' programs are tiny, and XLA's optimisation passes
  cost more than running them unoptimised (about 40% of the fast tier's CPU time). It is also set in
  the environment, so that the processes the tests start (``train.py`` and the other command lines,
  the 8-device worker, the two-process runs, the tutorial's kernel) compile the same way.
- A persistent compilation cache for the session (``JAX_COMPILATION_CACHE_DIR``, in a temporary
  folder removed at the end, shared by the worker processes and every process they start): many tests
  train the same tiny configurations, and each run builds its programs anew. ``tests/compilations.py``
  counts a program read from the cache as a compilation. A size limit turns on JAX's file lock
  (``filelock``), so that no process reads an entry while another is still writing it.
- The longest test files are collected first (``LONGEST_FILES``), so that ``--dist loadfile`` hands
  them out before the short ones.
- ``eight_devices``: runs a test's 8-device half in one worker process shared by the session's
  tests (``tests/eight_devices.py``).
"""

import os
import shutil
import tempfile

import jax
import pytest

from tests.eight_devices import EightDevices
from trainer.command_line import log_filters

CACHE_DIR = 'JAX_COMPILATION_CACHE_DIR'
CACHE_BYTES = 8 * 2**30  # far above what the suite writes; set so that JAX locks its cache files
# The test files that take longest (the notebook, processes that train), run first.
LONGEST_FILES = ('test_tutorial.py', 'test_multihost.py', 'test_tensor_parallel.py')

log_filters.install()
os.environ['JAX_DISABLE_MOST_OPTIMIZATIONS'] = '1'
jax.config.update('jax_disable_most_optimizations', True)


def pytest_configure(config):
  if not hasattr(config, 'workerinput'):  # the first process: its folder is inherited by the workers
    config.compilation_cache = tempfile.mkdtemp(prefix='jax_compilation_cache_')
    os.environ[CACHE_DIR] = config.compilation_cache
  os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'
  os.environ['JAX_COMPILATION_CACHE_MAX_SIZE'] = str(CACHE_BYTES)
  jax.config.update('jax_compilation_cache_dir', os.environ[CACHE_DIR])
  jax.config.update('jax_compilation_cache_max_size', CACHE_BYTES)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)


def pytest_collection_modifyitems(items):
  """The longest files first, each kept whole and in order: the two workers then end together
  rather than one waiting while the other runs a long file taken last."""
  first = {name: rank for rank, name in enumerate(LONGEST_FILES)}
  items.sort(key=lambda item: first.get(item.path.name, len(first)))


def pytest_unconfigure(config):
  if hasattr(config, 'compilation_cache'):
    shutil.rmtree(config.compilation_cache, ignore_errors=True)


@pytest.fixture(scope='session')
def eight_devices(tmp_path_factory):
  worker = EightDevices(tmp_path_factory.mktemp('eight_devices') / 'log.txt')
  yield worker
  worker.close()
