"""Every ``python ...`` command in a code block of README.md and docs/*.md names a module or script that
exists and flags it defines, and its ``--config`` file loads with its ``--config.*`` overrides; so a
renamed flag, file or config field breaks this test instead of a reader's command. Nothing is run."""

import ast
import functools
import importlib.util
import json
import pathlib
import re
import shlex

import pytest
from absl import flags
from ml_collections import config_flags

from records import store

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / 'README.md', ROOT / 'CONTRIBUTING.md', *sorted((ROOT / 'docs').rglob('*.md'))]
ABSL_FLAGS = {'help', 'helpfull', 'helpshort', 'helpxml', 'verbosity', 'v', 'logtostderr', 'alsologtostderr'}
ABSL_FLAGS |= {'log_dir', 'flagfile', 'undefok', 'only_check_args', 'pdb_post_mortem', 'run_with_pdb'}
COMMAND = re.compile(r'^\s*(\w+=\S+\s+)*python3?\s')
NUMBER_KINDS = {'integer': int, 'int': int, 'float': float}
DEFINE = re.compile(r'DEFINE_(\w+)$')
# Words a page uses for "your own value here": not checked as values.
PLACEHOLDER = re.compile(r'^(W|S|N|DIR|FILE|PATH/TO/\S*|\S*\.\.\.\S*)$')


@functools.lru_cache(maxsize=None)
def _module_file(module: str) -> pathlib.Path | None:
  """The file of a module of this repository (a package's ``__main__`` or ``__init__``), else None."""
  path = ROOT / pathlib.Path(*module.split('.'))
  for candidate in (path.with_suffix('.py'), path / '__main__.py', path / '__init__.py'):
    if candidate.exists():
      return candidate
  return None


@functools.lru_cache(maxsize=None)
def _flags_and_imports(path: pathlib.Path) -> tuple[dict[str, type | None], tuple[pathlib.Path, ...]]:
  """The absl flags and argparse options ``path`` defines (name -> int or float where the value must
  be one, else None), and the repository modules it imports."""
  found, imported = {}, []
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Call):
      name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, 'id', '')
      literal = [
        arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
      ]
      match = DEFINE.match(name)
      if match and literal:
        found[literal[0]] = NUMBER_KINDS.get(match.group(1))
        if match.group(1) in ('bool', 'boolean'):
          found[f'no{literal[0]}'] = None
      elif name == 'add_argument':
        kind = next((getattr(key.value, 'id', None) for key in node.keywords if key.arg == 'type'), None)
        for option in (arg for arg in literal if arg.startswith('-')):
          found[option.lstrip('-')] = NUMBER_KINDS.get(kind)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      imported += [node.module] + [f'{node.module}.{alias.name}' for alias in node.names]
    elif isinstance(node, ast.Import):
      imported += [alias.name for alias in node.names]
  files = tuple(file for file in map(_module_file, imported) if file is not None)
  return found, files


@functools.lru_cache(maxsize=None)
def defined_flags(path: pathlib.Path) -> dict[str, type | None]:
  """The flags defined in ``path`` and in the repository modules it imports, directly or not."""
  found, seen, waiting = dict.fromkeys(ABSL_FLAGS), {path}, [path]
  while waiting:
    names, files = _flags_and_imports(waiting.pop())
    found |= names
    waiting += [file for file in files if file not in seen]
    seen.update(files)
  return found


def _blocks(text: str) -> list[list[str]]:
  """The lines of each fenced code block, and of each run of 4-space-indented lines after a blank line."""
  blocks, lines, index = [], text.splitlines(), 0
  while index < len(lines):
    if lines[index].lstrip().startswith('```'):
      end = next(i for i in range(index + 1, len(lines)) if lines[i].lstrip().startswith('```'))
      if lines[index].strip() not in ('```python', '```py'):  # Python code, not commands
        blocks.append(lines[index + 1 : end])
      index = end + 1
    elif lines[index].startswith('    ') and index and not lines[index - 1].strip():
      end = index
      while end < len(lines) and lines[end].startswith('    '):
        end += 1
      blocks.append([line[4:] for line in lines[index:end]])
      index = end
    else:
      index += 1
  return blocks


def _pipeline_parts(line: str) -> list[str]:
  """The commands of a shell line joined by ``&&``, ``||``, ``|`` or ``;`` outside quotes."""
  parts, current, quote, index = [], '', None, 0
  while index < len(line):
    char = line[index]
    if quote:
      quote = None if char == quote else quote
    elif char in '\'"':
      quote = char
    elif char in '&|;':
      parts.append(current)
      current = ''
      while index + 1 < len(line) and line[index + 1] in '&|':
        index += 1
      index += 1
      continue
    current += char
    index += 1
  return [part for part in [*parts, current] if part.strip()]


def _words(line: str, variables: dict[str, str]) -> list[str]:
  line = re.sub(r'\$(\w+)', lambda match: variables.get(match.group(1), match.group(0)), line)
  return shlex.split(line, comments=True)


def commands(page: pathlib.Path) -> list[list[str]]:
  """The words of each ``python`` command in the page's code blocks (continuations joined, shell
  variables of the block substituted, ``VAR=value`` prefixes dropped)."""
  found = []
  for block in _blocks(page.read_text()):
    variables, pending = {}, ''
    for line in block:
      line = pending + line
      if line.rstrip().endswith('\\'):
        pending = line.rstrip()[:-1] + ' '
        continue
      pending = ''
      assignment = re.match(r'^(\w+)=(.*)$', line.strip())
      if assignment and ' python' not in line:
        variables[assignment.group(1)] = ' '.join(shlex.split(assignment.group(2)))
        continue
      for part in _pipeline_parts(line):
        if not COMMAND.match(part) or re.match(r'^\s*python3?\s+-c\b', part):
          continue
        try:
          words = _words(part, variables)
        except ValueError as error:  # an unclosed quote: reported by the test of this command
          words = ['python', f'(unparseable: {error}) {part.strip()}']
        while words and re.match(r'^\w+=', words[0]):
          words = words[1:]
        if words and words[0] in ('python', 'python3') and len(words) > 1 and words[1] != '-c':
          found.append(words)
  return found


ALL = [(page, words) for page in PAGES for words in commands(page)]


def test_the_commands_are_found():
  assert len(ALL) > 40
  words = commands(ROOT / 'README.md')
  assert ['python', 'train.py', '--config', 'configs/vit_digits.py', '--workdir', 'runs/vit_digits'] in words


def _target(words: list[str]) -> tuple[str, pathlib.Path | None]:
  """(what the command runs, its file in this repository or None for an installed module)."""
  if words[1] == '-m':
    module = words[2]
    file = _module_file(module)
    top = module.split('.')[0]
    if file is None and ((ROOT / top).exists() or importlib.util.find_spec(top) is None):
      raise AssertionError(f'no module {module}')
    return module, file
  file = ROOT / words[1]
  assert file.exists(), f'no script {words[1]}'
  return words[1], file


def _arguments(words: list[str]) -> list[str]:
  return words[3:] if words[1] == '-m' else words[2:]


@pytest.mark.parametrize(
  'page, words',
  ALL,
  ids=[f'{page.name}:{" ".join(words[1:3])}:{index}' for index, (page, words) in enumerate(ALL)],
)
def test_a_documented_command_names_what_exists(page, words):
  shown = ' '.join(words)
  try:
    target, file = _target(words)
  except AssertionError as error:
    pytest.fail(f'{page.name}: {shown}: {error}')
  if file is None:
    return  # an installed tool (pytest, pip, venv)
  defined = defined_flags(file)
  config, overrides = None, []
  arguments = _arguments(words)
  for index, word in enumerate(arguments):
    if word == '--':
      break
    if not word.startswith('--'):
      continue
    name, equals, value = word[2:].partition('=')
    if name == 'config':
      config = value or arguments[index + 1]
    elif name.startswith('config.'):
      overrides.append(word)
    else:
      assert name in defined, f'{page.name}: {shown}: {target} defines no flag --{name}'
      kind = defined[name]
      if kind is not None and not equals:
        value = arguments[index + 1] if index + 1 < len(arguments) else ''
      if kind is not None and not PLACEHOLDER.match(value):
        try:
          kind(value)
        except ValueError:
          pytest.fail(f'{page.name}: {shown}: --{name} takes {kind.__name__}, not {value!r}')
  if config is not None:
    assert 'config' in defined, f'{page.name}: {shown}: {target} takes no --config'
    _load_config(page, shown, config, overrides)


def _load_config(page: pathlib.Path, shown: str, config: str, overrides: list[str]) -> None:
  assert (ROOT / config.partition(':')[0]).exists(), f'{page.name}: {shown}: no config file {config}'
  checked = [override for override in overrides if not PLACEHOLDER.match(override.partition('=')[2])]
  argv = ['command', f'--config={ROOT / config}', *checked]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file(
    'config', None, 'the config', flag_values=values, lock_config=True, sys_argv=argv
  )
  try:
    values(argv)
    values.config  # noqa: B018 (loading the file and applying the overrides)
  except Exception as error:  # noqa: BLE001 (any failure is the page's command failing)
    pytest.fail(f'{page.name}: {shown}: {type(error).__name__}: {str(error).splitlines()[0]}')


# Shell commands a record may run besides ``python``: to unpack data into its empty ``runs/``, or
# to write an older commit's code there and run it (``git archive C | tar -x -C runs/old && cd runs/old``).
RECORD_SETUP = ('mkdir', 'tar', 'git', 'cd')


def record_parts(command: str) -> list[tuple[list[str], bool]]:
  """The words of each ``&&`` part of a record's command (variable assignments dropped), each with
  whether it runs in a folder the command changed into (another commit's code, whose flags are
  not today's): after a ``cd``, to the end of the command or of the ``( ... )`` around it."""
  parts, elsewhere = [], False
  for part in command.split(' && '):
    subshell_ends = part.rstrip().endswith(')')
    words = shlex.split(part.strip().lstrip('(').rstrip(')'))
    while words and re.match(r'^\w+=', words[0]):
      words = words[1:]
    parts.append((words, elsewhere))
    elsewhere = (elsewhere or words[0] == 'cd') and not subshell_ends
  return parts


def _record_commands() -> list[tuple[str, list[str], bool]]:
  """The parts of every result record's command (results/*.json)."""
  return [
    (path.name, words, elsewhere)
    for path in sorted((ROOT / 'results').glob('*.json'))
    for words, elsewhere in record_parts(store.command_today(json.loads(path.read_text())['command']))
  ]


def test_a_record_command_run_in_another_commits_folder_is_told_apart():
  command = (
    'mkdir -p runs/old && git archive 3918e38 | tar -x -C runs/old && (cd runs/old && python train.py --a=1) '
    '&& python -m benchmarks.train_rate --workdir runs/old_run && cd runs/x && X=1 python -m m --b'
  )
  assert [(words[0], elsewhere) for words, elsewhere in record_parts(command)] == [
    ('mkdir', False),
    ('git', False),
    ('cd', False),
    ('python', True),  # inside the ( ... ) after cd: the old commit's train.py
    ('python', False),
    ('cd', False),
    ('python', True),
  ]


@pytest.mark.parametrize('record, words, elsewhere', _record_commands(), ids=lambda value: str(value)[:60])
def test_a_recorded_command_names_what_exists(record, words, elsewhere):
  if words[0] in RECORD_SETUP:
    return
  if words[0] == 'bash':  # a script of the checkout's (CI's peer tier)
    assert (ROOT / words[1]).is_file(), f'{record}: {" ".join(words)}'
    return
  # ``python``, or the interpreter of another environment (PyTorch's, for the comparisons with timm)
  assert words[0] == 'python' or words[0].endswith('/bin/python'), f'{record}: {" ".join(words)}'
  if not elsewhere:
    test_a_documented_command_names_what_exists(pathlib.Path(record), words)
