"""Result records: one JSON file per measured result under ``results/``, and running a command to make one.

A record holds the exact command, the commit, the date, the machine (CPU model and SIMD flags, cores,
accelerator), the versions of Python and the numerical libraries, the wall and CPU seconds, the load average sampled during the run and the numbers, named
as the command printed them. A command gives its numbers as one JSON object on the last line of its
stdout (``evaluate.py``, ``benchmarks/*``), or in a JSON file it writes (``ablate.py``'s
``results.json``, named with ``numbers_file``). A command that measures several things one after
another (a training run, then two evaluations of it) may write each one's JSON to a file of its own:
``numbers_file`` then maps a name to each file, and the numbers of each are prefixed with its name
(``end.bleu``, ``average.bleu``).

Records written by a run have ``"source": "run"``. Records made from docs/results.md before records
existed have ``"source": "transcribed"``: their numbers are the page's, and a field the page did not
state is null.

A record may also state, per metric, the ``spread`` a rerun may move by (a seed spread, another CPU
kind) and, for the results tables, ``cells``: column name -> text in which ``{metric}`` or
``{metric:format}`` stands for a number of the record. A record whose one command measured several
rows (``benchmarks/mnist_to_digits.py``) has ``parts``: part name -> that row's ``what`` and
``cells`` (``records/tables.py``).
"""

import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import re
import resource
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'results'
SOURCES = ('run', 'transcribed')
# The CPU flags that decide XLA:CPU's kernels (and with them the last digits of a result).
SIMD_FLAG = re.compile(r'^(avx|avx2|fma|f16c|avx512\w*|avx_vnni\w*|amx\w*|sse4_\d|neon|asimd\w*|sve\w*)$')
LOAD_SAMPLE_SECONDS = 5.0
# In the scratch folder of a run whose recording failed: what the run measured (``measured_from_kept``).
KEPT_RUN = 'measured.json'
# What a new run of a record's command keeps of the record it replaces: how it is shown, and its spread.
CARRIED_ON_RERUN = ('what', 'cells', 'parts', 'spread', 'compared', 'numbers_file', 'exit_status')
NAME = re.compile(r'^[a-z0-9][a-z0-9_.-]*$')
# The libraries whose versions a record states: those that compute the numbers.
LIBRARIES = ('jax', 'jaxlib', 'flax', 'optax', 'numpy')
# Modules a record's command may name that live elsewhere today: the record keeps the command as it
# was run, and a rerun runs the module under its present name.
MOVED_MODULES = {'vit.export_npz': 'vit.weights.export_npz', 'vit.export_weights': 'vit.weights.export'}


class RecordError(ValueError):
  """A record that cannot be read, or a request that names none."""


def command_today(command: str) -> str:
  """A record's command with each moved module (``MOVED_MODULES``) named as it is named today."""
  return re.sub(r'(?<=-m )([\w.]+)', lambda m: MOVED_MODULES.get(m.group(1), m.group(1)), command)


def path_of(name: str, results: pathlib.Path | None = None) -> pathlib.Path:
  if not NAME.match(name):
    raise RecordError(f'record name {name!r}: use lowercase letters, digits, ".", "_" and "-"')
  return (results or RESULTS) / f'{name}.json'


def load(name: str, results: pathlib.Path | None = None) -> dict[str, Any]:
  path = path_of(name, results)
  if not path.exists():
    known = ', '.join(sorted(record['name'] for record in load_all(results))) or 'none'
    raise RecordError(f'no record {name!r} in {path.parent} (records: {known})')
  return _checked(json.loads(path.read_text()), path)


def load_all(results: pathlib.Path | None = None) -> list[dict[str, Any]]:
  return [
    _checked(json.loads(path.read_text()), path) for path in sorted((results or RESULTS).glob('*.json'))
  ]


def _checked(record: dict[str, Any], path: pathlib.Path) -> dict[str, Any]:
  missing = {'name', 'source', 'command', 'commit', 'date', 'machine', 'wall_seconds', 'numbers'} - set(
    record
  )
  if missing:
    raise RecordError(f'{path}: missing {", ".join(sorted(missing))}')
  if record['name'] != path.stem:
    raise RecordError(f'{path}: its name is {record["name"]!r}, not the file name {path.stem!r}')
  if record['source'] not in SOURCES:
    raise RecordError(f'{path}: source {record["source"]!r} is not one of {", ".join(SOURCES)}')
  return record


def write(record: dict[str, Any], results: pathlib.Path | None = None) -> pathlib.Path:
  path = path_of(record['name'], results)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + '\n')
  return path


# --- the machine and the code ----------------------------------------------------------------------


def machine() -> dict[str, Any]:
  """This machine: CPU model, its SIMD flags, cores, memory and the accelerators ``nvidia-smi`` lists."""
  cpu, flags = platform.processor() or None, []
  cpuinfo = pathlib.Path('/proc/cpuinfo')
  if cpuinfo.exists():
    text = cpuinfo.read_text()
    model = re.search(r'^model name\s*:\s*(.+)$', text, re.M)
    cpu = model.group(1).strip() if model else cpu
    found = re.search(r'^(?:flags|Features)\s*:\s*(.+)$', text, re.M)
    flags = sorted(flag for flag in found.group(1).split() if SIMD_FLAG.match(flag)) if found else []
  memory_gb = None
  if hasattr(os, 'sysconf') and 'SC_PHYS_PAGES' in os.sysconf_names:
    memory_gb = round(os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30, 1)
  return {
    'label': None,
    'cpu': cpu,
    'flags': flags,
    'cores': os.cpu_count(),
    'memory_gib': memory_gb,
    'accelerator': _accelerator(),
    'description': None,
  }


def software() -> dict[str, str | None]:
  """The versions of Python and of ``LIBRARIES`` (``None``: not installed)."""

  def version(name):
    try:
      return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      return None

  return {'python': platform.python_version(), **{name: version(name) for name in LIBRARIES}}


def _accelerator() -> str | None:
  if shutil.which('nvidia-smi') is None:
    return None
  listed = subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True, check=False).stdout.strip()
  return '; '.join(listed.splitlines()) or None


def commit() -> tuple[str | None, bool | None]:
  """(the checkout's commit, whether it has uncommitted changes to tracked files). The records under
  ``results/`` do not count: one record written before another is not a change of the code."""
  try:
    head = _git('rev-parse', 'HEAD')
    dirty = bool(_git('status', '--porcelain', '--untracked-files=no', '--', '.', ':(exclude)results'))
  except (OSError, subprocess.CalledProcessError):
    return None, None
  return head, dirty


def _git(*args: str) -> str:
  return subprocess.run(['git', *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


# --- running a command -----------------------------------------------------------------------------


def scratch_checkout() -> pathlib.Path:
  """A temporary folder that links every top-level entry of the checkout but ``runs/``, so a command's
  relative paths resolve as in the checkout and its workdirs under ``runs/`` start empty."""
  scratch = pathlib.Path(tempfile.mkdtemp(prefix='reproduce-'))
  for entry in ROOT.iterdir():
    if entry.name != 'runs':
      (scratch / entry.name).symlink_to(entry)
  (scratch / 'runs').mkdir()
  return scratch


class _LoadSampler(threading.Thread):
  """Samples the 1-minute load average every few seconds until stopped."""

  def __init__(self):
    super().__init__(daemon=True)
    self.samples = [os.getloadavg()[0]]
    self._stop_event = threading.Event()

  def run(self):
    while not self._stop_event.wait(LOAD_SAMPLE_SECONDS):
      self.samples.append(os.getloadavg()[0])

  def stop(self) -> dict[str, float]:
    self._stop_event.set()
    self.join()
    self.samples.append(os.getloadavg()[0])
    mean = sum(self.samples) / len(self.samples)
    return {'min': round(min(self.samples), 2), 'mean': round(mean, 2), 'max': round(max(self.samples), 2)}


def run_command(command: str, cwd: pathlib.Path, echo: bool = True) -> dict[str, Any]:
  """Runs ``command`` with ``sh -c`` in ``cwd``, its output passed through; returns its exit status,
  stdout, wall and CPU seconds (its processes, user and system) and the load average during it."""
  sampler = _LoadSampler()
  sampler.start()
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  process = subprocess.Popen(['sh', '-c', command], cwd=cwd, stdout=subprocess.PIPE, text=True)
  lines = []
  for line in process.stdout:
    lines.append(line)
    if echo:
      print(line, end='', flush=True)
  status = process.wait()
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
  return {
    'status': status,
    'stdout': ''.join(lines),
    'wall_seconds': round(wall, 1),
    'cpu_seconds': round(cpu, 1),
    'load_average': sampler.stop(),
  }


def numbers_from_stdout(stdout: str) -> dict[str, Any]:
  """The numbers of the last stdout line that is a JSON object."""
  for line in reversed(stdout.splitlines()):
    line = line.strip()
    if line.startswith('{') and line.endswith('}'):
      try:
        return flatten(json.loads(line))
      except json.JSONDecodeError:
        continue
  raise RecordError('the command printed no JSON object on a line of its own: it gave no numbers to record')


def numbers_from_file(path: pathlib.Path) -> dict[str, Any]:
  """The numbers of a JSON file, or of its last line that is a JSON object (a command's stdout saved
  with ``>``)."""
  if not path.exists():
    raise RecordError(f'the command wrote no {path}, the file its numbers are read from')
  text = path.read_text()
  try:
    return flatten(json.loads(text))
  except json.JSONDecodeError:
    pass
  try:
    return numbers_from_stdout(text)
  except RecordError:
    raise RecordError(f'{path} is neither JSON nor ends with a line that is a JSON object') from None


def numbers_from_files(scratch: pathlib.Path, numbers_file: str | dict[str, str]) -> dict[str, Any]:
  """The numbers of one file, or of several named files, each one's numbers prefixed with its name."""
  if isinstance(numbers_file, str):
    return numbers_from_file(scratch / numbers_file)
  return {
    f'{name}.{metric}': value
    for name, path in numbers_file.items()
    for metric, value in numbers_from_file(scratch / path).items()
  }


def flatten(value: Any, prefix: str = '') -> dict[str, Any]:
  """Numeric and boolean leaves of nested dicts and lists, named by their path (``a.b.0``); a list of
  dicts that each have a ``name`` (an ablation's runs) is keyed by those names."""
  if isinstance(value, dict):
    items = value.items()
  elif isinstance(value, list) and value and all(isinstance(item, dict) and 'name' in item for item in value):
    items = [(item['name'], {key: each for key, each in item.items() if key != 'name'}) for item in value]
  elif isinstance(value, list):
    items = enumerate(value)
  else:
    return {prefix: value} if isinstance(value, (int, float)) else {}
  flat = {}
  for key, item in items:
    flat.update(flatten(item, f'{prefix}.{key}' if prefix else str(key)))
  return flat


def measure(
  command: str, numbers_file: str | dict[str, str] | None = None, echo: bool = True, exit_status: int = 0
) -> dict[str, Any]:
  """Runs ``command`` in a scratch checkout (fresh ``runs/``) and returns what a record needs of the run.
  ``exit_status``: the status its result exits with (``benchmarks.compile_for`` exits 1, its numbers
  printed, when a step does not fit); any other is a failure."""
  scratch = scratch_checkout()
  head, dirty = commit()
  ran = run_command(command, scratch, echo)
  try:
    measured = _measured(ran, exit_status, scratch, numbers_file)
  except RecordError as error:  # what a long run wrote and measured is not thrown away with the record
    kept = {'command': command, 'commit': head, 'uncommitted_changes': dirty, **ran}
    (scratch / KEPT_RUN).write_text(json.dumps(kept, indent=2) + '\n')
    raise RecordError(
      f'{error}; what the command wrote and measured (records.record --from_kept) is kept in {scratch}'
    ) from None
  shutil.rmtree(scratch, ignore_errors=True)
  return measured


def _measured(ran: dict[str, Any], exit_status: int, scratch: pathlib.Path, numbers_file) -> dict[str, Any]:
  if ran['status'] != exit_status:
    expected = f', not the {exit_status} its result exits with' if exit_status else ''
    raise RecordError(f'the command exited with status {ran["status"]}{expected}: nothing recorded')
  numbers = numbers_from_files(scratch, numbers_file) if numbers_file else numbers_from_stdout(ran['stdout'])
  return {key: ran[key] for key in ('wall_seconds', 'cpu_seconds', 'load_average')} | {'numbers': numbers}


def measured_from_kept(
  scratch: pathlib.Path, command: str, numbers_file: str | dict[str, str] | None = None, exit_status: int = 0
) -> tuple[dict[str, Any], tuple[str | None, bool | None]]:
  """``(what measure returns, the commit it started from)`` for the run of ``command`` whose recording
  failed and whose scratch folder ``measure`` kept (a numbers file named wrongly, say): its times and
  output as measured then, its numbers read now."""
  path = pathlib.Path(scratch) / KEPT_RUN
  if not path.exists():
    raise RecordError(
      f'{scratch} holds no {KEPT_RUN}: it is not the folder of a run that records.record kept'
    )
  kept = json.loads(path.read_text())
  if kept['command'] != command:
    raise RecordError(f'{scratch} kept the run of {kept["command"]!r}, not of this command')
  return _measured(kept, exit_status, path.parent, numbers_file), (
    kept['commit'],
    kept['uncommitted_changes'],
  )


def command_text(words: list[str]) -> str:
  """One word is a shell command as typed (``&&``, ``VAR=value`` prefixes); several are quoted and joined."""
  return words[0] if len(words) == 1 else shlex.join(words)


def new_record(
  name: str,
  command: str,
  measured: dict[str, Any],
  started_from: tuple[str | None, bool | None],
  **fields: Any,
) -> dict[str, Any]:
  """A run's record; ``started_from`` is ``commit()`` taken as the run started (a commit made while
  a long run goes on is not the code it started with; its scratch folder links the checkout, so
  keep the code unchanged until it ends)."""
  head, dirty = started_from
  return {
    'name': name,
    'source': 'run',
    'command': command,
    'commit': head,
    'uncommitted_changes': dirty,
    'date': datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ'),
    'machine': machine(),
    'software': software(),
    **measured,
    **fields,
  }
