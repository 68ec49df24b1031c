"""Under fsdp each layer gathers its own weights (``config.mesh.gather_per_layer``), on 8 host devices.

The compiled train step of a tiny bfloat16 ViT, scanned and rematerialised, is read for its
all-gathers: with the option each of a block's four kernels is gathered inside the scanned loop,
once forward and once for the recomputation, and the step's all-gathers move fewer bytes than
XLA's own placement, at most twice the model's float32 bytes; the loss is the same with it and
without. (XLA:CPU gathers in float32 what a TPU gathers in bfloat16: the dtype is checked by
compiling for a TPU, ``tests/test_compile_for.py``.)
"""

import numpy as np
import pytest

from tests.vit_test_configs import tiny_vit_config

pytestmark = pytest.mark.slow  # runs on 8 host devices

#: a bfloat16 ViT whose block kernels are big enough to be sharded (FSDP_MIN_SIZE) and cut by 8
TINY = {
  'model.width': 64,
  'model.mlp_dim': 256,
  'model.num_heads': 2,
  'model.depth': 3,
  'model.dtype': 'bfloat16',
  'model.dropout': 0.0,
  'model.scan_layers': True,
  'model.remat': 'full',
  'data.image_size': (16, 16),
}


def compiled_step(gather_per_layer: bool) -> dict:
  """On 8 devices: the all-gathers of the fsdp=8 step (count, bytes, each one's dtype and the depth of
  loops it runs in), the parameters' float32 bytes and the loss of one step on a fixed batch."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from benchmarks.compile_for import _computations, _runs, collectives  # pylint: disable=g-import-not-at-top
  from trainer.partitioning import batch_sharding  # pylint: disable=g-import-not-at-top
  from trainer.run_step import build_step  # pylint: disable=g-import-not-at-top
  from trainer.state import train_metrics  # pylint: disable=g-import-not-at-top
  from trainer.task import task_class  # pylint: disable=g-import-not-at-top
  from trainer.validation import resolve_config  # pylint: disable=g-import-not-at-top

  config = tiny_vit_config(**TINY)
  config.mesh.fsdp = 8
  config.mesh.gather_per_layer = gather_per_layer
  family = task_class(config.task)
  resolve_config(config, family)
  task = family.without_data(config, {'num_classes': 10, 'channels': 1})
  run_step = build_step(config, task, 100)
  init = run_step.init
  state, parts = init.create()
  step = run_step.train_step(parts)
  metrics = jax.device_put(train_metrics(task).empty(), jax.sharding.NamedSharding(run_step.mesh, jax.P()))
  shapes = task.batch_shapes(config.batch_size)
  digits = {name: (np.arange(np.prod(s.shape)) % 10).reshape(s.shape) for name, s in shapes.items()}
  batch = {'image': digits['image'] / 10, 'label': digits['label']}
  batch = {
    name: jax.device_put(jnp.asarray(x, shapes[name].dtype), batch_sharding(run_step.mesh))
    for name, x in batch.items()
  }
  text = step.lower(state, metrics, batch).compile().as_text()
  runs, _ = _runs(_computations(text))
  in_loop = [
    (line.split('= ')[1].split('[')[0], runs[name] > 1)
    for name, lines in _computations(text).items()
    for line in lines
    if ' all-gather(' in line or ' all-gather-start(' in line
  ]
  _, metrics = step(state, metrics, batch)
  return {
    'all_gather': collectives(text)['all-gather'],
    'gathers': in_loop,
    'param_bytes': int(sum(x.size * 4 for x in jax.tree.leaves(init.abstract_state.params))),
    'loss': float(metrics.compute()['loss']),
  }


def test_each_layer_gathers_its_weights_in_bfloat16_inside_the_loop(eight_devices):
  gathered = eight_devices(compiled_step, gather_per_layer=True)
  left_to_xla = eight_devices(compiled_step, gather_per_layer=False)
  # each of the four kernels in the scanned loop's body, forward and again recomputed
  assert sum(in_loop for _, in_loop in gathered['gathers']) >= 2 * 4
  assert sum(in_loop for _, in_loop in left_to_xla['gathers']) < 2 * 4
  assert gathered['all_gather']['bytes'] <= 2 * gathered['param_bytes']
  assert gathered['all_gather']['bytes'] < left_to_xla['all_gather']['bytes']
  np.testing.assert_allclose(gathered['loss'], left_to_xla['loss'], rtol=1e-6)
