"""The progress line's steps/s counts training steps on training time only: a clock that jumps at
each compiling step, evaluation and checkpoint save must not move the logged rate."""

import time
import types

import pytest

from tests.vit_test_configs import tiny_vit_config
from trainer import loop, run_step
from trainer.io.checkpoints import Checkpoints
from trainer.io.metrics_io import read_metrics

pytestmark = pytest.mark.slow  # runs the trainer

JUMP_SECONDS = 1000.0


def test_steps_per_sec_leaves_out_compilation_evaluation_and_saving(tmp_path, monkeypatch):
  jumped = [0.0]
  monkeypatch.setattr(
    loop, 'time', types.SimpleNamespace(perf_counter=lambda: time.perf_counter() + jumped[0])
  )

  def slow(function):
    def wrapped(*args, **kwargs):
      jumped[0] += JUMP_SECONDS
      return function(*args, **kwargs)

    return wrapped

  make_train_step = run_step.make_train_step

  def make_slow_to_compile_train_step(*args, **kwargs):
    step, calls = make_train_step(*args, **kwargs), []

    def first_call_slow(*step_args):
      calls.append(1)
      return (slow(step) if len(calls) == 1 else step)(*step_args)

    return first_call_slow

  monkeypatch.setattr(run_step, 'make_train_step', make_slow_to_compile_train_step)
  monkeypatch.setattr(loop, 'evaluate_params', slow(loop.evaluate_params))
  monkeypatch.setattr(Checkpoints, 'save', slow(Checkpoints.save))
  config = tiny_vit_config(total_steps=8, log_every_steps=4, eval_every_steps=2, checkpoint_every_steps=3)
  loop.train_and_evaluate(config, tmp_path)
  assert jumped[0] >= 5 * JUMP_SECONDS  # the first step, evaluations at 2, 4, 6, 8 and saves
  rates = [record['steps_per_sec'] for record in read_metrics(tmp_path) if 'steps_per_sec' in record]
  # Reports at steps 2 and 6 (evaluations), 3 (a save) and 4 and 8 (log_every_steps), each with jumps
  # before or after it: a rate that counted one jump would be below 4 / 1000 steps/s, while a tiny
  # ViT step takes well under 10 s.
  assert len(rates) == 5 and min(rates) > 0.1, rates
