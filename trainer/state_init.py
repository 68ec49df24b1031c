"""The train state created where it lives: abstract first, then each device makes only its shard.

``StateInit`` builds the model and the optimizer state abstractly (``nnx.eval_shape``: shapes and
dtypes, no arrays), derives their shardings from the mesh (``trainer.partitioning``), and then

- ``create()`` compiles one initialisation, ``jax.jit(init, out_shardings=<the state's shardings>)``,
  so each device computes and holds its own shard of every parameter and moment, never the whole
  model (as big_vision's ``train.py``); with fsdp a model larger than one device can start;
- ``abstract_state`` is what a checkpoint is restored into on resume, so a resumed run never
  builds a random model first; the model's other variables (constants such as fixed position
  tables, not in checkpoints) come from ``rest()``, whose compiled program computes only them.

The same path serves training (``trainer.loop``), evaluation (``trainer.evaluation``, parameters
only) and compiling for hardware that is not here (``benchmarks.compile_for``, abstract only).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh

from trainer import random_streams
from trainer.io.checkpoints import abstract_like
from trainer.partitioning import replicated, state_shardings
from trainer.state import ModelParts, TrainState
from trainer.task import Task


class StateInit:
  """The abstract train state of ``task``'s model under ``optimizer`` on ``mesh``, and how to make it."""

  def __init__(
    self, task: Task, optimizer: optax.GradientTransformation | None, mesh: Mesh, seed: int, ema: bool = False
  ):
    """``ema``: the state holds a moving average of the parameters (``trainer/ema.py``), shaped and
    sharded as they are."""
    self.task, self.optimizer, self.mesh, self.seed, self.ema = task, optimizer, mesh, seed, ema
    model = nnx.eval_shape(self._make_model)
    self.graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    opt_state = jax.eval_shape(optimizer.init, params) if optimizer is not None else None
    shapes = TrainState(
      step=jax.ShapeDtypeStruct((), jnp.int32),
      params=params,
      opt_state=opt_state,
      ema_params=params if ema else None,
    )
    #: a tree like the state: each array's sharding
    self.state_sharding = state_shardings(shapes, mesh)
    #: shape, dtype and sharding of every array of the state: what a checkpoint restores into
    self.abstract_state = abstract_like(shapes, self.state_sharding)
    self._rest_sharding = jax.tree.map(lambda _: replicated(mesh), rest)
    self._abstract_rest = rest

  def _make_model(self) -> nnx.Module:
    return self.task.make_model(nnx.Rngs(params=random_streams.key(self.seed, random_streams.PARAMS)))

  def _split(self):
    _, params, rest = nnx.split(self._make_model(), nnx.Param, ...)
    return params, rest

  def parts(self, rest) -> ModelParts:
    """The model's graph definition and ``rest`` (from ``create`` or ``rest()``), without parameters."""
    return ModelParts.from_split(self.graphdef, None, rest)

  def init_function(self):
    """``init() -> (state, rest)`` compiled with the state's shardings as its output shardings."""

    def init():
      params, rest = self._split()
      return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=self.optimizer.init(params),
        ema_params=_copy(params) if self.ema else None,
      ), rest

    return jax.jit(init, out_shardings=(self.state_sharding, self._rest_sharding))

  def create(self) -> tuple[TrainState, ModelParts]:
    """A fresh state, each device making its own shards, with the task's initial parameters
    (``Task.load_initial``) written in; and the model's parts to merge parameters into."""
    state, rest = self.init_function()()
    parts = self.parts(rest)
    model = parts.merge(state.params)
    self.task.load_initial(model)
    params = nnx.state(model, nnx.Param)
    changed = any(a is not b for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(state.params)))
    if changed:  # pretrained weights: placed on the state's shardings, and moments made for them
      params = jax.device_put(params, self.state_sharding.params)
      opt_state = jax.jit(self.optimizer.init, out_shardings=self.state_sharding.opt_state)(params)
      state = state.replace(params=params, opt_state=opt_state)
      if self.ema:  # the average starts from the pretrained weights too
        state = state.replace(ema_params=jax.jit(_copy, out_shardings=self.state_sharding.ema_params)(params))
    return state, parts

  def rest(self):
    """The model's variables other than parameters, computed without the parameters (XLA drops them);
    a model without any (learned position tables) has nothing to compute or compile."""
    if not jax.tree.leaves(self._abstract_rest):
      return self._abstract_rest
    return jax.jit(lambda: self._split()[1], out_shardings=self._rest_sharding)()

  def host_rest(self):
    """``rest()`` as numpy arrays computed on this host's default device: for compiling for devices
    that are not here, where they are constants of the compiled step."""
    return jax.tree.map(np.asarray, jax.jit(lambda: self._split()[1])())


def _copy(tree):
  """A copy of every array of ``tree`` in buffers of its own (the state's buffers are donated one by one)."""
  return jax.tree.map(jnp.copy, tree)
