"""The benchmark commands run, and their FLOPs, peaks and trace summaries are right."""

import gzip
import json
import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from benchmarks.step_cost import (
  compiled_flops,
  cudnn_attention_calls,
  peak_tflops,
  summarise_trace,
  utilisation,
)
from tests.xla_flags import as_users_run


def test_compiled_flops_of_a_matmul_are_two_multiply_adds_per_product():
  compiled = jax.jit(lambda a, b: a @ b).lower(jnp.ones((64, 32)), jnp.ones((32, 16))).compile()
  assert compiled_flops(compiled) == 2 * 64 * 32 * 16


@pytest.mark.parametrize(
  'device_kind, dtype, peak',
  [
    ('NVIDIA H100 80GB HBM3', 'bfloat16', 989.4),
    ('NVIDIA H100 PCIe', 'bfloat16', 756.0),
    ('NVIDIA H200', 'bfloat16', 989.4),
    ('NVIDIA H100 80GB HBM3', 'float32', None),
    ('cpu', 'bfloat16', None),
  ],
)
def test_peaks_are_known_only_for_named_devices_in_bfloat16(device_kind, dtype, peak):
  assert peak_tflops(device_kind, dtype) == peak


class _CompiledText:
  def __init__(self, text):
    self.text = text

  def as_text(self):
    return self.text


def test_cudnn_attention_calls_count_the_fused_attention_custom_calls_forward_and_backward():
  text = """
    %fmha = custom-call(%q, %k, %v), custom_call_target="__cudnn$fmhaSoftmax", backend_config={}
    %fmha.1 = custom-call(%q, %k, %v, %b), custom_call_target="__cudnn$fmhaScaleBiasSoftmax"
    %grad = custom-call(%q, %k, %v, %o, %do), custom_call_target="__cudnn$fmhaSoftmaxBackward"
    %conv = custom-call(%x, %w), custom_call_target="__cudnn$convForward"
    %dot = f32[4,4] dot(%a, %b)
  """
  assert cudnn_attention_calls(_CompiledText(text)) == {'forward': 2, 'backward': 1}
  step = jax.jit(lambda q: jax.nn.dot_product_attention(q, q, q)).lower(jnp.ones((1, 4, 2, 8))).compile()
  assert cudnn_attention_calls(step) == {'forward': 0, 'backward': 0}  # XLA's einsums on this CPU


def test_utilisation_is_achieved_over_peak():
  line = utilisation(100e12, 0.5, 'NVIDIA H100 80GB HBM3', 'bfloat16')
  assert '200.00 TFLOP/s' in line and 'utilisation 20.2% of 989.4' in line
  assert 'utilisation 50.0% of 400' in utilisation(100e12, 0.5, 'cpu', 'float32', peak_override=400.0)
  assert 'pass --peak_tflops' in utilisation(100e12, 0.5, 'cpu', 'float32')
  two = utilisation(100e12, 0.5, 'cpu', 'float32', peak_override=400.0, devices=2)
  assert '200.00 TFLOP/s on 2 devices, model FLOPs utilisation 25.0% of 400 TFLOP/s per device' in two


def _write_trace(directory, events):
  """A Chrome-format trace file as ``jax.profiler`` writes it, holding ``events``."""
  trace = directory / 'vm.trace.json.gz'
  with gzip.open(trace, 'wt') as f:
    json.dump({'traceEvents': events}, f)
  return trace


def test_a_trace_with_a_device_counts_only_the_device_kernels(tmp_path):
  events = [
    {'ph': 'M', 'name': 'process_name', 'pid': 1, 'args': {'name': '/host:CPU'}},
    {'ph': 'M', 'name': 'process_name', 'pid': 2, 'args': {'name': '/device:GPU:0'}},
    {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'PjitFunction(step)', 'ts': 0, 'dur': 9000},
    {'ph': 'X', 'pid': 2, 'tid': 1, 'name': 'fusion.1', 'ts': 0, 'dur': 3000},
    {'ph': 'X', 'pid': 2, 'tid': 1, 'name': 'fusion.2', 'ts': 0, 'dur': 1000},
    {'ph': 'X', 'pid': 2, 'tid': 1, 'name': 'nvjet_gemm', 'ts': 0, 'dur': 4000},
  ]
  summary = summarise_trace(_write_trace(tmp_path, events), steps=2)
  assert 'device kernels' in summary and 'PjitFunction' not in summary
  assert re.search(r'2\.00 ms\s+50\.0%\s+fusion\n', summary)  # fusion.1 + fusion.2, over 2 steps
  assert re.search(r'2\.00 ms\s+50\.0%\s+nvjet_gemm', summary)
  assert re.search(r'4\.00 ms\s+in all', summary)


def test_on_a_cpu_an_asynchronous_op_counts_until_its_end_event(tmp_path):
  events = [
    {'ph': 'M', 'name': 'process_name', 'pid': 1, 'args': {'name': '/host:CPU'}},
    {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'ThunkExecutor::Execute', 'ts': 0, 'dur': 9000},
    # Eigen's matmul: a 10 us launch, finished 6 ms later (its end event, on another thread).
    {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'dot.3', 'ts': 0, 'dur': 10},
    {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'ynn_fusion.1', 'ts': 10, 'dur': 2000},
    {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'end: ynn_fusion.1', 'ts': 2010, 'dur': 1},
    {'ph': 'X', 'pid': 1, 'tid': 2, 'name': 'end: dot.3', 'ts': 5999, 'dur': 1},
    {'ph': 'X', 'pid': 1, 'tid': 1, 'name': 'copy_fusion', 'ts': 6000, 'dur': 2000},
  ]
  summary = summarise_trace(_write_trace(tmp_path, events), steps=1)
  assert 'host ops' in summary and 'ThunkExecutor' not in summary and 'end:' not in summary
  assert re.search(r'6\.00 ms\s+60\.0%\s+dot\n', summary)
  assert re.search(r'2\.00 ms\s+20\.0%\s+ynn_fusion\n', summary)
  assert re.search(r'2\.00 ms\s+20\.0%\s+copy_fusion\n', summary)
  assert re.search(r'10\.00 ms\s+in all', summary)


def _run(module, *args):
  env = as_users_run(os.environ)  # the benchmark compiles as its users run it
  result = subprocess.run(
    [sys.executable, '-m', module, *args], env=env, capture_output=True, text=True, timeout=300, check=False
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout


def _refused(module, *args) -> str:
  """The standard error of ``python -m module args``, which must exit with status 1."""
  result = subprocess.run([sys.executable, '-m', module, *args], capture_output=True, text=True, check=False)
  assert result.returncode == 1, (result.returncode, result.stderr[-3000:])
  return result.stderr


@pytest.mark.slow
def test_vit_benchmark_reports_cost_analysis_flops_near_six_per_parameter_and_token(tmp_path):
  out = _run(
    'benchmarks.vit_throughput',
    *('--variant=Ti/8', '--image_size=32', '--batch_size=4', '--steps=1'),
    f'--profile_dir={tmp_path / "trace"}',
  )
  params = float(re.search(r'([\d.]+)M parameters', out).group(1)) * 1e6
  flops = float(re.search(r'([\d.]+) GFLOPs/step', out).group(1)) * 1e9
  tokens = 4 * (16 + 1)  # 4 images of 4 x 4 patches and a class token
  assert 0.8 < flops / (6 * params * tokens) < 1.5, out  # forward 2 and backward 4 FLOPs per weight and token
  assert re.search(r'[\d.]+ images/s', out)
  assert 'cuDNN fused attention calls in the step: 0 forward, 0 backward' in out  # none on a CPU
  assert 'where the time goes (host ops' in out and 'in all' in out
  numbers = json.loads(out.strip().splitlines()[-1])  # the last line is for records.record
  assert numbers['parameters'] == pytest.approx(params, rel=0.01)
  # the printed line rounds to 0.1 GFLOPs; the JSON holds XLA's count
  assert numbers['flops_per_step'] == pytest.approx(flops, abs=0.05e9) and numbers['images_per_second'] > 0
  # the profile's table as numbers: each of the top ops' ms per step, and all of them together
  profile = numbers['profile']
  assert 0 < len(profile['ops']) <= 15 and profile['traced_ms_per_step'] > 0 and numbers['scratch_bytes'] > 0
  assert profile['ops_ms_per_step'] >= sum(profile['ops'].values()) - 1e-6 > 0  # the top ops among all


@pytest.mark.slow
def test_transformer_benchmark_reports_tokens_per_second():
  out = _run(
    'benchmarks.transformer_throughput',
    '--variant=tiny',
    '--vocab_size=64',
    '--batch_size=4',
    '--length=8',
    '--steps=1',
    '--attention_kernel=explicit',
  )
  assert 'batch 4 x (8 + 8) tokens, attention_kernel explicit' in out
  assert 'cuDNN fused attention calls in the step: 0 forward, 0 backward' in out
  assert re.search(r'[\d,]+ tokens/s \(source \+ target\)', out)
  assert float(re.search(r'([\d.]+) GFLOPs/step', out).group(1)) > 0
  numbers = json.loads(out.strip().splitlines()[-1])  # the last line is for records.record
  assert numbers['tokens_per_second'] == pytest.approx(numbers['sentence_pairs_per_second'] * 16)
  flops_only = _run(
    'benchmarks.transformer_throughput',
    '--variant=tiny',
    '--vocab_size=64',
    '--batch_size=4',
    '--length=8',
    '--flops_only',
  )
  assert json.loads(flops_only) == {
    'flops_per_step': numbers['flops_per_step'],
    'parameters': numbers['parameters'],
  }


def test_model_flops_count_the_whole_batch_whatever_the_micro_batches_and_the_attention_kernel():
  """XLA counts a loop's body once and no custom call at all, so the model's FLOPs come from one
  plain lowering (the whole batch, the attention as einsums, no scan, no remat), whichever step is timed."""
  from benchmarks.step_cost import ModelFlops
  from benchmarks.synthetic_tasks import SyntheticTranslation as Task
  from configs.common import trainer_config
  from seq2seq.model import model_section
  from trainer.partitioning import global_batch, make_mesh, replicated
  from trainer.state import train_metrics

  config = trainer_config()
  config.model = model_section({'variant': 'tiny'})
  config.batch_size = 4
  tokens = jnp.ones((4, 8), jnp.int32)
  counts = []
  ways = [(1, 'explicit', False, 'none'), (2, 'explicit', False, 'none'), (1, 'fused', False, 'none')]
  for accumulate, kernel, scan, remat in ways + [(1, 'explicit', True, 'full')]:
    config.grad_accum_steps = accumulate
    config.model.update(attention_kernel=kernel, scan_layers=scan, remat=remat)
    task = Task(config, 64)
    mesh = make_mesh(devices=jax.devices()[:1])
    batch = global_batch({'src': tokens, 'tgt_in': tokens, 'tgt_out': tokens}, mesh)
    metrics = jax.device_put(train_metrics(task).empty(), replicated(mesh))
    counts.append(ModelFlops(config, lambda c: Task(c, 64), num_steps=10)(metrics, batch))
  assert counts[0] > 0 and counts == [counts[0]] * 4, counts


def test_the_gpu_records_script_refuses_an_unknown_record_and_a_machine_without_a_gpu(tmp_path):
  script = ['bash', str(pathlib.Path(__file__).parents[1] / 'benchmarks' / 'gpu_records.sh')]
  unknown = subprocess.run([*script, 'vit_b16_gpu_fp8'], capture_output=True, text=True, check=False)
  assert (
    unknown.returncode == 2
    and "unknown record vit_b16_gpu_fp8; these are, each after the GPU's tag: posemb_cifar10"
    in unknown.stderr
  )
  (tmp_path / 'nvidia-smi').write_text('#!/bin/sh\nexit 9\n')  # a driver that finds no GPU
  (tmp_path / 'nvidia-smi').chmod(0o755)
  env = dict(os.environ, PATH=f'{tmp_path}:{os.environ["PATH"]}')
  no_gpu = subprocess.run(script, capture_output=True, text=True, check=False, env=env)
  assert no_gpu.returncode == 2 and 'no NVIDIA GPU here' in no_gpu.stderr


@pytest.mark.slow
def test_a_frozen_backbone_step_costs_fewer_flops_than_training_every_parameter():
  out = _run(
    'benchmarks.frozen_step',
    *('--config=configs/vit_digits_finetune.py', '--config.batch_size=8', '--config.model.depth=2'),
    *('--rounds=1', '--steps=1'),
  )
  assert re.search(r"frozen: \d+ of \d+ parameter arrays .* match '\^\(\?!head\\\.\)'", out), out
  numbers = json.loads(out.strip().splitlines()[-1])  # the last line is for records.record
  frozen, trained = numbers['frozen.flops_per_step'], numbers['trained.flops_per_step']
  # no gradient of a frozen parameter, and none of the activations below the head: at least half saved
  assert trained > 2 * frozen > 0 and numbers['flops_ratio'] == pytest.approx(trained / frozen, abs=1e-3)
  assert numbers['frozen.step_ms'] > 0 and numbers['trained.step_ms'] > 0


@pytest.mark.parametrize(
  'pattern, message',
  [('', '--frozen is empty'), ('(', "config.optimizer.frozen '(' is not a regular expression")],
)
def test_the_frozen_step_benchmark_refuses_a_pattern_that_cannot_freeze_in_one_line(pattern, message):
  stderr = _refused('benchmarks.frozen_step', f'--frozen={pattern}')
  assert message in stderr and 'Traceback' not in stderr


@pytest.mark.slow
def test_cpu_settings_runs_every_setting_each_round_and_compares_with_the_defaults():
  tiny = '--width=16 --depth=1 --heads=1 --mlp_dim=32 --patch=8 --batch_size=4'
  out = _run('benchmarks.cpu_settings', '--rounds=1', '--steps=1', f'--model_flags={tiny}')
  numbers = json.loads(out.strip().splitlines()[-1])  # the last line is for records.record
  settings = ('defaults', 'micro_batches', 'eigen', 'eigen_micro_batches', 'no_huge_pages', 'bfloat16')
  assert all(numbers[f'{name}.round_1.images_per_second'] > 0 for name in settings)
  assert numbers['eigen.over_defaults'] == pytest.approx(numbers['eigen.median'] / numbers['defaults.median'])
  refused = _refused('benchmarks.cpu_settings', f'--model_flags={tiny}', f'--timm_python={sys.executable}')
  assert 'timm would time another one' in refused


@pytest.mark.parametrize(
  'settings, message',
  [('eigen,bfloat16', 'give "defaults" and any of'), ('defaults,bf16', '(unknown: bf16)')],
)
def test_cpu_settings_refuses_a_choice_without_the_defaults_or_with_an_unknown_setting(settings, message):
  stderr = _refused('benchmarks.cpu_settings', f'--settings={settings}')
  assert message in stderr and 'Traceback' not in stderr


def test_train_rate_reads_the_logged_training_steps_per_second_between_two_steps(tmp_path):
  lines = [
    {'step': 250, 'split': 'train', 'loss': 3.0, 'steps_per_sec': 1.0},  # holds the compilation
    {'step': 250, 'split': 'eval', 'loss': 3.1},
    {'step': 500, 'split': 'train', 'loss': 2.0, 'steps_per_sec': 2.0},
    {'step': 750, 'split': 'train', 'loss': 1.5, 'steps_per_sec': 4.0},
    {'step': 1000, 'split': 'train', 'loss': 1.0, 'steps_per_sec': 3.0},
  ]
  (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(line) + '\n' for line in lines))
  out = _run('benchmarks.train_rate', f'--workdir={tmp_path}', '--after_step=250', '--up_to_step=750')
  assert '2 logged intervals ending at steps 500-750' in out
  assert json.loads(out.strip().splitlines()[-1]) == {'steps_per_second': 3.0, 'min': 2.0, 'max': 4.0}
  none = _refused('benchmarks.train_rate', f'--workdir={tmp_path}', '--after_step=1000')
  assert 'logs no training steps/s in the steps asked for' in none


def test_a_cpu_setting_adds_its_variables_to_what_the_caller_set():
  from benchmarks.cpu_settings import SETTINGS, setting_environment  # pylint: disable=g-import-not-at-top

  caller = {'XLA_FLAGS': '--xla_dump_to=/tmp/d', 'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2', 'HOME': '/h'}
  eigen = setting_environment(caller, SETTINGS['eigen'][0])
  assert eigen['XLA_FLAGS'] == '--xla_dump_to=/tmp/d --xla_cpu_experimental_ynn_fusion_type=-individual_dot'
  no_huge_pages = setting_environment(caller, SETTINGS['no_huge_pages'][0])
  assert no_huge_pages['GLIBC_TUNABLES'] == 'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0'
  assert setting_environment({}, SETTINGS['no_huge_pages'][0]) == {'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=0'}
  assert setting_environment(caller, SETTINGS['defaults'][0]) == caller
