"""Compile a config's train step for a TPU slice that is not here, and say what it needs per chip.

  pip install --target ~/libtpu 'libtpu==0.0.42.*'      # once; the version jax's tpu extra pins
  python -m benchmarks.compile_for --libtpu_dir ~/libtpu --topology v5e:4x4 \\
    --config configs/vit_b16_imagenet.py --config.mesh.fsdp=16

libtpu compiles for a TPU topology on a machine without TPUs (``jax.experimental.topologies``);
it is kept out of the project's environment, since JAX probes for TPUs at start-up whenever
libtpu is importable. ``--libtpu_dir`` (or ``LIBTPU_DIR``; default: ``.libtpu`` in the
repository, where ``.ci/run`` installs it) names the folder it was installed into; this command
puts it on ``sys.path`` and runs JAX on the CPU (``JAX_PLATFORMS=cpu``).

Nothing is read from the data: the task is built with ``Task.without_data`` (classes, image
channels and vocabulary size from the flags below, image size, clip frames and sequence lengths
from the config), the model and optimizer state abstractly (``trainer.state_init``: shapes, dtypes and
shardings), then the step a run of the config trains with (``trainer.run_step.build_step``: its
mesh, ``config.mesh``, over the slice's chips, its micro-batches, and its frozen parameters, whose
gradients are not computed) is compiled. It prints per-chip bytes (parameters, optimizer state, batch, XLA's temporaries
and the total) against the chip's HBM (a device's share of it where a chip's TensorCores are
devices of their own, as libtpu gives v4), XLA's FLOPs per step, the collectives in the compiled
program (count and bytes of each kind, those in a loop's body, such as the scanned layers or the
micro-batch loop, as often as the loop runs), the compile time, and XLA's own estimate of the
step time only when it gives a positive one. XLA's cost analysis counts the body of a while loop
once, so where the program has loops (``model.scan_layers``, ``grad_accum_steps`` > 1) its FLOPs
and estimate are lower bounds, and the output says so. The last line is one JSON object with the
same figures. A step that does not fit (XLA's RESOURCE_EXHAUSTED, or a total over the chip's
HBM) is one line saying what it needs and what to try, the JSON line with ``"fits": false`` (and
XLA's ``xla_temporaries_needed_gib`` and ``xla_available_gib`` where its message gives them), and
exit status 1; a bad flag or config is ``error: ...`` and status 2.
"""

import collections
import os
import re
import sys
import time

from absl import app, flags
from ml_collections import config_flags

from trainer.command_line import cli

_CONFIG = config_flags.DEFINE_config_file('config', None, 'An experiment config file.', lock_config=True)
_TOPOLOGY = flags.DEFINE_string(
  'topology', None, "A TPU slice, e.g. 'v5e:2x2', 'v5e:4x4', 'v4:2x2x4', 'v5p:4x4x4'."
)
#: where ``.ci/run`` installs libtpu (ignored by git)
REPOSITORY_LIBTPU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '.libtpu')
_LIBTPU_DIR = flags.DEFINE_string(
  'libtpu_dir',
  os.environ.get('LIBTPU_DIR') or REPOSITORY_LIBTPU,
  "Folder holding the libtpu package (default: $LIBTPU_DIR, else the repository's .libtpu).",
)
_NUM_CLASSES = flags.DEFINE_integer(
  'num_classes', 1000, 'Classes of a classifier (no data is read).', lower_bound=1
)
_CHANNELS = flags.DEFINE_integer('channels', 3, 'Image channels.', lower_bound=1)
_VOCAB_SIZE = flags.DEFINE_integer(
  'vocab_size',
  0,
  "A translator's vocabulary size (0: the config's data.tokenizer.vocab_size).",
  lower_bound=0,
)
flags.mark_flags_as_required(['config', 'topology'])

GIB = 2**30
#: bytes of high-bandwidth memory per chip, and the dense bfloat16 peak in TFLOP/s, by TPU generation
CHIPS = {
  'v4': (32 * GIB, 275.0),
  'v5e': (16 * GIB, 197.0),
  'v5p': (95 * GIB, 459.0),
  'v6e': (32 * GIB, 918.0),
}
COLLECTIVES = ('all-gather', 'reduce-scatter', 'all-reduce', 'all-to-all', 'collective-permute')
#: the figures only a compiled step has (``None`` in the JSON of one that did not compile)
_COMPILED_FIGURES = (
  'flops_per_chip',
  'flops',
  'collectives',
  'loop_trip_counts',
  'estimated_seconds',
  'estimated_utilisation',
)
_COMPILED_BYTES = ('arguments', 'outputs_not_aliased', 'temporaries', 'code', 'total')
_DTYPE_BYTES = {'pred': 1, 's8': 1, 'u8': 1, 'bf16': 2, 'f16': 2, 's16': 2, 'u16': 2, 's32': 4, 'u32': 4}
_DTYPE_BYTES.update({'f32': 4, 'f64': 8, 's64': 8, 'u64': 8, 'c64': 8, 'c128': 16})
_COLLECTIVE_LINE = re.compile(
  r'=\s+(?P<shape>.+?)\s+(?P<op>' + '|'.join(COLLECTIVES) + r')(?P<start>-start)?\('
)
_ARRAY = re.compile(r'\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]')
_COMPUTATION_START = re.compile(r'(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*\(.*\{\s*$')
_CALLED = re.compile(
  r'\b(?P<how>body|condition|calls|to_apply|true_computation|false_computation)=%(?P<name>[\w.\-]+)'
)
_BRANCHES = re.compile(r'branch_computations=\{(?P<names>[^}]*)\}')
_CHANNEL = re.compile(r'\bchannel_id=(?P<id>\d+)')
_INTEGER_CONSTANT = re.compile(r'=\s*[su](?:32|64)\[\]\S*\s+constant\((?P<value>\d+)\)')


def _array_bytes(dtype: str, dims: str) -> int:
  count = 1
  for size in filter(None, dims.split(',')):
    count *= int(size)
  return count * _DTYPE_BYTES.get(dtype, 1)


def _computations(hlo_text: str) -> dict[str, list[str]]:
  """The instruction lines of each computation of an HLO module's text, by name ('' holds lines
  outside any computation, as in a fragment)."""
  found, current = {'': []}, ''
  for line in hlo_text.splitlines():
    start = None if line.startswith((' ', '\t')) else _COMPUTATION_START.match(line)
    if start:
      current = start['name']
      found[current] = []
    elif line.startswith('}'):
      current = ''
    else:
      found[current].append(line)
  return found


def _trip_count(condition: list[str]) -> int | None:
  """The iterations of a while loop whose condition is ``counter < constant`` (a scan's, a
  ``fori_loop``'s), counting from 0; ``None`` for any other condition."""
  bounds = [int(match['value']) for line in condition for match in _INTEGER_CONSTANT.finditer(line)]
  compares = [line for line in condition if 'ROOT' in line and ' compare(' in line]
  if len(bounds) == 1 and len(compares) == 1 and 'direction=LT' in compares[0]:
    return bounds[0]
  return None


def _runs(computations: dict[str, list[str]]) -> tuple[dict[str, int], list[int | None]]:
  """How often each computation runs in one run of the module (a while loop's body as often as its
  trip count says; 1 where it is not known), and the trip counts of the module's while loops."""
  callers, loops = {}, []
  for caller, lines in computations.items():
    for line in lines:
      called = [(match['how'], match['name']) for match in _CALLED.finditer(line)]
      for branches in _BRANCHES.finditer(line):
        called += [('branch', name.strip().lstrip('%')) for name in branches['names'].split(',')]
      trips = None
      if ' while(' in line:
        condition = next((name for how, name in called if how == 'condition'), None)
        trips = _trip_count(computations.get(condition, []))
        loops.append(trips)
      for how, name in called:
        callers.setdefault(name, []).append((caller, (trips or 1) if how == 'body' else 1))
  runs = {}

  def count(name: str) -> int:
    if name not in runs:
      runs[name] = sum(count(caller) * times for caller, times in callers[name]) if name in callers else 1
    return runs[name]

  for name in computations:
    count(name)
  return runs, loops


def loop_trip_counts(hlo_text: str) -> list[int | None]:
  """The trip count of each while loop of an HLO module's text (``None`` where it is not read)."""
  return _runs(_computations(hlo_text))[1]


def collectives(hlo_text: str) -> dict[str, dict[str, int]]:
  """Count and result bytes of each kind of collective that one run of an HLO module's text
  performs: asynchronous ones counted at their ``-start`` (whose tuple counts its largest array,
  the result), those in a loop's body as often as the loop runs it.

  One collective is one channel: libtpu's asynchronous collective fusions repeat an all-gather
  in its start, its done and each fusion computed while it is in flight (a loop's body among
  them), all with the collective's ``channel_id``. Such copies count once, as often as the
  computation that starts it runs (the least-run of them)."""
  computations = _computations(hlo_text)
  runs, _ = _runs(computations)
  found = {op: {'count': 0, 'bytes': 0} for op in COLLECTIVES}
  channels = {}  # (op, channel) -> (runs, bytes) of its least-run copy
  for name, lines in computations.items():
    for line in lines:
      match = _COLLECTIVE_LINE.search(line)
      if not match:
        continue
      sizes = [_array_bytes(dtype, dims) for dtype, dims in _ARRAY.findall(match['shape'])]
      size = (max(sizes) if match['start'] else sum(sizes)) if sizes else 0
      channel = _CHANNEL.search(line)
      if channel is None:
        found[match['op']]['count'] += runs[name]
        found[match['op']]['bytes'] += runs[name] * size
        continue
      key = (match['op'], channel['id'])
      channels[key] = min(channels.get(key, (runs[name], size)), (runs[name], size))
  for (op, _), (times, size) in channels.items():
    found[op]['count'] += times
    found[op]['bytes'] += times * size
  return found


def _chip(topology: str) -> tuple[int | None, float | None]:
  generation = topology.split(':', 1)[0].lower().replace('litepod', 'e').replace('v5lite', 'v5e')
  return CHIPS.get(generation, (None, None))


def device_share(topology: str, devices) -> tuple[int | None, float | None, int]:
  """One device's HBM bytes and bfloat16 peak TFLOP/s, and the slice's chip count. libtpu gives each
  TensorCore of a v4 chip as a device of its own (``v4:2x2x4``: 32 devices on 16 chips), and
  the chip's cores share its HBM and its peak."""
  hbm, peak_tflops = _chip(topology)
  chips = len({tuple(device.coords) for device in devices})
  share = chips / len(devices)
  return (
    None if hbm is None else int(hbm * share),
    None if peak_tflops is None else peak_tflops * share,
    chips,
  )


def _per_chip_bytes(tree) -> int:
  """Bytes one chip holds of the abstract arrays of ``tree`` (each a ``ShapeDtypeStruct`` with a sharding)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  return sum(
    int(np.prod(x.sharding.shard_shape(x.shape))) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)
  )


def _gib(size: float | None) -> str:
  return 'unknown' if size is None else f'{size / GIB:.2f} GiB'


def _load_libtpu(folder: str | None) -> None:
  if folder and os.path.abspath(folder) in sys.path:
    return  # put there before the flags were parsed
  if not folder:
    cli.fail(
      '--libtpu_dir (or LIBTPU_DIR) must name the folder libtpu was installed into (pip install --target).'
    )
  if not os.path.isdir(os.path.join(folder, 'libtpu')):
    cli.fail(
      f'--libtpu_dir {folder} holds no libtpu package (pip install --target {folder} "libtpu==0.0.42.*").'
    )
  sys.path.insert(0, os.path.abspath(folder))
  os.environ['JAX_PLATFORMS'] = 'cpu'  # the TPUs are only compiled for
  os.environ.setdefault(
    'ALLOW_MULTIPLE_LIBTPU_LOAD', '1'
  )  # no TPU to guard: several compiles may run at once
  if 'jax' in sys.modules:
    raise RuntimeError('compile_for must put libtpu on sys.path before JAX is imported.')


def compile_for(config, topology: str, sizes: dict[str, int]) -> dict:
  """Compiles ``config``'s train step for ``topology``; the figures printed, as a dict (``fits`` and all)."""
  import jax  # pylint: disable=g-import-not-at-top  (after libtpu is on sys.path)
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top

  from trainer.errors import ConfigError  # pylint: disable=g-import-not-at-top
  from trainer.optim import parameter_path  # pylint: disable=g-import-not-at-top
  from trainer.partitioning import batch_sharding, replicated  # pylint: disable=g-import-not-at-top
  from trainer.run_step import build_step  # pylint: disable=g-import-not-at-top
  from trainer.task import resolved_task_class  # pylint: disable=g-import-not-at-top

  family = resolved_task_class(config)
  try:
    devices = topologies.get_topology_desc(platform='tpu', topology_name=topology).devices
  except Exception as error:  # pylint: disable=broad-except  (libtpu's own message names the problem)
    raise ConfigError(f'--topology {topology!r}: {str(error).splitlines()[0]}') from None
  task = family.without_data(config, sizes)
  total_steps = config.get('total_steps') or 1_000_000  # only the schedule's length: no shape depends on it
  run_step = build_step(
    config, task, max(total_steps, config.optimizer.get('warmup_steps', 0) + 1), devices=devices
  )
  mesh, init = run_step.mesh, run_step.init
  step = run_step.train_step(init.parts(init.host_rest()))
  metrics = jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated(mesh)), task.train_metrics.empty()
  )
  batch = {
    name: jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=batch_sharding(mesh))
    for name, shape in task.batch_shapes(config.batch_size).items()
  }
  hbm, peak_tflops, chips = device_share(topology, devices)
  state = init.abstract_state
  leaves = jax.tree_util.tree_flatten_with_path(state.params)[0]
  result = {
    'topology': topology,
    'chips': chips,
    'devices': len(devices),
    'mesh': dict(mesh.shape),
    'batch_size': config.batch_size,
    'grad_accum_steps': config.grad_accum_steps,
    'parameters': sum(x.size for x in jax.tree.leaves(state.params)),
    'frozen_parameters': sum(x.size for key, x in leaves if parameter_path(key) in run_step.frozen),
    'per_chip_bytes': {
      'parameters': _per_chip_bytes(state.params),
      'optimizer_state': _per_chip_bytes(state.opt_state),
      'batch': _per_chip_bytes(batch),
    },
    'hbm_bytes': hbm,
  }
  start = time.perf_counter()
  try:
    compiled = step.lower(state, metrics, batch).compile()
  except Exception as error:  # pylint: disable=broad-except
    if 'RESOURCE_EXHAUSTED' not in str(error):
      raise
    result.update(
      fits=False,
      compile_seconds=time.perf_counter() - start,
      error=_exhausted(str(error)),
      **dict.fromkeys(_COMPILED_FIGURES),  # the same keys as a step that compiled, for scripts
      **_exhausted_sizes(str(error)),
    )
    result['per_chip_bytes'].update(dict.fromkeys(_COMPILED_BYTES))
    return result
  result['compile_seconds'] = time.perf_counter() - start
  memory = compiled.memory_analysis()
  total = (
    memory.argument_size_in_bytes
    + memory.output_size_in_bytes
    - memory.alias_size_in_bytes
    + memory.temp_size_in_bytes
    + memory.generated_code_size_in_bytes
  )
  result['per_chip_bytes'].update(
    arguments=memory.argument_size_in_bytes,
    outputs_not_aliased=memory.output_size_in_bytes - memory.alias_size_in_bytes,
    temporaries=memory.temp_size_in_bytes,
    code=memory.generated_code_size_in_bytes,
    total=total,
  )
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, list | tuple) else cost
  flops = float(cost.get('flops', 0.0))
  hlo_text = compiled.as_text()
  result.update(
    fits=hbm is None or total <= hbm,
    flops_per_chip=flops,
    flops=flops * len(devices),
    collectives=collectives(hlo_text),
    loop_trip_counts=loop_trip_counts(hlo_text),
    **estimate(cost, peak_tflops),
  )
  return result


def estimate(cost: dict, peak_tflops: float | None) -> dict[str, float | None]:
  """XLA's estimated step time (``optimal_seconds`` of its cost analysis) and the share of the chip's
  peak it implies; both ``None`` unless XLA gives a positive time (it gives -1 where it has none)."""
  seconds = float(cost.get('optimal_seconds', -1.0))
  if not seconds > 0:
    return {'estimated_seconds': None, 'estimated_utilisation': None}
  flops = float(cost.get('flops', 0.0))
  utilisation = flops / seconds / (peak_tflops * 1e12) if peak_tflops and flops > 0 else None
  return {'estimated_seconds': seconds, 'estimated_utilisation': utilisation}


def _exhausted(message: str) -> str:
  """XLA's RESOURCE_EXHAUSTED message, from that word to the end of its sentence."""
  found = message[message.index('RESOURCE_EXHAUSTED') :].split('\n')[0]
  return ' '.join(found.split())


# XLA's sizes in that message: "the total memory required for HLO temporaries (32.60G) exceeds
# available HBM (15.75G)", in its own units (G: 2**30 bytes).
_EXHAUSTED_SIZES = re.compile(
  r'temporaries \((?P<needed>[\d.]+)G\) exceeds available HBM \((?P<available>[\d.]+)G\)'
)


def _exhausted_sizes(message: str) -> dict[str, float]:
  """``xla_temporaries_needed_gib`` and ``xla_available_gib`` of the message, where it gives them."""
  found = _EXHAUSTED_SIZES.search(message)
  if not found:
    return {}
  return {
    'xla_temporaries_needed_gib': float(found['needed']),
    'xla_available_gib': float(found['available']),
  }


def report(result: dict) -> list[str]:
  """The lines printed before the JSON line."""
  bytes_ = result['per_chip_bytes']
  unit = 'chip' if result['devices'] == result['chips'] else 'device'
  lines = [
    f'{result["topology"]}: {_devices(result)}, mesh {result["mesh"]}, batch {result["batch_size"]} '
    f'({result["grad_accum_steps"]} micro-batches), {result["parameters"] / 1e6:.1f}M parameters'
    + _frozen(result),
    f'per {unit}: parameters {_gib(bytes_["parameters"])}, optimizer state {_gib(bytes_["optimizer_state"])}, '
    f'batch {_gib(bytes_["batch"])}',
  ]
  if result.get('error'):
    lines.append(_does_not_fit(result, result['error']))
    return lines
  lines.append(
    f'per {unit}, from XLA: arguments {_gib(bytes_["arguments"])}, temporaries {_gib(bytes_["temporaries"])}, '
    f'total {_gib(bytes_["total"])} of {_gib(result["hbm_bytes"])} HBM'
  )
  lines.append(
    f'FLOPs per step (XLA): {result["flops"]:.4g} ({result["flops_per_chip"]:.4g} per chip)'
    + _loops_counted_once(result['loop_trip_counts'])
    + f'; compiled in {result["compile_seconds"]:.1f} s'
  )
  found = [f'{op} {c["count"]} ({_gib(c["bytes"])})' for op, c in result['collectives'].items() if c['count']]
  lines.append('collectives: ' + (', '.join(found) if found else 'none'))
  if result['estimated_seconds']:
    line = (
      f'XLA estimate of the step time (the compiler, not a measurement): {result["estimated_seconds"]:.4g} s'
    )
    if result['estimated_utilisation']:
      line += f", implying {100 * result['estimated_utilisation']:.1f}% of the chips' bfloat16 peak"
    if _loops_counted_once(result['loop_trip_counts']):
      line += ' (from the same cost analysis: loop bodies counted once)'
    lines.append(line)
  if not result['fits']:
    lines.append(_does_not_fit(result, f'{_gib(bytes_["total"])} per {unit} needed'))
  return lines


def _frozen(result: dict) -> str:
  frozen = result.get('frozen_parameters')
  return f' ({frozen / 1e6:.1f}M frozen: their gradients are not computed)' if frozen else ''


def _loops_counted_once(trip_counts: list[int | None]) -> str:
  """XLA's cost analysis counts a while loop's body once (scanned layers, micro-batches): say so."""
  loops = [count for count in trip_counts if count != 1]
  if not loops:
    return ''
  times = collections.Counter('?' if count is None else str(count) for count in loops)
  counts = ', '.join(count if n == 1 else f'{count} x{n}' for count, n in times.items())
  return (
    f', a lower bound: XLA counts the body of each loop once, and this program runs {len(loops)} '
    f'loop{"s" * (len(loops) > 1)} (iterations: {counts})'
  )


def _devices(result: dict) -> str:
  if result['devices'] == result['chips']:
    return f'{result["chips"]} chips'
  return f"{result['chips']} chips as {result['devices']} devices (TensorCores sharing a chip's HBM)"


def _does_not_fit(result: dict, needed: str) -> str:
  device = 'a chip' if result['devices'] == result['chips'] else 'a device'
  return (
    f'does not fit: {needed} ({device} of {result["topology"]} has {_gib(result["hbm_bytes"])}); '
    'try sharding parameters and optimizer state (--config.mesh.fsdp=N), fewer examples per '
    'micro-batch (--config.grad_accum_steps=N) or rematerialisation (--config.model.remat=full)'
  )


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  import json  # pylint: disable=g-import-not-at-top

  _load_libtpu(_LIBTPU_DIR.value)
  cli.quiet_library_logs()
  sizes = {'num_classes': _NUM_CLASSES.value, 'channels': _CHANNELS.value, 'vocab_size': _VOCAB_SIZE.value}
  result = cli.run_reporting_user_errors(compile_for, _CONFIG.value, _TOPOLOGY.value, sizes)
  for line in report(result):
    print(line)
  print(json.dumps(result, sort_keys=True), flush=True)
  if not result['fits']:
    sys.exit(1)


def _parse_flags(argv: list[str]) -> list[str]:
  """``cli.parse_flags``, with libtpu put on ``sys.path`` first: a config file imports its family, and
  so JAX, as it loads."""
  if any(argument == '--config' or argument.startswith('--config=') for argument in argv):
    folder = _LIBTPU_DIR.default
    for index, argument in enumerate(argv):
      if argument.startswith('--libtpu_dir='):
        folder = argument.split('=', 1)[1]
      elif argument == '--libtpu_dir' and index + 1 < len(argv):
        folder = argv[index + 1]
    _load_libtpu(folder)
  return cli.parse_flags(argv)


if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)
