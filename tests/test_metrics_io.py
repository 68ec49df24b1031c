"""The metric writers (``trainer.io.metrics_io``): TensorBoard reads what they write, and writing
needs no TensorFlow."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from trainer.io import metrics_io

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _tensorboard_events(logdir):
  from tensorboard.backend.event_processing import event_accumulator

  events = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.TENSORS: 0})
  events.Reload()
  return events


def test_tensorboard_reads_the_scalars_and_texts_of_a_run_and_of_its_resumption(tmp_path):
  writers = metrics_io.make_writers(tmp_path, is_main_process=True)
  writers['train'].write_scalars(1, {'loss': np.float32(2.5), 'accuracy': 0.25})
  writers['train'].write_scalars(2, {'loss': 2.0, 'accuracy': 0.5})
  writers['eval'].write_texts(2, {'hypotheses': 'a dog runs'})
  for writer in writers.values():
    writer.close()
  resumed = metrics_io.make_writers(tmp_path, is_main_process=True)  # a resumed run writes on
  resumed['train'].write_scalars(3, {'loss': 1.5, 'accuracy': 0.75})

  train = _tensorboard_events(tmp_path / 'tensorboard' / 'train')
  losses = [(event.step, float(event.tensor_proto.float_val[0])) for event in train.Tensors('loss')]
  assert sorted(losses) == [(1, 2.5), (2, 2.0), (3, 1.5)]
  assert {'loss', 'accuracy'} <= set(train.Tags()['tensors'])
  evaluation = _tensorboard_events(tmp_path / 'tensorboard' / 'eval')
  [text] = evaluation.Tensors('hypotheses')
  assert text.step == 2 and text.tensor_proto.string_val == [b'a dog runs']
  assert [record['step'] for record in metrics_io.read_metrics(tmp_path)] == [1, 2, 3]


def test_a_process_that_is_not_the_main_one_writes_no_file(tmp_path):
  writers = metrics_io.make_writers(tmp_path, is_main_process=False)
  writers['train'].write_scalars(1, {'loss': 1.0})
  writers['eval'].write_texts(1, {'hypotheses': 'x'})
  assert not list(tmp_path.iterdir())


@pytest.mark.slow  # starts a process
def test_writing_the_metrics_imports_no_tensorflow(tmp_path):
  script = (
    'import sys, pathlib\n'
    'from trainer.io import metrics_io\n'
    f'writers = metrics_io.make_writers(pathlib.Path({str(tmp_path)!r}), is_main_process=True)\n'
    "writers['train'].write_scalars(1, {'loss': 1.0})\n"
    "writers['eval'].write_texts(1, {'hypotheses': 'x'})\n"
    'from trainer import loop\n'
    "print('tensorflow' in sys.modules)\n"
  )
  done = subprocess.run([sys.executable, '-c', script], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.strip() == 'False'
