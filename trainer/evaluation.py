"""Evaluate a saved checkpoint without the training loop.

The workdir's saved config rebuilds the task and the model; the parameters are
restored onto whatever devices are present now, however many were used to train.
"""

import json
import pathlib

import jax
import jax.numpy as jnp
from flax import nnx

from trainer import workdir as workdir_lib
from trainer.checkpoints import Checkpoints, abstract_like
from trainer.loop import evaluate_params, total_steps
from trainer.optim import make_optimizer
from trainer.partitioning import make_mesh, replicated
from trainer.state import ModelParts, TrainState
from trainer.task import Task, load_task


def restore_checkpoint(workdir: pathlib.Path, which: str | int = 'latest', mesh=None):
  """``(task, model parts, params, step)`` for checkpoint ``which`` ('latest', 'best' or a step)."""
  workdir = pathlib.Path(workdir)
  config = workdir_lib.load_config(workdir)
  mesh = mesh or make_mesh()
  checkpoints = Checkpoints(workdir, best_metric=config.best_metric, best_mode=config.best_mode,
                            read_only=True)
  try:
    step = checkpoints.resolve(which)
    task = load_task(config)
    parts = ModelParts(task.make_model(nnx.Rngs(params=config.seed)))
    optimizer = make_optimizer(config.optimizer, total_steps(config, task))
    template = TrainState(step=jnp.zeros((), jnp.int32), params=parts.params,
                          opt_state=optimizer.init(parts.params))
    state = checkpoints.restore(step, abstract_like(template, replicated(mesh)))
  finally:
    checkpoints.close()
  parts.params = None
  return task, parts, state.params, step


def evaluate_workdir(workdir: str | pathlib.Path, checkpoint: str | int = 'latest',
                     split: str | None = None, batch_size: int | None = None) -> dict:
  """Evaluates one checkpoint on one split; writes ``eval_<split>_step<N>.json`` into the workdir."""
  workdir = pathlib.Path(workdir)
  config = workdir_lib.load_config(workdir)
  split = split or config.eval_split
  mesh = make_mesh()
  task, parts, params, step = restore_checkpoint(workdir, checkpoint, mesh)
  metrics = evaluate_params(task, parts, params, split, mesh, batch_size or config.eval_batch_size)
  result = dict(metrics, step=int(step), split=split, checkpoint=str(checkpoint))
  if jax.process_index() == 0:
    (workdir / f'eval_{split}_step{step}.json').write_text(json.dumps(result, indent=2, sort_keys=True) + '\n')
  return result
