"""The FLOPs of a train step as its model computes them, counted on a plain CPU copy of the step.

XLA's analysis of the compiled step (``step_cost.compiled_flops``) is the wrong count for the model
FLOPs utilisation (MFU) in three ways: on a GPU it leaves out the matmuls and the attention, which
become cuBLAS and cuDNN calls (custom calls it does not count); it counts a loop's body once
(scanned layers, micro-batches); and it counts a rematerialised layer's forward twice.
``ModelFlops`` counts the step of the same model computed plainly instead: the attention as
einsums, the layers unscanned, nothing rematerialised, the batch whole, on one CPU device, where
JAX analyses a program before optimisation (``step_cost.program_flops``). The copy is lowered for
abstract arrays, so nothing is allocated or compiled. The training loop's progress line and the
throughput benchmarks both count with it.
"""

import functools
from collections.abc import Callable

import jax
import ml_collections

from trainer.observe.step_cost import program_flops
from trainer.run_step import build_step
from trainer.task import Task

# The model fields whose other values compute the same model another way; absent fields are left absent.
PLAIN_MODEL = {'attention_kernel': 'explicit', 'scan_layers': False, 'remat': 'none'}


def plain_copy(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """``config`` with the model computed plainly (``PLAIN_MODEL``), no micro-batches, one device's mesh."""
  plain = config.copy_and_resolve_references()
  plain.model.update({name: value for name, value in PLAIN_MODEL.items() if name in plain.model})
  if 'grad_accum_steps' in plain:
    plain.grad_accum_steps = 1
  if plain.get('mesh'):
    plain.mesh.update(data=-1, fsdp=1, model=1)
  return plain


def shaped(tree):
  """``tree`` with each array replaced by its shape and dtype."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


class ModelFlops:
  """``ModelFlops(config, make_task, num_steps)(metrics, batch)``: the FLOPs of one train step of
  ``config`` on a batch shaped as ``batch``, all devices together.

  ``make_task(plain_config)`` builds the run's task for the plain copy of ``config`` without reading
  data (``Task.without_data``). A task with training constants (a distillation teacher) loads them
  once more, for the copy.
  """

  def __init__(self, config: ml_collections.ConfigDict, make_task: Callable[..., Task], num_steps: int):
    plain = plain_copy(config)
    self._run_step = build_step(plain, make_task(plain), num_steps=num_steps, devices=jax.devices('cpu')[:1])

  @functools.cached_property
  def _train_step(self):
    init = self._run_step.init
    return self._run_step.train_step(init.parts(init.rest()))

  def __call__(self, metrics, batch) -> float:
    lowered = self._train_step.lower(self._run_step.init.abstract_state, shaped(metrics), shaped(batch))
    return program_flops(lowered)

  @classmethod
  def of_task(cls, config: ml_collections.ConfigDict, task: Task, num_steps: int) -> 'ModelFlops | None':
    """For a run of ``task``, whose data sizes are known; ``None`` where the family cannot be built
    without its data (no ``Sizes`` record)."""
    if task.Sizes is None or task.sizes is None:
      return None
    sizes = task.sizes.to_json()
    return cls(config, lambda plain: type(task).without_data(plain, sizes), num_steps)
