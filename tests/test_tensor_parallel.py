"""Tensor parallelism (``config.mesh.model``) on 8 host devices, in one subprocess shared by the tests.

A tiny ViT trains for a few steps under ``data=8``, ``data=2, fsdp=2, model=2`` and
``data=4, model=2``: the losses must agree, the attention and MLP kernels (and their Adam
moments) must be cut by the path rule so that each device holds a share of them, and the
checkpoint saved under ``data=2, fsdp=2, model=2`` must restore under ``data=8`` and on one
device with the values it was saved with.
"""

import json
import re

import jax
import numpy as np
import pytest
from flax import nnx

from tests.test_fsdp import WIDE, _losses, _run_on_eight_devices
from tests.vit_test_configs import tiny_vit_config
from trainer import validation
from trainer.errors import ConfigError
from trainer.evaluation import restore_checkpoint

pytestmark = pytest.mark.slow  # runs on 8 host devices in a subprocess

# Four steps, one evaluation and one checkpoint: the runs are what takes the time.
SHORT = dict(WIDE, total_steps=4, eval_every_steps=4, checkpoint_every_steps=4)
MESHES = {
  'data8': dict(data=8),
  'tp': dict(data=2, fsdp=2, model=2),
  'data_model': dict(data=4, model=2),
}
# The tensor-parallel kernels of the tiny ViT's one block: (name, dimension cut over model).
KERNELS = {
  'query': 1,
  'key': 1,
  'value': 1,
  'out': 0,
  'fc1': 1,
  'fc2': 0,
}


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """Trains under each of ``MESHES`` on 8 devices; returns the workdirs and what the subprocess saw."""
  root = tmp_path_factory.mktemp('tensor_parallel')
  out = _run_on_eight_devices(f"""
      import json, pathlib
      import numpy as np
      import jax
      from flax import nnx
      from tests.vit_test_configs import tiny_vit_config
      from trainer import loop
      from trainer.errors import ConfigError
      from trainer.evaluation import restore_checkpoint
      from trainer.loop import train_and_evaluate
      from trainer.partitioning import make_mesh, state_shardings

      root = pathlib.Path({str(root)!r})
      seen = {{'held': {{}}}}
      original = loop._Training.run

      def flat(tree):
        return jax.tree_util.tree_flatten_with_path(tree)[0]

      def run(self, stop):
        seen['held'][self.workdir.name] = {{
          jax.tree_util.keystr(path): [
            list(a.sharding.spec), a.nbytes, a.addressable_shards[0].data.nbytes
          ] for path, a in flat(self.state)
        }}
        result = original(self, stop)
        if self.workdir.name == 'tp':
          params = nnx.to_pure_dict(self.state.params)
          np.savez(root / 'tp.npz', **{{jax.tree_util.keystr(p): np.asarray(a) for p, a in flat(params)}})
        return result

      loop._Training.run = run
      for name, mesh in {MESHES!r}.items():
        config = tiny_vit_config(**{SHORT!r})
        config.mesh.update(mesh)
        train_and_evaluate(config, root / name)

      saved = np.load(root / 'tp.npz')
      _, _, params, step = restore_checkpoint(root / 'tp', 'latest', mesh=make_mesh(data=8))
      restored = flat(nnx.to_pure_dict(params))
      seen['restored'] = dict(
        step=step,
        keys=sorted(jax.tree_util.keystr(p) for p, _ in restored) == sorted(saved.files),
        equal=all(np.array_equal(np.asarray(a), saved[jax.tree_util.keystr(p)]) for p, a in restored),
        replicated=all(not any(a.sharding.spec) for _, a in restored),
      )

      def table(mesh):
        z = np.zeros
        tree = {{'blocks': {{0: {{
          'attention': {{'query': {{'kernel': z((64, 64)), 'bias': z(64)}}, 'out': {{'kernel': z((64, 64)), 'bias': z(64)}}}},
          'mlp': {{'fc1': {{'kernel': z((64, 128)), 'bias': z(128)}}, 'fc2': {{'kernel': z((128, 64)), 'bias': z(64)}}}},
          'cross_attention': {{'value': {{'kernel': z((48, 63))}}}},
          'norm1': {{'scale': z(64)}},
        }}}}, 'head': {{'kernel': z((64, 32))}}}}
        return {{jax.tree_util.keystr(p): list(s.spec) for p, s in flat(state_shardings(tree, mesh))}}

      seen['specs'] = {{'tp': table(make_mesh(data=2, fsdp=2, model=2)), 'model8': table(make_mesh(model=8))}}
      seen['errors'] = []
      for mesh in (dict(model=3), dict(model=0), dict(fsdp=4, model=4), dict(data=2, model=2)):
        try:
          make_mesh(**mesh)
        except ConfigError as error:
          seen['errors'].append(str(error))
      print(json.dumps(seen))
  """)
  return root, json.loads(out.splitlines()[-1])


def test_tensor_parallel_trains_like_data_parallel(runs):
  root, _ = runs
  reference = _losses(root / 'data8')
  assert sorted(reference) == [1, 2, 3, 4]
  for name in ('tp', 'data_model'):
    losses = _losses(root / name)
    assert sorted(losses) == sorted(reference)
    np.testing.assert_allclose([losses[s] for s in reference], list(reference.values()), rtol=2e-5)


def _expected_model_dim(path: str) -> int | None:
  """Which dimension of the tiny ViT's array at ``path`` should be cut over ``model``."""
  names = re.findall(r"\['(\w+)'\]", path)
  if len(names) < 2:
    return None
  layer, param = names[-2:]
  if param == 'kernel':
    return KERNELS.get(layer)
  return 0 if param == 'bias' and layer in ('query', 'key', 'value', 'fc1') else None


def test_attention_and_mlp_arrays_and_their_moments_are_split_over_model(runs):
  _, seen = runs
  assert all('model' not in spec for spec, _, _ in seen['held']['data8'].values())
  for name, fsdp in (('data_model', 1), ('tp', 2)):
    held = seen['held'][name]
    cut = [path for path in held if path.startswith('.params') and _expected_model_dim(path) is not None]
    assert len(cut) == 10  # 6 kernels, 4 biases
    for path, (spec, nbytes, shard) in held.items():
      dim = _expected_model_dim(path) if path.endswith('.value') else None
      if dim is None:
        assert 'model' not in spec, (name, path, spec)
        continue
      assert spec[dim : dim + 1] == ['model'], (name, path, spec)
      share = 2 * fsdp if path.endswith("['kernel'].value") else 2  # fsdp also cuts the big kernels
      assert shard * share == nbytes, (name, path, spec)
    for path in cut:  # AdamW's moments: the same sharding as their parameter
      for moment in ('mu', 'nu'):
        assert held[path.replace('.params', f'.opt_state[1][0].{moment}', 1)] == held[path]


def test_the_rule_table(runs):
  _, seen = runs
  block = "['blocks'][0]['{}']['{}']['{}']".format
  assert seen['specs']['tp'] == {
    block('attention', 'query', 'kernel'): ['fsdp', 'model'],
    block('attention', 'query', 'bias'): ['model'],
    block('attention', 'out', 'kernel'): ['model', 'fsdp'],
    block('attention', 'out', 'bias'): [],
    block('mlp', 'fc1', 'kernel'): ['fsdp', 'model'],
    block('mlp', 'fc1', 'bias'): ['model'],
    block('mlp', 'fc2', 'kernel'): ['model', 'fsdp'],
    block('mlp', 'fc2', 'bias'): [],
    block('cross_attention', 'value', 'kernel'): ['fsdp', None],  # 63 columns: not cut over model
    "['blocks'][0]['norm1']['scale']": [],
    "['head']['kernel']": ['fsdp', None],
  }
  model8 = seen['specs']['model8']
  assert model8[block('attention', 'query', 'kernel')] == [None, 'model']
  assert model8[block('mlp', 'fc2', 'kernel')] == ['model', None]
  assert model8["['head']['kernel']"] == []


def test_a_tensor_parallel_checkpoint_restores_under_data_parallel_and_one_device(runs):
  root, seen = runs
  assert seen['restored'] == dict(step=4, keys=True, equal=True, replicated=True)
  saved = np.load(root / 'tp.npz')
  _, _, params, step = restore_checkpoint(root / 'tp', 'latest')  # this process: one device
  restored = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(params))[0]
  assert step == 4 and len(restored) == len(saved.files)
  for path, value in restored:
    np.testing.assert_array_equal(np.asarray(value), saved[jax.tree_util.keystr(path)])


def test_bad_model_sizes_are_one_line_errors_naming_the_field(runs):
  _, seen = runs
  model3, model0, too_many, product = seen['errors']
  assert model3 == 'config.mesh.model is 3; it must be >= 1 and divide the number of devices (8).'
  assert model0.startswith('config.mesh.model is 0; it must be >= 1')
  assert too_many == 'config.mesh is fsdp=4, model=4; their product must divide the number of devices (8).'
  assert product.startswith('config.mesh is data=2, fsdp=1, model=2; their product must be the number')
  config = tiny_vit_config()
  config.mesh.model = 0
  with pytest.raises(ConfigError, match=r'^config\.mesh\.model is 0; it must be >= 1'):
    validation.check_trainer_fields(config)
