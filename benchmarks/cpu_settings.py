"""The CPU settings of ``benchmarks.vit_throughput`` side by side: each in fresh processes, alternating
in rounds, so that the CPU's drift from minute to minute falls on every setting alike.

  python -m benchmarks.cpu_settings                                   # 3 rounds of the six settings
  python -m benchmarks.cpu_settings --rounds 5 --timm_python /tmp/torch-env/bin/python   # and timm
  python -m benchmarks.cpu_settings --settings defaults,bfloat16      # float32 against bfloat16 only

The settings, each one process of ``python -m benchmarks.vit_throughput`` (its default model, batch
128, float32; ``--model_flags`` passes it others):

- ``defaults``: the trainer's defaults (glibc's huge-page ``malloc`` where it helps);
- ``micro_batches``: the same update as 4 micro-batches of 32 (``--grad_accum_steps 4``);
- ``eigen``: XLA's matmuls done by Eigen instead of YNNPACK
  (``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-individual_dot``);
- ``eigen_micro_batches``: both;
- ``no_huge_pages``: the defaults with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=0``;
- ``bfloat16``: the defaults computing in bfloat16 (``--dtype bfloat16``);

and, with ``--timm_python`` (a Python with PyTorch and timm, not a dependency),
``benchmarks/timm_vit_throughput.py``, the same model in timm. A round runs each setting once, in
this order, each round starting one setting later than the round before. It prints each run's
images/s, then each setting's median and its ratio to the defaults' median, and on its last line
the numbers as JSON for ``records.record`` (``SETTING.round_N.images_per_second``,
``SETTING.median``, ``SETTING.over_defaults``). Why the defaults are what they are: docs/performance.md ("CPU comparison with timm").
"""

import json
import os
import statistics
import subprocess
import sys

from absl import app, flags

from records import store

_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Rounds; each runs every setting once.', lower_bound=1)
_STEPS = flags.DEFINE_integer('steps', 20, 'Timed steps of each run.', lower_bound=1)
_MODEL_FLAGS = flags.DEFINE_string(
  'model_flags',
  '',
  "Flags added to every run of benchmarks.vit_throughput, e.g. '--depth=12 --batch_size=64'.",
)
_SETTINGS = flags.DEFINE_list(
  'settings', [], 'The settings to run, "defaults" among them (none given: all of them).'
)
_TIMM_PYTHON = flags.DEFINE_string(
  'timm_python', '', 'A Python with PyTorch and timm: adds timm to each round (none: ours only).'
)

EIGEN = {'XLA_FLAGS': '--xla_cpu_experimental_ynn_fusion_type=-individual_dot'}
# name -> (environment variables added, flags of benchmarks.vit_throughput)
SETTINGS = {
  'defaults': ({}, []),
  'micro_batches': ({}, ['--grad_accum_steps=4']),
  'eigen': (EIGEN, []),
  'eigen_micro_batches': (EIGEN, ['--grad_accum_steps=4']),
  'no_huge_pages': ({'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=0'}, []),
  'bfloat16': ({}, ['--dtype=bfloat16']),
}


SEPARATORS = {'XLA_FLAGS': ' ', 'GLIBC_TUNABLES': ':'}  # how each variable joins several settings


def setting_environment(base: dict[str, str], added: dict[str, str]) -> dict[str, str]:
  """``base`` with a setting's variables: appended to a value already there (``XLA_FLAGS``,
  ``GLIBC_TUNABLES``), so that what the caller set reaches every setting alike."""
  env = dict(base)
  for name, value in added.items():
    env[name] = f'{env[name]}{SEPARATORS.get(name, " ")}{value}' if env.get(name) else value
  return env


def images_per_second(command: list[str], added_env: dict[str, str]) -> float:
  """The images/s that one fresh process of ``command`` prints on its last line (a JSON object)."""
  env = setting_environment(dict(os.environ), added_env)
  result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
  if result.returncode != 0:
    raise SystemExit(
      f'{" ".join(command)} failed (status {result.returncode}): {result.stderr.strip()[-2000:]}'
    )
  return float(store.numbers_from_stdout(result.stdout)['images_per_second'])


def main(argv):
  del argv
  model = _MODEL_FLAGS.value.split()
  if model and _TIMM_PYTHON.value:
    raise app.UsageError(
      '--model_flags changes our model only: timm would time another one; give one of them.'
    )
  chosen = _SETTINGS.value or list(SETTINGS)
  unknown = [name for name in chosen if name not in SETTINGS]
  if unknown or 'defaults' not in chosen:
    raise app.UsageError(
      f'--settings {",".join(chosen)}: give "defaults" and any of {", ".join(SETTINGS)}'
      + (f' (unknown: {", ".join(unknown)})' if unknown else '')
    )
  runs = {
    name: (
      SETTINGS[name][0],
      [
        sys.executable,
        '-m',
        'benchmarks.vit_throughput',
        f'--steps={_STEPS.value}',
        *SETTINGS[name][1],
        *model,
      ],
    )
    for name in dict.fromkeys(chosen)
  }
  if _TIMM_PYTHON.value:
    if not os.path.exists(_TIMM_PYTHON.value):
      raise app.UsageError(
        f'--timm_python {_TIMM_PYTHON.value} does not exist (benchmarks/timm_vit_throughput.py says how to make it).'
      )
    runs['timm'] = ({}, [_TIMM_PYTHON.value, 'benchmarks/timm_vit_throughput.py', f'--steps={_STEPS.value}'])
  for name in ('XLA_FLAGS', 'GLIBC_TUNABLES'):
    if os.environ.get(name):
      print(f'note: {name}={os.environ[name]} is set here and reaches every setting, "defaults" too')
  numbers, measured, order = {}, {name: [] for name in runs}, list(runs)
  for round_ in range(1, _ROUNDS.value + 1):
    for name in order:  # each round starts one setting later: no setting always runs first
      env, command = runs[name]
      measured[name].append(images_per_second(command, env))
      numbers[f'{name}.round_{round_}.images_per_second'] = measured[name][-1]
      print(f'round {round_}: {name:20s} {measured[name][-1]:7.1f} images/s', flush=True)
    order = order[1:] + order[:1]
  defaults = statistics.median(measured['defaults'])
  print(f'medians of {_ROUNDS.value} rounds:')
  for name, values in measured.items():
    numbers[f'{name}.median'] = statistics.median(values)
    numbers[f'{name}.over_defaults'] = statistics.median(values) / defaults
    print(
      f'  {name:20s} {numbers[f"{name}.median"]:7.1f} images/s, {numbers[f"{name}.over_defaults"]:.2f} of the defaults'
    )
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  app.run(main)
