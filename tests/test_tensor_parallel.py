"""Tensor parallelism (``config.mesh.model``) on 8 host devices (the shared 8-device worker).

A tiny ViT trains for a few steps under ``data=8``, ``data=2, fsdp=2, model=2`` and
``data=4, model=2``: the losses must agree, the attention and MLP kernels (and their Adam
moments) must be cut by the logical-axis rules (heads, MLP units) so that each device holds a
share of them, and the
checkpoint saved under ``data=2, fsdp=2, model=2`` must restore under ``data=8`` and on one
device with the values it was saved with.
"""

import collections
import pathlib
import re
from unittest import mock

import jax
import numpy as np
import pytest
from flax import nnx

from attention import DecoderBlock
from tests.test_fsdp import WIDE, _losses
from tests.vit_test_configs import tiny_vit_config
from trainer import loop, validation
from trainer.errors import ConfigError
from trainer.evaluation import restore_checkpoint
from trainer.loop import train_and_evaluate
from trainer.partitioning import make_mesh, state_shardings

pytestmark = pytest.mark.slow  # runs on 8 host devices

# Four steps, one evaluation and one checkpoint: the runs are what takes the time.
SHORT = dict(WIDE, total_steps=4, eval_every_steps=4, checkpoint_every_steps=4)
MESHES = {
  'data8': dict(data=8),
  'fsdp8': dict(data=1, fsdp=8),
  'tp': dict(data=2, fsdp=2, model=2),
  'data_model': dict(data=4, model=2),
}
# The tensor-parallel arrays of the tiny ViT's one block: layer -> (kernel, bias) dimension cut over
# model: the heads of the [D, 3, H, Dh] qkv kernel and [H, Dh, D] out kernel, the MLP's hidden units.
CUT = {
  'qkv': (2, 1),
  'out': (0, None),
  'fc1': (1, 0),
  'fc2': (0, None),
}


class _NewFamily(nnx.Module):  # a model the trainer has never heard of, naming its axes
  def __init__(self):
    self.block = DecoderBlock(64, 4, 128, rngs=nnx.Rngs(0))
    self.odd_heads = DecoderBlock(48, 3, 96, rngs=nnx.Rngs(0))  # 3 heads: model=2 cannot cut them
    self.mixer = nnx.Param(np.zeros((64, 256), np.float32), out_sharding=(None, 'mlp'), eager_sharding=False)
    self.head = nnx.Linear(64, 32, rngs=nnx.Rngs(0))


def _flat(tree):
  return jax.tree_util.tree_flatten_with_path(tree)[0]


def train_under_each_mesh(root):
  """On 8 devices: trains under each of ``MESHES`` into ``root``; returns what it saw on the way."""
  root = pathlib.Path(root)
  seen = {'held': {}, 'collectives': {}}
  original = loop._Training.run
  op = re.compile(r' (all-gather|reduce-scatter|all-reduce|all-to-all|collective-permute)(-start)?[(]')

  def recording_collectives(self):
    step = self.train_step

    def first(*args):  # the compiled train step's HLO: which collectives it runs, and how many
      hlo = step.lower(*args).compile().as_text()
      seen['collectives'][self.workdir.name] = dict(
        collections.Counter(match.group(1) for match in map(op.search, hlo.splitlines()) if match)
      )
      self.train_step = step
      return step(*args)

    self.train_step = first

  def run(self, stop):
    recording_collectives(self)
    seen['held'][self.workdir.name] = {
      jax.tree_util.keystr(path): [list(a.sharding.spec), a.nbytes, a.addressable_shards[0].data.nbytes]
      for path, a in _flat(self.state)
    }
    result = original(self, stop)
    if self.workdir.name == 'tp':
      params = nnx.to_pure_dict(self.state.params)
      np.savez(root / 'tp.npz', **{jax.tree_util.keystr(p): np.asarray(a) for p, a in _flat(params)})
    return result

  with mock.patch.object(loop._Training, 'run', run):
    for name, mesh in MESHES.items():
      config = tiny_vit_config(**SHORT)
      config.mesh.update(mesh)
      train_and_evaluate(config, root / name)

  saved = np.load(root / 'tp.npz')
  _, _, params, step = restore_checkpoint(root / 'tp', 'latest', mesh=make_mesh(data=8))
  restored = _flat(nnx.to_pure_dict(params))
  seen['restored'] = dict(
    step=step,
    keys=sorted(jax.tree_util.keystr(p) for p, _ in restored) == sorted(saved.files),
    equal=all(np.array_equal(np.asarray(a), saved[jax.tree_util.keystr(p)]) for p, a in restored),
    replicated=all(not any(a.sharding.spec) for _, a in restored),
  )

  def table(mesh):
    tree = nnx.state(nnx.eval_shape(_NewFamily), nnx.Param)
    return {
      jax.tree_util.keystr(p).removesuffix('.value'): list(s.spec)
      for p, s in _flat(state_shardings(tree, mesh))
    }

  seen['specs'] = {'tp': table(make_mesh(data=2, fsdp=2, model=2)), 'model8': table(make_mesh(model=8))}
  seen['errors'] = []
  for mesh in (dict(model=3), dict(model=0), dict(fsdp=4, model=4), dict(data=2, model=2)):
    try:
      make_mesh(**mesh)
    except ConfigError as error:
      seen['errors'].append(str(error))
  return seen


@pytest.fixture(scope='module')
def runs(tmp_path_factory, eight_devices):
  """Trains under each of ``MESHES`` on 8 devices; returns the workdirs and what the worker saw."""
  root = tmp_path_factory.mktemp('tensor_parallel')
  return root, eight_devices(train_under_each_mesh, root=str(root))


def test_tensor_parallel_trains_like_data_parallel(runs):
  root, _ = runs
  reference = _losses(root / 'data8')
  assert sorted(reference) == [1, 2, 3, 4]
  for name in ('tp', 'data_model', 'fsdp8'):
    losses = _losses(root / name)
    assert sorted(losses) == sorted(reference)
    np.testing.assert_allclose([losses[s] for s in reference], list(reference.values()), rtol=2e-5)


def _expected_model_dim(path: str) -> int | None:
  """Which dimension of the tiny ViT's array at ``path`` should be cut over ``model``."""
  names = re.findall(r"\['(\w+)'\]", path)
  if len(names) < 2 or names[-2] not in CUT:
    return None
  kernel_dim, bias_dim = CUT[names[-2]]
  return {'kernel': kernel_dim, 'bias': bias_dim}.get(names[-1])


def test_attention_and_mlp_arrays_and_their_moments_are_split_over_model(runs):
  _, seen = runs
  assert all('model' not in spec for spec, _, _ in seen['held']['data8'].values())
  for name, fsdp in (('data_model', 1), ('tp', 2)):
    held = seen['held'][name]
    cut = [path for path in held if path.startswith('.params') and _expected_model_dim(path) is not None]
    assert len(cut) == 6  # 4 kernels, 2 biases
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


def test_the_rules_read_logical_axis_names_not_module_names(runs):
  _, seen = runs
  attention = "['{}']['{}_attention']['{}']['{}']".format
  mlp = "['{}']['mlp']['{}']['{}']".format
  tp = seen['specs']['tp']
  assert tp[attention('block', 'self', 'qkv', 'kernel')] == ['fsdp', None, 'model', None]
  assert tp[attention('block', 'self', 'qkv', 'bias')] == [None, 'model', None]
  assert tp[attention('block', 'cross', 'query', 'kernel')] == ['fsdp', 'model', None]
  assert tp[attention('block', 'cross', 'kv', 'kernel')] == ['fsdp', None, 'model', None]
  assert tp[attention('block', 'cross', 'kv', 'bias')] == [None, 'model', None]
  assert tp[attention('block', 'self', 'out', 'kernel')] == ['model', None, 'fsdp']
  assert tp[attention('block', 'self', 'out', 'bias')] == []
  assert tp[mlp('block', 'fc1', 'kernel')] == ['fsdp', 'model']
  assert tp[mlp('block', 'fc1', 'bias')] == ['model']
  assert tp[mlp('block', 'fc2', 'kernel')] == ['model', 'fsdp']
  assert tp[mlp('block', 'fc2', 'bias')] == []
  assert tp[attention('odd_heads', 'self', 'qkv', 'kernel')] == ['fsdp', None, None, None]  # 3 heads: whole
  assert tp["['block']['norm1']['scale']"] == []
  assert tp["['mixer']"] == ['fsdp', 'model']  # any parameter that names an axis 'mlp'
  assert tp["['head']['kernel']"] == ['fsdp', None]
  model8 = seen['specs']['model8']
  assert model8[attention('block', 'self', 'qkv', 'kernel')] == []  # 4 heads: model=8 cannot cut them
  assert model8[mlp('block', 'fc2', 'kernel')] == ['model', None]
  assert model8["['head']['kernel']"] == []


def test_each_mesh_axis_adds_the_collectives_it_should_and_model_no_all_to_all(runs):
  _, seen = runs
  kinds = {name: set(counts) for name, counts in seen['collectives'].items()}
  assert kinds['data8'] == {'all-reduce'}  # the gradients (and metrics) summed over data
  assert (
    'all-gather' in kinds['fsdp8'] <= {'all-gather', 'all-reduce', 'reduce-scatter'}
  )  # parameters gathered
  # model: the row-parallel outputs (attention's out, the MLP's fc2) summed; the heads stay where the
  # [D, 3, H, Dh] kernel put them, so nothing is exchanged around attention (no all-to-all, no permute).
  assert 'all-reduce' in kinds['data_model'] <= {'all-reduce', 'all-gather'}
  assert seen['collectives']['data_model']['all-reduce'] > seen['collectives']['data8']['all-reduce']
  # fsdp and model together: XLA also reshards some arrays by collective-permute, but no all-to-all.
  assert (
    'all-to-all' not in kinds['tp'] <= {'all-gather', 'all-reduce', 'reduce-scatter', 'collective-permute'}
  )


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
