"""Huge pages for XLA's per-step scratch memory on the CPU (Linux with glibc): why and how.

XLA's CPU backend allocates each compiled step's scratch buffer with ``posix_memalign`` and frees
it when the step ends. glibc serves a block that large with a fresh ``mmap`` and returns it with
``munmap``, so every step the kernel zero-fills the whole buffer again, one 4 KiB page fault at a
time. glibc 2.35 and newer can back such blocks with 2 MiB transparent huge pages
(``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``): 512 times fewer faults, and freed memory still goes
back to the system. What it gains on which CPU is measured in docs/performance.md ("Huge pages").

glibc reads its tunables only when a process starts, so the command-line entry points
re-execute themselves once with the tunable set, before importing anything heavy. No
library does this for us.

The run-time alternative, ``mallopt`` (one arena, no ``mmap``, no trimming), removes the
faults too, but its single arena fragments and the resident memory grows severalfold, so we
do not use it.
"""

import importlib.metadata
import importlib.util
import os
import platform
import sys

_TUNABLE_NAME = 'glibc.malloc.hugetlb'
_THP_MODE_FILE = '/sys/kernel/mm/transparent_hugepage/enabled'


def huge_page_malloc_helps() -> bool:
  """Whether this process runs XLA on the CPU under glibc, with huge pages given only on request."""
  if sys.platform != 'linux' or platform.libc_ver()[0] != 'glibc':
    return False
  try:
    with open(_THP_MODE_FILE) as mode_file:
      # '[madvise]': huge pages only where asked for, which is what the tunable does.
      # '[always]' needs no help; '[never]' cannot be helped.
      if '[madvise]' not in mode_file.read():
        return False
  except OSError:
    return False
  return _jax_runs_on_cpu()


def _jax_runs_on_cpu() -> bool:
  """True unless an accelerator may be used: JAX_PLATFORMS says so, or a GPU/TPU plugin is installed.

  Decided without importing JAX, whose backends must not start before the re-execution.
  """
  requested = os.environ.get('JAX_PLATFORMS', '')
  if requested:
    return {name.strip() for name in requested.split(',')} == {'cpu'}
  plugins = importlib.metadata.entry_points(group='jax_plugins')
  return (
    not plugins
    and importlib.util.find_spec('jax_plugins') is None
    and importlib.util.find_spec('libtpu') is None
  )


def reexec_with_huge_page_malloc() -> None:
  """Re-executes this Python command with ``glibc.malloc.hugetlb=1`` where that helps; otherwise returns.

  Returns at once when ``GLIBC_TUNABLES`` already names ``glibc.malloc.hugetlb``: after the
  re-execution, and as the way to opt out (``GLIBC_TUNABLES=glibc.malloc.hugetlb=0``).
  Call it first thing in a ``__main__`` module, before JAX starts any threads.
  """
  tunables = os.environ.get('GLIBC_TUNABLES', '')
  if _TUNABLE_NAME in tunables or not huge_page_malloc_helps():
    return
  os.environ['GLIBC_TUNABLES'] = f'{tunables}:{_TUNABLE_NAME}=1' if tunables else f'{_TUNABLE_NAME}=1'
  sys.stdout.flush()
  sys.stderr.flush()
  os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
