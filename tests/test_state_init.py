"""The train state is created where it lives (``trainer/state_init.py``).

No code path builds a whole random model with real arrays: training makes each device's shards
in one compiled program, a resume and an evaluation restore into the abstract state. On 8 host
devices the compiled initialisation's per-device output bytes fall by about the fsdp factor.
"""

import jax
import numpy as np
import pytest
from flax import nnx

from tests.test_fsdp import _interrupting
from tests.vit_test_configs import tiny_vit_config
from trainer import state_init
from trainer.evaluation import restore_checkpoint
from trainer.loop import train_and_evaluate
from trainer.optim import make_optimizer
from trainer.partitioning import make_mesh
from trainer.task import load_task
from vit.input_pipeline import ImageData
from vit.task import ImageClassification

# Wide enough that the arrays fsdp leaves whole (biases, norms: under FSDP_MIN_SIZE) weigh little.
WIDE = {'model.width': 128, 'model.mlp_dim': 256, 'model.num_heads': 2}


@pytest.fixture
def model_builds(monkeypatch):
  """Every call of the ViT task's model constructor: ``True`` where it made real (concrete) arrays."""
  builds = []
  original = ImageClassification.make_model

  def make_model(self, rngs):
    model = original(self, rngs)
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    builds.append(any(isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) for x in leaves))
    return model

  monkeypatch.setattr(ImageClassification, 'make_model', make_model)
  return builds


@pytest.fixture
def creations(monkeypatch):
  """How often a fresh state is created (``StateInit.create``)."""
  count = []
  original = state_init.StateInit.create

  def create(self):
    count.append(1)
    return original(self)

  monkeypatch.setattr(state_init.StateInit, 'create', create)
  return count


def _params(workdir):
  _, _, params, step = restore_checkpoint(workdir, 'latest')
  return step, jax.tree.map(np.asarray, nnx.to_pure_dict(params))


@pytest.mark.slow  # trains three runs
def test_no_run_builds_a_whole_random_model_and_a_resume_restores_bit_identically(
  tmp_path, monkeypatch, model_builds, creations
):
  reference = tmp_path / 'reference'
  train_and_evaluate(tiny_vit_config(), reference)
  assert creations == [1] and model_builds and not any(model_builds)  # traced or abstract, never concrete
  workdir = tmp_path / 'resumed'
  with monkeypatch.context() as patch:
    patch.setattr(ImageData, 'train_batches', _interrupting(ImageData.train_batches, 3))
    assert train_and_evaluate(tiny_vit_config(), workdir).interrupted
  model_builds.clear()
  creations.clear()
  assert train_and_evaluate(tiny_vit_config(), workdir).step == 8  # resumes from step 4 or 5
  assert not creations and model_builds and not any(model_builds)
  model_builds.clear()
  (step, resumed), (reference_step, expected) = _params(workdir), _params(reference)
  assert not any(model_builds)  # evaluation restores into the abstract parameters too
  assert step == reference_step == 8
  jax.tree.map(np.testing.assert_array_equal, resumed, expected)


def initialisation_bytes():
  """On 8 devices: per fsdp factor, the compiled initialisation's output bytes per device and the state's."""
  config = tiny_vit_config(**WIDE)
  task = load_task(config)
  optimizer = make_optimizer(config.optimizer, 8)
  result = {}
  for fsdp in (1, 8):
    init = state_init.StateInit(task, optimizer, make_mesh(fsdp=fsdp), seed=0)
    compiled = init.init_function().lower().compile()
    state, parts = init.create()
    result[fsdp] = dict(
      compiled=compiled.memory_analysis().output_size_in_bytes,
      held=sum(a.addressable_shards[0].data.nbytes for a in jax.tree.leaves(state)),
      total=sum(a.nbytes for a in jax.tree.leaves(state)),
    )
  return result


@pytest.mark.slow  # runs on 8 host devices
def test_the_compiled_initialisation_holds_a_shard_per_device(eight_devices):
  result = eight_devices(initialisation_bytes)
  replicated, sharded = result['1'], result['8']
  assert replicated['compiled'] >= replicated['total']  # every device makes the whole state
  assert replicated['held'] == replicated['total']
  # fsdp=8: each device's program makes about 1/8 (biases and norms stay whole) and holds what it made
  assert replicated['compiled'] / sharded['compiled'] > 7
  assert sharded['held'] <= sharded['compiled'] < replicated['compiled'] / 7
