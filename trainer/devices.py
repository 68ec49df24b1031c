"""The trainer's devices as a task sees them outside the compiled steps.

A task that runs more than one forward pass per batch in evaluation (decoding) gets a
``Devices`` from the trainer: it spreads this process's rows over the devices and gathers
per-row results from every process, so the task never builds a mesh or talks to other hosts.
"""

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from trainer.partitioning import global_batch, make_mesh


class Devices:
  """The mesh the trainer built, with the few operations a task needs on it."""

  def __init__(self, mesh: Mesh | None = None):
    self.mesh = mesh if mesh is not None else make_mesh()

  @property
  def process_index(self) -> int:
    return jax.process_index()

  @property
  def process_count(self) -> int:
    return jax.process_count()

  @property
  def is_main_process(self) -> bool:
    """Whether this process writes the files every process would write alike."""
    return jax.process_index() == 0

  def shard(self, local_batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    """This process's rows -> global arrays split over the devices (``trainer.partitioning.global_batch``)."""
    return global_batch(local_batch, self.mesh)

  def gather(self, tree):
    """Global arrays (any pytree of them) -> numpy arrays holding every process's rows, on every process."""
    return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))
