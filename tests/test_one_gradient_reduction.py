"""Micro-batches reduce the gradient across devices once per step (``trainer/accumulation.py``), on
8 host devices (the shared 8-device worker), under data, fsdp and tensor-parallel meshes.

The compiled step's loop bodies must hold no collective across the batch axes (a tensor-parallel
step's activation all-reduces stay, within each ``model`` group), and the parameters after one step
in 4 micro-batches must be those of the whole batch in one (the step without a loop), to float
rounding, with dropout off.
"""

import re
import tempfile

import jax
import numpy as np
import pytest

from benchmarks.compile_for import _computations
from tests.test_fsdp import WIDE
from tests.vit_test_configs import tiny_vit_config
from trainer.partitioning import AXES, global_batch
from trainer.run_step import build_step
from trainer.state import train_metrics
from trainer.task import load_task

pytestmark = pytest.mark.slow  # runs on 8 host devices

MESHES = {
  'data': dict(data=8),
  'fsdp': dict(data=1, fsdp=8),
  'tp': dict(data=2, fsdp=2, model=2),
}
_REDUCING = re.compile(r'\s(all-reduce|reduce-scatter)(-start)?\(.*replica_groups=(\S+?)(,\s|$)')
_CALLED = re.compile(r'\b(body|condition|calls|to_apply|true_computation|false_computation)=%([\w.\-]+)')


def _replica_groups(text: str) -> list[list[int]]:
  """The device groups of an HLO ``replica_groups=`` value: ``{{0,1},{2,3}}`` or ``[4,2]<=[8]``
  (``[groups, size]<=[dims]``, optionally ``T(permutation)``: an iota of ``dims``, permuted)."""
  if text.startswith('{'):
    return [[int(d) for d in group.split(',') if d] for group in re.findall(r'\{([\d,]*)\}', text)]
  found = re.fullmatch(r'\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?', text)
  assert found, text
  ids = np.arange(np.prod([int(d) for d in found[3].split(',')])).reshape(
    [int(d) for d in found[3].split(',')]
  )
  if found[4]:
    ids = ids.transpose([int(d) for d in found[4].split(',')])
  return ids.reshape(int(found[1]), int(found[2])).tolist()


def loop_collectives_across_the_batch(hlo_text: str, mesh_shape: dict) -> list[str]:
  """The all-reduces and reduce-scatters inside a while loop's body (or what it calls) whose groups
  join devices with different rows of the batch (another ``data`` or ``fsdp`` index)."""
  computations = _computations(hlo_text)
  called = {
    name: [m.groups() for line in lines for m in _CALLED.finditer(line)]
    for name, lines in computations.items()
  }
  inside, stack = set(), [name for calls in called.values() for how, name in calls if how == 'body']
  while stack:
    name = stack.pop()
    if name not in inside:
      inside.add(name)
      stack += [callee for _, callee in called.get(name, [])]
  model = mesh_shape['model']
  found = []
  for name in inside:
    for line in computations.get(name, []):
      match = _REDUCING.search(line)
      if match and any(len({device // model for device in group}) > 1 for group in _replica_groups(match[3])):
        found.append(line.strip()[:160])
  return found


def one_step_whole_and_in_micro_batches(mesh: dict) -> dict:
  """On 8 devices: one step of the wide tiny ViT (no dropout) on one batch, whole and in 4
  micro-batches; the loop's batch-axis collectives and how far the parameters are apart."""
  params, found = {}, {}
  for micro_batches in (1, 4):
    config = tiny_vit_config(**WIDE, **{'model.dropout': 0.0, 'optimizer.warmup_steps': 0})
    config.grad_accum_steps = micro_batches
    config.mesh.update(mesh)
    task = load_task(config)
    task.prepare(tempfile.mkdtemp())
    run_step = build_step(config, task, num_steps=10)
    state, parts = run_step.init.create()
    before = jax.tree.map(np.asarray, state.params)
    batch = global_batch(
      next(task.train_batches(batch_size=32, seed=0, start_step=0, process_index=0, process_count=1)),
      run_step.mesh,
    )
    step, metrics = run_step.train_step(parts), train_metrics(task).empty()
    hlo = step.lower(state, metrics, batch).compile().as_text()
    found[micro_batches] = loop_collectives_across_the_batch(
      hlo, dict(zip(AXES, run_step.mesh.devices.shape))
    )
    params[micro_batches] = jax.tree.map(np.asarray, step(state, metrics, batch)[0].params)
  pairs = list(zip(jax.tree.leaves(params[1]), jax.tree.leaves(params[4])))
  return {
    'in_loop': found[4],
    'moved': max(
      float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(params[1]), jax.tree.leaves(before))
    ),
    'difference': max(float(np.max(np.abs(a - b))) for a, b in pairs),
    'scale': max(float(np.max(np.abs(a))) for a, _ in pairs),
  }


@pytest.mark.parametrize('mesh', sorted(MESHES))
def test_micro_batches_reduce_the_gradient_once_after_the_loop_and_give_the_whole_batchs_step(
  mesh, eight_devices
):
  found = eight_devices(one_step_whole_and_in_micro_batches, mesh=MESHES[mesh])
  assert found['in_loop'] == [], found['in_loop']
  assert found['moved'] > 1e-3  # the step did something
  assert found['difference'] <= 1e-5 * max(found['scale'], 1.0), found


def test_a_loop_body_with_a_gradient_all_reduce_is_found():
  """The check above on HLO text: a loop's all-reduce across the batch is found, one within a
  ``model`` group is not, nor one outside the loop."""
  hlo = """
%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %all-reduce.1 = f32[8]{0} all-reduce(f32[8]{0} %g), replica_groups=[4,2]<=[8], to_apply=%add
  %all-reduce.2 = f32[8]{0} all-reduce(f32[8]{0} %g), replica_groups={{0,2,4,6},{1,3,5,7}}, to_apply=%add
  ROOT %t = (s32[], f32[8]) tuple(%i, %all-reduce.1)
}

%cond (p: (s32[], f32[8])) -> pred[] {
  ROOT %lt = pred[] compare(s32[] %i, s32[] %c), direction=LT
}

ENTRY %main (p: f32[8]) -> f32[8] {
  %while.1 = (s32[], f32[8]) while(%init), condition=%cond, body=%body
  %all-reduce.3 = f32[8]{0} all-reduce(f32[8]{0} %g), replica_groups=[1,8]<=[8], to_apply=%add
}
"""
  found = loop_collectives_across_the_batch(hlo, {'data': 4, 'fsdp': 1, 'model': 2})
  assert len(found) == 1 and '%all-reduce.2' in found[0]
  assert _replica_groups('[2,4]<=[4,2]T(1,0)') == [[0, 2, 4, 6], [1, 3, 5, 7]]
