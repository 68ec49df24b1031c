"""The XLA flags of the processes the tests start.

``conftest`` adds ``FAST_COMPILE`` to ``XLA_FLAGS`` for the test session, so that the processes it
starts inherit it: XLA:CPU's older fusion emitters (``--xla_cpu_use_fusion_emitters=false``) compile
the tests' small programs faster than its MLIR ones. A process that needs host devices gets the
flag and the device count (``with_host_devices``); the commands tested as their users run them (the
throughput benchmarks, ``compile_for``) get neither the flag nor ``JAX_DISABLE_MOST_OPTIMIZATIONS``
(``as_users_run``); the Eigen-flag test then sets ``XLA_FLAGS`` to the flags it compares.
"""

FAST_COMPILE = '--xla_cpu_use_fusion_emitters=false'


def with_host_devices(count: int) -> str:
  """``XLA_FLAGS`` for a test process with ``count`` CPU devices."""
  return f'{FAST_COMPILE} --xla_force_host_platform_device_count={count}'


def as_users_run(env: dict) -> dict:
  """``env`` without the tests' compile settings (this module's flag, ``JAX_DISABLE_MOST_OPTIMIZATIONS``)."""
  env = dict(env)
  env.pop('JAX_DISABLE_MOST_OPTIMIZATIONS', None)
  flags = env.get('XLA_FLAGS', '').split()
  env['XLA_FLAGS'] = ' '.join(flag for flag in flags if flag != FAST_COMPILE)
  return env


def with_fast_compile(xla_flags: str) -> str:
  """``xla_flags`` with ``FAST_COMPILE`` added."""
  flags = xla_flags.split()
  return ' '.join(flags if FAST_COMPILE in flags else [*flags, FAST_COMPILE])
