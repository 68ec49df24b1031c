"""Fingerprints of every config's model: a hash of its initial parameters and of one forward pass.

A refactor of model code must leave both unchanged; this prints them, one JSON line per config,
and compares them with an earlier run:

  python -m benchmarks.model_fingerprints --out before.json
  python -m benchmarks.model_fingerprints --compare before.json

Each config in ``configs/`` is built as its task builds it without data (``Task.without_data``),
with the data sizes below, scanned and unrolled (``model.scan_layers``), and with the parameters
drawn from ``nnx.Rngs(0)``; the forward pass is deterministic on a fixed input, and its hash covers
the logits and every intermediate (pre-logits features, attention weights), since a zero-initialised
head gives zero logits.
"""

import argparse
import hashlib
import importlib
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainer.task import task_class

CONFIGS = pathlib.Path(__file__).resolve().parent.parent / 'configs'
# data source -> the sizes a workdir records for it (``Task.sizes``)
SIZES = {
  'digits': dict(num_classes=10, image_shape=[8, 8, 1]),
  'mnist': dict(num_classes=10, image_shape=[28, 28, 1]),
  'cifar10': dict(num_classes=10, image_shape=[32, 32, 3]),
  'imagenet2012': dict(num_classes=1000, image_shape=[224, 224, 3]),
  'video': dict(num_classes=10, channels=1),
  'text': dict(source_vocab_size=101, target_vocab_size=101),  # one size: some configs share embeddings
}


def _sizes(config) -> dict:
  family = config.task.split('.')[0]
  if family == 'seq2seq':
    return SIZES['text']
  if family == 'video':
    return SIZES['video']
  source = config.data.get('name') or config.data.get('source')
  return SIZES.get(source, SIZES['imagenet2012'])


def _digest(tree) -> str:
  hasher = hashlib.sha256()
  for path, leaf in sorted(jax.tree_util.tree_flatten_with_path(tree)[0], key=lambda item: str(item[0])):
    array = np.asarray(leaf)
    hasher.update(f'{jax.tree_util.keystr(path)}:{array.dtype}:{array.shape}'.encode())
    hasher.update(array.tobytes())
  return hasher.hexdigest()[:16]


def _forward(task, model, config):
  family = config.task.split('.')[0]
  if family == 'seq2seq':
    source = (jnp.arange(2 * 7).reshape(2, 7) % 90) + 3
    target = (jnp.arange(2 * 5).reshape(2, 5) % 100) + 3
    return model(source, target, deterministic=True, return_weights=True)
  shape = task.sizes.clip_shape if family == 'video' else task.sizes.image_shape  # the input one example has
  inputs = jnp.sin(jnp.arange(2 * int(np.prod(shape)), dtype=jnp.float32)).reshape(2, *shape)
  return model(inputs, return_weights=True)


def fingerprint(name: str, scan_layers: bool) -> dict:
  config = importlib.import_module(f'configs.{name}').get_config()
  if 'scan_layers' not in config.model and scan_layers:
    return {}
  if 'scan_layers' in config.model or scan_layers:
    config.model.scan_layers = scan_layers
  task = task_class(config.task).without_data(config, _sizes(config))
  model = task.make_model(nnx.Rngs(0))
  parameters = nnx.state(model, nnx.Param)
  return dict(
    config=name,
    scan_layers=scan_layers,
    parameters=_digest(parameters),
    forward=_digest(_forward(task, model, config)),
  )


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', help='write the fingerprints to this JSON file')
  parser.add_argument('--compare', help='compare with the fingerprints in this JSON file')
  parser.add_argument('--configs', default='', help='comma-separated config names (default: all)')
  args = parser.parse_args(argv)
  names = (
    args.configs.split(',')
    if args.configs
    else sorted(path.stem for path in CONFIGS.glob('*.py') if 'def get_config' in path.read_text())
  )
  rows = []
  for name in names:
    for scan_layers in (False, True):
      row = fingerprint(name, scan_layers)
      if row:
        print(json.dumps(row), flush=True)
        rows.append(row)
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(rows, indent=1) + '\n')
  if args.compare:
    before = {
      (row['config'], row['scan_layers']): row for row in json.loads(pathlib.Path(args.compare).read_text())
    }
    changed = [row for row in rows if before.get((row['config'], row['scan_layers'])) not in (None, row)]
    missing = [key for key in before if key not in {(row['config'], row['scan_layers']) for row in rows}]
    for row in changed:
      print(f'changed: {row["config"]} scan_layers={row["scan_layers"]}', file=sys.stderr)
    print(f'{len(rows) - len(changed)} of {len(rows)} fingerprints as before; {len(missing)} missing')
    if changed:
      sys.exit(1)


if __name__ == '__main__':
  main()
