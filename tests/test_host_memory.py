"""The entry points' re-execution with glibc's huge-page malloc (trainer/command_line/host_memory.py)."""

import os
import pathlib
import subprocess
import sys

import pytest

from trainer.command_line import host_memory

pytestmark = pytest.mark.slow  # each test starts a subprocess

_ROOT = pathlib.Path(__file__).resolve().parents[1]

# Prints 'start' each time it runs, then its GLIBC_TUNABLES and how much of a fresh
# 64 MiB malloc block the kernel backs with transparent huge pages.
_CHILD = """
import ctypes, os
print('start', flush=True)
from trainer.command_line import host_memory
host_memory.reexec_with_huge_page_malloc()

def anon_huge_kib():
  with open('/proc/self/smaps_rollup') as smaps:
    return next(int(line.split()[1]) for line in smaps if line.startswith('AnonHugePages:'))

libc = ctypes.CDLL('libc.so.6')
libc.malloc.restype = ctypes.c_void_p
before = anon_huge_kib()
block = libc.malloc(64 << 20)
ctypes.memset(block, 1, 64 << 20)
print(os.environ.get('GLIBC_TUNABLES'), anon_huge_kib() - before)
"""


def _run_child(**env_changes):
  env = {key: value for key, value in os.environ.items() if key not in ('GLIBC_TUNABLES', 'JAX_PLATFORMS')}
  env.update(env_changes)
  result = subprocess.run(
    [sys.executable, '-c', _CHILD], cwd=_ROOT, env=env, capture_output=True, text=True, check=True, timeout=60
  )
  lines = result.stdout.split()
  starts = lines.count('start')
  tunables, huge_kib = lines[-2], int(lines[-1])
  return starts, tunables, huge_kib


needs_huge_page_malloc = pytest.mark.skipif(
  not host_memory.huge_page_malloc_helps(),
  reason='needs Linux, glibc, transparent huge pages in madvise mode and JAX on the CPU',
)


@needs_huge_page_malloc
def test_reexecutes_once_and_backs_large_blocks_with_huge_pages():
  starts, tunables, huge_kib = _run_child()
  assert starts == 2
  assert tunables == 'glibc.malloc.hugetlb=1'
  assert huge_kib >= 32 * 1024


@needs_huge_page_malloc
def test_keeps_other_tunables():
  starts, tunables, _ = _run_child(GLIBC_TUNABLES='glibc.malloc.tcache_count=8')
  assert starts == 2
  assert tunables == 'glibc.malloc.tcache_count=8:glibc.malloc.hugetlb=1'


@needs_huge_page_malloc
def test_opting_out_runs_once_without_huge_pages():
  starts, tunables, huge_kib = _run_child(GLIBC_TUNABLES='glibc.malloc.hugetlb=0')
  assert starts == 1
  assert tunables == 'glibc.malloc.hugetlb=0'
  assert huge_kib < 32 * 1024


def test_an_accelerator_platform_is_left_alone():
  starts, tunables, _ = _run_child(JAX_PLATFORMS='cuda')
  assert starts == 1
  assert tunables == 'None'
