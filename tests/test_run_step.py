"""``trainer.run_step.build_step``: the one place a run's step is built, frozen parameters included."""

import jax
import numpy as np
import pytest

from benchmarks.step_cost import compiled_flops
from tests.vit_test_configs import tiny_vit_config
from trainer.errors import ConfigError
from trainer.optim import parameter_path
from trainer.partitioning import global_batch
from trainer.run_step import build_step
from trainer.state import train_metrics
from trainer.task import load_task

PROBE = r'^(?!head\.)'


def _probe_step(tmp_path, frozen: str):
  config = tiny_vit_config(**{'model.dropout': 0.0, 'optimizer.warmup_steps': 0})
  config.optimizer.frozen = frozen
  task = load_task(config)
  task.prepare(tmp_path)
  run_step = build_step(config, task, num_steps=10)
  state, parts = run_step.init.create()
  batch = global_batch(
    next(task.train_batches(batch_size=32, seed=0, start_step=0, process_index=0, process_count=1)),
    run_step.mesh,
  )
  return run_step, state, run_step.train_step(parts), batch, train_metrics(task).empty()


def test_a_linear_probe_state_is_created_and_its_step_trains_the_head_alone(tmp_path):
  run_step, state, step, batch, metrics = _probe_step(tmp_path, PROBE)
  assert run_step.frozen and all(not path.startswith('head.') for path in run_step.frozen)
  before = {
    parameter_path(key): np.asarray(p) for key, p in jax.tree_util.tree_flatten_with_path(state.params)[0]
  }
  state, _ = step(state, metrics, batch)
  after = {
    parameter_path(key): np.asarray(p) for key, p in jax.tree_util.tree_flatten_with_path(state.params)[0]
  }
  for path, value in after.items():
    if path in run_step.frozen:
      np.testing.assert_array_equal(value, before[path], err_msg=path)
  assert any(not np.array_equal(after[path], before[path]) for path in after if path.startswith('head.'))


@pytest.mark.slow  # compiles two train steps
def test_the_built_probe_step_computes_no_frozen_gradients(tmp_path):
  flops = {}
  for name, frozen in (('all', ''), ('probe', PROBE)):
    _, state, step, batch, metrics = _probe_step(tmp_path / name, frozen)
    flops[name] = compiled_flops(step.lower(state, metrics, batch).compile())
  assert flops['probe'] < 0.6 * flops['all'], flops


def test_a_batch_the_micro_batches_cannot_split_fails_before_any_model_is_built(tmp_path):
  config = tiny_vit_config(grad_accum_steps=5)
  with pytest.raises(ConfigError, match='grad_accum_steps'):
    build_step(config, load_task(config), num_steps=10)
