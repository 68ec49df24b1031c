"""``benchmarks/compile_for.py``: a train step compiled for a TPU slice on this CPU, with libtpu.

libtpu lives outside the project's environment (``.ci/run`` installs it into ``.libtpu``; or set
``LIBTPU_DIR``); the compiling tests are skipped without it. The report's parts that need no
compiler (the collectives read from HLO text, the answer for a step that does not fit) are
tested without it.
"""

import json
import os
import pathlib
import subprocess
import sys
import types

import pytest

from benchmarks import compile_for
from tests.xla_flags import as_users_run

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBTPU = os.environ.get('LIBTPU_DIR') or compile_for.REPOSITORY_LIBTPU
TINY_VIT = [
  '--config=configs/vit_digits.py',
  '--config.data.image_size=(8, 8)',
  '--config.model.width=64',
  '--config.model.depth=1',
  '--config.model.num_heads=2',
  '--config.model.mlp_dim=128',
  '--config.model.patch_size=4',
  '--config.batch_size=32',
  '--num_classes=10',
  '--channels=1',
]

HLO = """
  %all-gather-start.1 = (f32[16,64]{1,0}, f32[64,64]{1,0}) all-gather-start(f32[16,64]{1,0} %p), dimensions={0}
  %all-gather-done.1 = f32[64,64]{1,0} all-gather-done((f32[16,64]{1,0}, f32[64,64]{1,0}) %all-gather-start.1)
  %all-reduce.2 = (f32[10]{0}, bf16[4,4]{1,0}) all-reduce(f32[10]{0} %a, bf16[4,4]{1,0} %b), to_apply=%add
  %reduce-scatter.3 = f32[16,64]{1,0} reduce-scatter(f32[64,64]{1,0} %g), dimensions={0}, to_apply=%add
  %fusion.4 = f32[64,64]{1,0} fusion(f32[64,64]{1,0} %all-gather-done.1), kind=kLoop, calls=%fused
"""


def test_collectives_are_counted_with_their_result_bytes():
  found = compile_for.collectives(HLO)
  assert found['all-gather'] == {'count': 1, 'bytes': 64 * 64 * 4}  # the gathered result, counted at -start
  assert found['all-reduce'] == {'count': 1, 'bytes': 10 * 4 + 16 * 2}
  assert found['reduce-scatter'] == {'count': 1, 'bytes': 16 * 64 * 4}
  assert found['all-to-all'] == found['collective-permute'] == {'count': 0, 'bytes': 0}


def test_a_step_that_does_not_fit_is_one_line_with_what_to_try():
  message = (
    'jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required '
    'for HLO temporaries (32.60G) exceeds available HBM (15.75G).\nmore detail'
  )
  result = {
    'topology': 'v5e:4x4',
    'chips': 16,
    'devices': 16,
    'mesh': {'data': 16, 'fsdp': 1, 'model': 1},
    'batch_size': 256,
    'grad_accum_steps': 1,
    'parameters': 1.8e9,
    'per_chip_bytes': {'parameters': 7 * 2**30, 'optimizer_state': 14 * 2**30, 'batch': 2**20},
    'hbm_bytes': 16 * 2**30,
    'fits': False,
    'error': compile_for._exhausted(message),
  }
  lines = compile_for.report(result)
  assert lines[-1].startswith('does not fit: RESOURCE_EXHAUSTED: Ran out of memory on HBM')
  assert '(32.60G) exceeds available HBM (15.75G).' in lines[-1] and 'more detail' not in lines[-1]
  assert '16.00 GiB' in lines[-1] and '--config.mesh.fsdp=N' in lines[-1] and 'model.remat' in lines[-1]
  sizes = compile_for._exhausted_sizes(message)
  assert sizes == {'xla_temporaries_needed_gib': 32.6, 'xla_available_gib': 15.75}
  assert compile_for._exhausted_sizes('RESOURCE_EXHAUSTED: out of memory allocating 8 bytes') == {}


LOOPED_HLO = """
HloModule jit_step

%add (a: f32[], b: f32[]) -> f32[] {
  ROOT %sum = f32[] add(f32[] %a, f32[] %b)
}

%layers_body (state: (s32[], f32[64])) -> (s32[], f32[64]) {
  %all-reduce.1 = f32[64]{0} all-reduce(f32[64]{0} %x), to_apply=%add
  ROOT %tuple.1 = (s32[], f32[64]) tuple(s32[] %i, f32[64]{0} %all-reduce.1)
}

%layers_condition (state: (s32[], f32[64])) -> pred[] {
  %constant.24 = s32[]{:T(128)} constant(24)
  %gte.1 = s32[]{:T(128)} get-tuple-element((s32[], f32[64]) %state), index=0
  ROOT %lt.1 = pred[] compare(s32[] %gte.1, s32[] %constant.24), direction=LT
}

%micro_batch_body (state: (s32[], f32[64])) -> (s32[], f32[64]) {
  %while.2 = (s32[], f32[64]) while((s32[], f32[64]) %state), condition=%layers_condition, body=%layers_body
  %all-gather-start.3 = (f32[16]{0}, f32[64]{0}) all-gather-start(f32[16]{0} %p), dimensions={0}
  ROOT %tuple.2 = (s32[], f32[64]) tuple(s32[] %i, f32[64]{0} %x)
}

%micro_batch_condition (state: (s32[], f32[64])) -> pred[] {
  %constant.4 = s32[] constant(4)
  %gte.2 = s32[] get-tuple-element((s32[], f32[64]) %state), index=0
  ROOT %lt.2 = pred[] compare(s32[] %gte.2, s32[] %constant.4), direction=LT
}

ENTRY %main.9 (p: f32[64]) -> f32[64] {
  %while.1 = (s32[], f32[64]) while((s32[], f32[64]) %init), condition=%micro_batch_condition, body=%micro_batch_body
  %reduce-scatter.5 = f32[16]{0} reduce-scatter(f32[64]{0} %g), dimensions={0}, to_apply=%add
  ROOT %gte.3 = f32[64] get-tuple-element((s32[], f32[64]) %while.1), index=1
}
"""


def test_collectives_in_loops_count_as_often_as_the_loops_run_them():
  found = compile_for.collectives(LOOPED_HLO)
  assert found['all-reduce'] == {
    'count': 4 * 24,
    'bytes': 4 * 24 * 64 * 4,
  }  # the layers' loop in the micro-batches'
  assert found['all-gather'] == {'count': 4, 'bytes': 4 * 64 * 4}
  assert found['reduce-scatter'] == {'count': 1, 'bytes': 16 * 4}
  assert compile_for.loop_trip_counts(LOOPED_HLO) == [24, 4]


# libtpu's asynchronous collective fusion, as a compiled G/14 step has it: one all-gather (channel 7)
# repeated in its start, in a fusion computed while it is in flight inside an 8-trip loop, and in
# its done; another (channel 9) started and finished in the loop's body.
ASYNC_FUSED_HLO = """
HloModule jit_step

%start_computation (param_0.1: bf16[256,26]) -> bf16[256,416] {
  ROOT %all-gather.1 = bf16[256,416]{1,0} all-gather(bf16[256,26]{1,0} %param_0.1), channel_id=7, dimensions={1}
}

%in_flight (param_0.2: bf16[256,26]) -> bf16[256,416] {
  ROOT %all-gather.2 = bf16[256,416]{1,0} all-gather(bf16[256,26]{1,0} %param_0.2), channel_id=7, dimensions={1}
}

%done_computation (param_0.3: bf16[256,26]) -> bf16[256,416] {
  ROOT %all-gather.3 = bf16[256,416]{1,0} all-gather(bf16[256,26]{1,0} %param_0.3), channel_id=7, dimensions={1}
}

%kernel_start (param_0.4: bf16[4,64]) -> bf16[64,64] {
  ROOT %all-gather.4 = bf16[64,64]{1,0} all-gather(bf16[4,64]{1,0} %param_0.4), channel_id=9, dimensions={0}
}

%kernel_done (param_0.5: bf16[4,64]) -> bf16[64,64] {
  ROOT %all-gather.5 = bf16[64,64]{1,0} all-gather(bf16[4,64]{1,0} %param_0.5), channel_id=9, dimensions={0}
}

%body (state: (s32[], bf16[256,26])) -> (s32[], bf16[256,26]) {
  %fusion.2 = bf16[256,416]{1,0} fusion(bf16[256,26]{1,0} %x), kind=kOutput, calls=%in_flight
  %fusion.4 = bf16[64,64]{1,0} fusion(bf16[4,64]{1,0} %k), kind=kOutput, calls=%kernel_start
  %fusion.5 = bf16[64,64]{1,0} fusion(bf16[4,64]{1,0} %k), kind=kOutput, calls=%kernel_done
  ROOT %tuple.1 = (s32[], bf16[256,26]) tuple(s32[] %i, bf16[256,26]{1,0} %x)
}

%condition (state: (s32[], bf16[256,26])) -> pred[] {
  %constant.8 = s32[] constant(8)
  %gte.1 = s32[] get-tuple-element((s32[], bf16[256,26]) %state), index=0
  ROOT %lt.1 = pred[] compare(s32[] %gte.1, s32[] %constant.8), direction=LT
}

ENTRY %main (p: bf16[256,26]) -> bf16[256,416] {
  %fusion.1 = bf16[256,416]{1,0} fusion(bf16[256,26]{1,0} %p), kind=kOutput, calls=%start_computation
  %while.1 = (s32[], bf16[256,26]) while((s32[], bf16[256,26]) %init), condition=%condition, body=%body
  ROOT %fusion.3 = bf16[256,416]{1,0} fusion(bf16[256,26]{1,0} %p), kind=kOutput, calls=%done_computation
}
"""


def test_an_asynchronous_collective_fused_in_several_places_counts_once_per_run_of_its_start():
  found = compile_for.collectives(ASYNC_FUSED_HLO)
  assert found['all-gather'] == {'count': 1 + 8, 'bytes': 256 * 416 * 2 + 8 * 64 * 64 * 2}


def test_a_loop_whose_trip_count_cannot_be_read_counts_once():
  unknown = LOOPED_HLO.replace('direction=LT', 'direction=NE')
  assert compile_for.loop_trip_counts(unknown) == [None, None]
  assert compile_for.collectives(unknown)['all-reduce']['count'] == 1


def test_flops_of_a_program_with_loops_are_called_a_lower_bound():
  plain = compile_for.report(_compiled_result())
  assert any(line.startswith('FLOPs per step (XLA): 4e+12 (1e+12 per chip); compiled') for line in plain)
  looped = compile_for.report(_compiled_result(loop_trip_counts=[24, 4]))
  flops = next(line for line in looped if line.startswith('FLOPs'))
  assert 'a lower bound: XLA counts the body of each loop once' in flops and '(iterations: 24, 4)' in flops
  many = compile_for.report(_compiled_result(loop_trip_counts=[2] * 192 + [8, None, 8]))
  flops = next(line for line in many if line.startswith('FLOPs'))
  assert 'runs 195 loops (iterations: 2 x192, 8 x2, ?)' in flops  # each trip count once, with how often


def test_a_v4_chips_two_tensorcores_are_two_devices_with_half_its_memory_and_peak_each():
  chip = lambda x, y, z: types.SimpleNamespace(coords=(x, y, z))  # noqa: E731
  v4_cores = [chip(x, y, z) for x in range(2) for y in range(2) for z in range(4) for _ in range(2)]
  assert compile_for.device_share('v4:2x2x4', v4_cores) == (16 * 2**30, 275.0 / 2, 16)
  v5e_chips = [chip(x, y, 0) for x in range(4) for y in range(4)]
  assert compile_for.device_share('v5e:4x4', v5e_chips) == (16 * 2**30, 197.0, 16)
  result = _compiled_result(topology='v4:2x2x4', chips=16, devices=32, fits=False)
  result['per_chip_bytes']['total'] = 17 * 2**30
  lines = compile_for.report(result)
  assert lines[0].startswith("v4:2x2x4: 16 chips as 32 devices (TensorCores sharing a chip's HBM)")
  assert lines[-1].startswith(
    'does not fit: 17.00 GiB per device needed (a device of v4:2x2x4 has 16.00 GiB)'
  )


def _compiled_result(**changes) -> dict:
  """What ``compile_for`` returns for a step that compiled (figures of a small ViT on ``v5e:2x2``)."""
  result = {
    'topology': 'v5e:2x2',
    'chips': 4,
    'devices': 4,
    'mesh': {'data': 4, 'fsdp': 1, 'model': 1},
    'batch_size': 32,
    'grad_accum_steps': 1,
    'parameters': 5e6,
    'per_chip_bytes': {
      'parameters': 20e6,
      'optimizer_state': 40e6,
      'batch': 1e5,
      'arguments': 60e6,
      'temporaries': 2**30,
      'total': 1.1 * 2**30,
    },
    'hbm_bytes': 16 * 2**30,
    'fits': True,
    'compile_seconds': 3.0,
    'flops': 4e12,
    'flops_per_chip': 1e12,
    'collectives': {op: {'count': 0, 'bytes': 0} for op in compile_for.COLLECTIVES},
    'loop_trip_counts': [],
    'estimated_seconds': None,
    'estimated_utilisation': None,
  }
  result.update(changes)
  return result


def test_xla_estimate_is_kept_only_when_positive():
  for cost in (
    {'flops': 1e12, 'optimal_seconds': -1.0},
    {'flops': 1e12, 'optimal_seconds': 0.0},
    {'flops': 1e12},
  ):
    assert compile_for.estimate(cost, 197.0) == {'estimated_seconds': None, 'estimated_utilisation': None}
  found = compile_for.estimate({'flops': 1e12, 'optimal_seconds': 0.01}, 197.0)
  assert found['estimated_seconds'] == 0.01
  assert found['estimated_utilisation'] == pytest.approx(1e12 / 0.01 / 197e12)
  assert compile_for.estimate({'flops': 1e12, 'optimal_seconds': 0.01}, None)['estimated_utilisation'] is None


def test_the_estimate_line_is_printed_only_with_a_positive_estimate_and_says_it_is_one():
  assert not any('estimate' in line for line in compile_for.report(_compiled_result()))
  lines = compile_for.report(_compiled_result(estimated_seconds=0.0125, estimated_utilisation=0.406))
  assert lines[-1] == (
    "XLA estimate of the step time (the compiler, not a measurement): 0.0125 s, implying 40.6% of the chips' "
    'bfloat16 peak'
  )


def test_a_compiled_step_over_the_chips_memory_ends_with_the_does_not_fit_line():
  bytes_ = dict(_compiled_result()['per_chip_bytes'], total=17.5 * 2**30)
  lines = compile_for.report(_compiled_result(fits=False, per_chip_bytes=bytes_))
  assert lines[-1].startswith(
    'does not fit: 17.50 GiB per chip needed (a chip of v5e:2x2 has 16.00 GiB); try '
  )
  assert '--config.mesh.fsdp=N' in lines[-1] and '--config.model.remat=full' in lines[-1]
  assert not any('does not fit' in line for line in compile_for.report(_compiled_result()))


def _compile(*arguments) -> tuple[int, dict, str]:
  env = dict(as_users_run(os.environ), LIBTPU_DIR=LIBTPU)  # the command compiles as its users run it
  done = subprocess.run(
    [sys.executable, '-m', 'benchmarks.compile_for', *arguments],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
  )
  lines = done.stdout.strip().splitlines()
  assert lines, done.stderr[-4000:]
  return done.returncode, json.loads(lines[-1]), done.stdout


@pytest.mark.slow
@pytest.mark.skipif(
  not os.path.isdir(os.path.join(LIBTPU, 'libtpu')),
  reason=f'libtpu is not installed in {LIBTPU} (.ci/run installs it; or set LIBTPU_DIR)',
)
def test_a_tiny_vit_compiled_for_v5e_2x2_holds_a_quarter_of_its_parameters_per_chip_with_fsdp():
  status, replicated, _ = _compile('--topology=v5e:2x2', *TINY_VIT)
  assert status == 0 and replicated['fits'] and replicated['chips'] == 4
  status, sharded, printed = _compile('--topology=v5e:2x2', *TINY_VIT, '--config.mesh.fsdp=4')
  assert status == 0 and sharded['fits'] and sharded['mesh'] == {'data': 1, 'fsdp': 4, 'model': 1}
  for kind in ('parameters', 'optimizer_state'):
    assert (
      replicated['per_chip_bytes'][kind] / sharded['per_chip_bytes'][kind] > 3
    )  # 4, less what stays whole
  # (the arguments' total also holds the batch and the model's constants, which fsdp does not split)
  assert replicated['flops'] > 0 and sharded['collectives']['all-gather']['count'] > 0
  assert not any(count['count'] for op, count in replicated['collectives'].items() if op != 'all-reduce')
  assert 'v5e:2x2: 4 chips' in printed and 'of 16.00 GiB HBM' in printed


@pytest.mark.slow
@pytest.mark.skipif(
  not os.path.isdir(os.path.join(LIBTPU, 'libtpu')),
  reason=f'libtpu is not installed in {LIBTPU} (.ci/run installs it; or set LIBTPU_DIR)',
)
def test_a_linear_probe_compiles_the_training_step_whose_frozen_gradients_are_not_computed():
  finetune = ['--config=configs/vit_digits_finetune.py', *TINY_VIT[1:]]  # the config with optimizer.frozen
  status, probe, printed = _compile('--topology=v5e:2x2', *finetune, r'--config.optimizer.frozen=^(?!head\.)')
  assert status == 0 and probe['fits'], printed
  head = 64 * 10 + 10  # the classifier of TINY_VIT: width 64, 10 classes
  assert probe['frozen_parameters'] == probe['parameters'] - head
  assert 'M frozen: their gradients are not computed' in printed
  _, whole, _ = _compile('--topology=v5e:2x2', *finetune)
  assert whole['frozen_parameters'] == 0
  assert probe['flops'] < 0.6 * whole['flops'], (probe['flops'], whole['flops'])  # no backbone backward


@pytest.mark.slow
@pytest.mark.skipif(
  not os.path.isdir(os.path.join(LIBTPU, 'libtpu')),
  reason=f'libtpu is not installed in {LIBTPU} (.ci/run installs it; or set LIBTPU_DIR)',
)
def test_a_tiny_video_model_compiles_for_v5e_2x2_without_its_clips():
  status, result, printed = _compile(
    '--topology=v5e:2x2',
    '--config=configs/video_digits.py',
    '--config.model.width=16',
    '--config.model.depth=1',
    '--config.model.temporal_depth=1',
    '--config.model.num_heads=2',
    '--config.model.mlp_dim=32',
    '--config.batch_size=16',
    '--num_classes=40',
    '--channels=1',
  )
  assert status == 0 and result['fits'] and result['chips'] == 4, printed
  assert result['per_chip_bytes']['batch'] == 16 * 4 * 24 * 24 * 4 // 4 + 16 * 4 // 4  # clips and labels


@pytest.mark.slow  # starts the command
def test_without_libtpu_the_command_says_where_to_put_it(tmp_path):
  status = subprocess.run(
    [
      sys.executable,
      '-m',
      'benchmarks.compile_for',
      '--topology=v5e:2x2',
      f'--libtpu_dir={tmp_path}',
      *TINY_VIT,
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
  )
  assert status.returncode == 2
  assert status.stderr.strip() == (
    f'error: --libtpu_dir {tmp_path} holds no libtpu package (pip install --target {tmp_path} "libtpu==0.0.42.*").'
  )


@pytest.mark.slow
@pytest.mark.skipif(
  not os.path.isdir(os.path.join(LIBTPU, 'libtpu')),
  reason=f'libtpu is not installed in {LIBTPU} (.ci/run installs it; or set LIBTPU_DIR)',
)
def test_a_step_over_the_chips_memory_says_so_in_one_line_then_the_json_with_the_same_keys_and_status_1():
  too_big = [
    argument for argument in TINY_VIT if not argument.startswith(('--config.batch_size', '--config.data'))
  ]
  status, result, printed = _compile(
    '--topology=v5e:2x2', *too_big, '--config.data.image_size=(64, 64)', '--config.batch_size=262144'
  )
  assert status == 1 and result['fits'] is False
  lines = printed.strip().splitlines()
  assert lines[-2].startswith('does not fit: RESOURCE_EXHAUSTED: ') and 'exceeds available HBM' in lines[-2]
  assert 'a chip of v5e:2x2 has 16.00 GiB' in lines[-2] and '--config.mesh.fsdp=N' in lines[-2]
  for key in (
    'flops',
    'collectives',
    'estimated_seconds',
    'compile_seconds',
    'hbm_bytes',
    'loop_trip_counts',
  ):
    assert key in result  # a script reads the same keys whether the step fits or not
  assert result['flops'] is None and result['per_chip_bytes']['temporaries'] is None
  assert result['per_chip_bytes']['batch'] == 262144 // 4 * (64 * 64 + 1) * 4  # float32 pixels, int32 label
