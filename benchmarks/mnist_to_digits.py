"""The ViT page's MNIST-to-digits demonstration end to end, as one record: ``python -m benchmarks.mnist_to_digits``.

  python -m benchmarks.mnist_to_digits                      # needs data/mnist (python -m pipelines.download mnist)
  python -m records.record mnist_to_digits -- python -m benchmarks.mnist_to_digits

It runs the commands of docs/vit.md ("A demonstration: MNIST to digits at another resolution"), each
as its own process, in this order: pre-train on MNIST and evaluate; export the official ``.npz``;
few-shot linear accuracy of the frozen pre-trained features on the digits and on MNIST; fine-tune
on the digits from the export, the same from scratch, and the linear probe, each evaluated, with
the periodic few-shot evaluation its config runs at its last step. Every step's numbers and
seconds go, prefixed by the step's name, into one JSON object on the last line of stdout (what
``records.record`` reads), so the one pre-training serves every row of the results page's
"Pretrained ViTs" tables. A step that fails stops the chain with its command and exit status.

``--steps N`` trains every run N steps instead of its config's (a quick check of the chain; the
numbers then mean nothing).
"""

import json
import pathlib
import shlex
import subprocess
import sys
import time
from typing import Any

from absl import app, flags

from records import store
from trainer.io.metrics_io import read_metrics

FEWSHOT_SHOTS = '1,5,10,25'
PROBE = ('--config.optimizer.frozen=^(?!head\\.)', '--config.optimizer.learning_rate=0.1')
EVALUATED = ('accuracy', 'loss', 'step')


def run_step(name: str, args: list[str], needs: tuple[str, ...] = ()) -> tuple[dict[str, Any], float]:
  """Runs ``python ARGS``; returns the JSON object on its last stdout line and its seconds.

  A step that fails, or that was to print ``needs`` and did not, stops the chain naming it."""
  command = shlex.join(['python', *args])
  print(f'--- {name}: {command}', flush=True)
  start = time.perf_counter()
  process = subprocess.run([sys.executable, *args], stdout=subprocess.PIPE, text=True, check=False)
  seconds = time.perf_counter() - start
  sys.stdout.write(process.stdout)
  if process.returncode:
    raise SystemExit(f'{name}: `{command}` exited with status {process.returncode}')
  try:
    numbers = store.numbers_from_stdout(process.stdout)
  except store.RecordError:
    numbers = {}
  missing = [key for key in needs if key not in numbers]
  if missing:
    raise SystemExit(f'{name}: `{command}` printed no JSON object with {", ".join(missing)} on its last line')
  return numbers, seconds


def last_fewshot(workdir: pathlib.Path) -> dict[str, float]:
  """The few-shot numbers of the last evaluation that logged them in ``metrics.jsonl``."""
  found = {}
  for entry in read_metrics(workdir):
    fewshot = {key: value for key, value in entry.items() if key.startswith('fewshot_')}
    if fewshot:
      found = fewshot
  if not found:
    raise SystemExit(f'{workdir}/metrics.jsonl logged no few-shot evaluation')
  return found


def chain(root: pathlib.Path, steps: int | None) -> dict[str, Any]:
  override = [f'--config.total_steps={steps}'] if steps else []
  pretrain, export = str(root / 'vit_mnist_pretrain'), str(root / 'vit_mnist_pretrain.npz')
  numbers: dict[str, Any] = {}

  def step(name: str, args: list[str], keep: tuple[str, ...] = (), needs: tuple[str, ...] = ()) -> None:
    result, seconds = run_step(name, args, needs or keep)
    numbers[f'{name}.seconds'] = round(seconds, 1)
    measured = {key: value for key, value in result.items() if isinstance(value, (int, float))}
    numbers.update({f'{name}.{key}': value for key, value in measured.items() if not keep or key in keep})

  step(
    'pretrain', ['train.py', '--config', 'configs/vit_mnist_pretrain.py', '--workdir', pretrain, *override]
  )
  step('pretrain_eval', ['evaluate.py', '--workdir', pretrain], EVALUATED)
  step('export', ['-m', 'vit.weights.export_npz', '--workdir', pretrain, '--out', export])
  shots = tuple(f'fewshot_{k}shot' for k in FEWSHOT_SHOTS.split(','))
  for source, name in (('digits', 'fewshot_digits'), ('same', 'fewshot_mnist')):
    fewshot_args = ['-m', 'vit.fewshot', '--workdir', pretrain, '--source', source, '--shots', FEWSHOT_SHOTS]
    step(name, fewshot_args, needs=shots)
  finetune = ['train.py', '--config', 'configs/vit_digits_finetune.py']
  runs = {
    'finetune': [f'--config.init_from.path={export}'],
    'scratch': ['--config.init_from.path='],
    'probe': [f'--config.init_from.path={export}', *PROBE],
  }
  for name, run_flags in runs.items():
    workdir = root / f'vit_digits_{name}'
    step(name, [*finetune, '--workdir', str(workdir), *run_flags, *override])
    step(f'{name}_eval', ['evaluate.py', '--workdir', str(workdir)], EVALUATED)
    numbers.update({f'{name}_fewshot.{key}': value for key, value in last_fewshot(workdir).items()})
  return numbers


def _define_flags() -> None:
  """The command's flags, defined only when it runs as a command (tests import this module beside others)."""
  global _WORKDIR, _STEPS  # pylint: disable=global-statement
  _WORKDIR = flags.DEFINE_string(
    'workdir', 'runs/mnist_to_digits', 'the folder that holds every run of the chain'
  )
  _STEPS = flags.DEFINE_integer('steps', None, 'train each run this many steps (a quick check of the chain)')


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  if _STEPS.value is not None and _STEPS.value < 1:
    raise app.UsageError(f'--steps must be at least 1, got {_STEPS.value}')
  root = pathlib.Path(_WORKDIR.value)
  if root.exists() and not root.is_dir():
    raise app.UsageError(f"--workdir {root} is a file; give a folder for the chain's runs")
  if root.exists() and any(root.iterdir()):
    raise app.UsageError(f'--workdir {root} is not empty; the chain starts every run afresh')
  numbers = chain(root, _STEPS.value)
  print(json.dumps(numbers, sort_keys=True))  # the numbers for records.record


if __name__ == '__main__':
  _define_flags()
  app.run(main)
