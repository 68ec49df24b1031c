"""Fully sharded data parallelism (``config.mesh.fsdp``) on 8 host devices (the shared 8-device worker).

fsdp must give the losses of one replicated device for the same global batch, hold a 1/fsdp
share of every sharded array on each device, and checkpoints saved under one mesh must
restore under another (fsdp=8 -> one device -> data=2 x fsdp=4), ending where an
uninterrupted one-device run ends.
"""

import signal
from unittest import mock

import jax
import numpy as np
import pytest
from flax import nnx

from tests.vit_test_configs import tiny_vit_config
from trainer import loop
from trainer.errors import ConfigError
from trainer.evaluation import restore_checkpoint
from trainer.io.metrics_io import read_metrics
from trainer.loop import train_and_evaluate
from trainer.partitioning import FSDP_MIN_SIZE, array_sharding, make_mesh
from vit.input_pipeline import ImageData

pytestmark = pytest.mark.slow  # runs on 8 host devices

# Wide enough that most parameters are above FSDP_MIN_SIZE, and divisible by 8.
WIDE = {'model.width': 64, 'model.mlp_dim': 128, 'model.num_heads': 2}


def _losses(workdir):
  return {r['step']: r['loss'] for r in read_metrics(workdir) if r['split'] == 'train' and 'loss' in r}


def _params(workdir):
  _, _, params, step = restore_checkpoint(workdir, 'latest')
  return step, jax.tree.map(np.asarray, nnx.to_pure_dict(params))


@pytest.fixture(scope='module')
def one_device_run(tmp_path_factory):
  """The reference: the wide tiny ViT trained on this process's one device."""
  workdir = tmp_path_factory.mktemp('one_device')
  train_and_evaluate(tiny_vit_config(**WIDE), workdir)
  return workdir


def _interrupting(original, at_index):
  def batches(self, **kwargs):
    for index, batch in enumerate(original(self, **kwargs)):
      if index == at_index:
        signal.raise_signal(signal.SIGTERM)
      yield batch

  return batches


def sharding_specs(shapes):
  """On 8 devices: the partition specs of arrays of ``shapes`` under data=2 x fsdp=4."""
  mesh = make_mesh(data=2, fsdp=4)
  return [list(array_sharding(mesh, tuple(shape)).spec) for shape in shapes]


def test_the_sharding_rule_cuts_the_largest_divisible_axis(eight_devices):
  mesh = make_mesh()
  assert array_sharding(mesh, (64, 64)).spec == jax.sharding.PartitionSpec()  # fsdp=1: replicated
  with pytest.raises(ConfigError, match=r'config.mesh.fsdp is 3; it must be >= 1 and divide'):
    make_mesh(fsdp=3)
  with pytest.raises(ConfigError, match=r'data=2, fsdp=1; their product must be the number of devices'):
    make_mesh(data=2)
  shapes = [(64, 96), (96, 64), (6, 8, 512), (FSDP_MIN_SIZE - 1,), (1023, 3), (7, 1024)]
  assert eight_devices(sharding_specs, shapes=shapes) == [
    [None, 'fsdp'],
    ['fsdp', None],
    [None, None, 'fsdp'],
    [],
    [],
    [None, 'fsdp'],
  ]


def train_sharded(workdir):
  """On 8 devices: trains under fsdp=8; returns the bytes each device holds of the train state."""
  config = tiny_vit_config(**WIDE)
  config.mesh.fsdp = 8
  held = {}
  original = loop._Training.run

  def run(self, stop):
    for name, leaves in (('params', self.state.params), ('state', self.state)):
      arrays = jax.tree.leaves(leaves)
      held[name] = [
        sum(a.nbytes for a in arrays),
        sum(a.addressable_shards[0].data.nbytes for a in arrays),
        sum(a.nbytes // 8 if any(a.sharding.spec) else a.nbytes for a in arrays),
      ]
    held['big'] = [
      [a.size, a.addressable_shards[0].data.size]
      for a in jax.tree.leaves(self.state.params)
      if a.size >= 1024
    ]
    return original(self, stop)

  with mock.patch.object(loop._Training, 'run', run):
    train_and_evaluate(config, workdir)
  return held


def test_fsdp_trains_like_one_device_and_holds_a_share_of_each_array(tmp_path, one_device_run, eight_devices):
  reference = one_device_run
  held = eight_devices(train_sharded, workdir=str(tmp_path / 'fsdp'))
  eight, one = _losses(tmp_path / 'fsdp'), _losses(reference)
  assert sorted(eight) == sorted(one)
  np.testing.assert_allclose([eight[s] for s in sorted(one)], [one[s] for s in sorted(one)], rtol=2e-5)
  assert held['big'] and all(size == 8 * share for size, share in held['big'])
  for name in ('params', 'state'):  # the state: AdamW's moments are sharded like the parameters
    total, per_device, sharded_by_eight = held[name]
    assert per_device == sharded_by_eight  # each device holds 1/8 of every sharded array
    assert per_device < total / 4  # the small replicated arrays (biases, norms) are the rest


def interrupted_fsdp_run(workdir):
  """On 8 devices: trains under fsdp=8, interrupted (SIGTERM) at the fourth batch."""
  with mock.patch.object(ImageData, 'train_batches', _interrupting(ImageData.train_batches, 3)):
    config = tiny_vit_config(**WIDE)
    config.mesh.fsdp = 8
    result = train_and_evaluate(config, workdir)
  assert result.interrupted and result.step < 8, result


def finish_on_two_by_four(workdir):
  """On 8 devices: resumes the run in ``workdir`` under data=2 x fsdp=4 to its end."""
  config = tiny_vit_config(**WIDE)
  config.mesh.data, config.mesh.fsdp = 2, 4
  assert train_and_evaluate(config, workdir).step == 8


def test_a_checkpoint_moves_between_meshes_and_ends_like_one_device(
  tmp_path, monkeypatch, one_device_run, eight_devices
):
  reference = one_device_run
  workdir = tmp_path / 'moving'
  eight_devices(interrupted_fsdp_run, workdir=str(workdir))
  monkeypatch.setattr(ImageData, 'train_batches', _interrupting(ImageData.train_batches, 1))
  middle = train_and_evaluate(tiny_vit_config(**WIDE), workdir)  # one device, replicated
  assert middle.interrupted and 3 < middle.step < 8
  monkeypatch.undo()
  eight_devices(finish_on_two_by_four, workdir=str(workdir))
  moved, one = _losses(workdir), _losses(reference)
  assert sorted(moved) == sorted(one)
  np.testing.assert_allclose([moved[s] for s in sorted(one)], [one[s] for s in sorted(one)], rtol=2e-5)
  (step, params), (reference_step, reference_params) = _params(workdir), _params(reference)
  assert step == reference_step == 8
  # Adam divides by the root of the squared gradients, so a parameter whose gradients are
  # rounding noise (a bias near 0) moves by up to the learning rate either way: compare absolutely.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-4), params, reference_params)
