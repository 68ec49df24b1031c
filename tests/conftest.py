"""What every test process shares.

- The trainer's log filters, as the command lines install them (``trainer.command_line.log_filters``).
- ``jax_disable_most_optimizations``: the tests' programs are tiny, and XLA's optimisation passes
  cost more than running them unoptimised. It is also set in the environment, so that the processes
  the tests start (``train.py`` and the other command lines, the 8-device worker, the two-process
  runs, the tutorial's kernel) compile the same way.
- XLA:CPU's older fusion emitters, in ``XLA_FLAGS`` for the same processes (``tests/xla_flags.py``):
  compiling is most of what the slow tier does, and they compile faster.
- The longest test files are collected first, longest first (``LONGEST_FILES``), and
  ``--no-loadscope-reorder`` (``pyproject.toml``) keeps that order when ``--dist loadfile`` hands
  the files out (by default it hands out the files with the most tests first), so that no long
  file is handed out last.
- A compilation cache shared by the session's processes (``JAX_COMPILATION_CACHE_DIR``, a fresh
  folder removed at the end): many tests train the same tiny configs in processes of their own, and
  each would otherwise compile the same steps again. Set the variable to an empty string to turn it
  off, or to a folder to keep the cache across sessions.
- ``eight_devices``: runs a test's 8-device half in one worker process shared by the session's
  tests (``tests/eight_devices.py``).
"""

import atexit
import os
import shutil
import tempfile

from tests.xla_flags import with_fast_compile

# Before jax is imported, so that this process and every process it starts read it.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  _cache_dir = tempfile.mkdtemp(prefix='jax-compilation-cache-')
  atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
  os.environ['JAX_COMPILATION_CACHE_DIR'] = _cache_dir
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')

os.environ['XLA_FLAGS'] = with_fast_compile(os.environ.get('XLA_FLAGS', ''))

import jax
import pytest

from tests.eight_devices import EightDevices
from trainer.command_line import log_filters

# The test files that take longest (the notebook, processes that train, 8-device runs), longest first.
LONGEST_FILES = (
  'test_multihost.py',
  'test_bad_config.py',
  'test_predict.py',
  'test_explore.py',
  'test_vit_training.py',
  'test_video_scanned_layers.py',
  'test_tutorial.py',
  'test_scanned_layers.py',
  'test_ablation.py',
  'test_distillation.py',
  'test_translation_training.py',
  'test_tensor_parallel.py',
  'test_packing.py',
  'test_benchmarks.py',
  'test_checkpoints.py',
  'test_loop_faults.py',
  'test_rnn_model.py',
  'test_full_disk.py',
  'test_one_gradient_reduction.py',
  'test_video_training.py',
  'test_vit_weights.py',
)

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
