"""The architecture, kept by tests: the shared packages know no model family, no module imports
another that imports it back, and no comment or docstring quotes a timing.

Imports are read from the source (every ``import`` statement, also those inside functions), so a
lazy import counts as much as one at the top of a file. Measured numbers live in docs/results.md and
docs/performance.md, with their command and machine; in the code they go stale unseen.
"""

import ast
import io
import pathlib
import re
import subprocess
import sys
import tokenize

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = (
  'attention',
  'trainer',
  'pipelines',
  'ablation',
  'vit',
  'seq2seq',
  'video',
  'configs',
  'benchmarks',
)
FAMILIES = ('vit', 'seq2seq', 'video')
SHARED = ('attention', 'trainer', 'pipelines', 'ablation')


def _module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(REPO).with_suffix('').parts
  return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def _runs_as_main(node: ast.AST) -> bool:
  """``if __name__ == '__main__':``, whose imports belong to the module run as a script, not to it."""
  return (
    isinstance(node, ast.If)
    and isinstance(node.test, ast.Compare)
    and isinstance(node.test.left, ast.Name)
    and node.test.left.id == '__name__'
    and any(isinstance(c, ast.Constant) and c.value == '__main__' for c in node.test.comparators)
  )


def _nodes(tree: ast.AST):
  """Every node of ``tree`` outside ``if __name__ == '__main__':`` blocks."""
  for child in ast.iter_child_nodes(tree):
    if not _runs_as_main(child):
      yield child
      yield from _nodes(child)


def _imported_names(path: pathlib.Path, main_block: bool = False) -> set[str]:
  """The names ``path`` imports outside ``if __name__ == '__main__':`` (``main_block``: inside it)."""
  tree = ast.parse(path.read_text(), filename=str(path))
  if main_block:
    nodes = [node for block in tree.body if _runs_as_main(block) for node in ast.walk(block)]
  else:
    nodes = _nodes(tree)
  names = set()
  for node in nodes:
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names.add(node.module)
      names.update(f'{node.module}.{alias.name}' for alias in node.names)
  return names


def _project_files() -> dict[str, pathlib.Path]:
  return {_module_name(path): path for package in PACKAGES for path in (REPO / package).rglob('*.py')}


def import_graph(main_blocks: bool = False) -> dict[str, set[str]]:
  """Project module -> the project modules it imports (``from pkg import mod`` counts as ``pkg.mod``);
  with ``main_blocks``, those its ``if __name__ == '__main__':`` block imports."""
  files = _project_files()
  graph = {}
  for module, path in files.items():
    targets = set()
    for name in _imported_names(path, main_blocks):
      while name and name not in files:
        name = name.rpartition('.')[0]
      if name and name != module and name not in PACKAGES:  # a top-level package's __init__ holds no code
        targets.add(name)
    graph[module] = targets
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan's algorithm)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(module):
    index[module] = low[module] = len(index)
    stack.append(module)
    on_stack.add(module)
    for target in graph[module]:
      if target not in index:
        visit(target)
        low[module] = min(low[module], low[target])
      elif target in on_stack:
        low[module] = min(low[module], index[target])
    if low[module] == index[module]:
      component = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == module:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for module in sorted(graph):
    if module not in index:
      visit(module)
  return found


def test_the_shared_packages_import_no_model_family():
  graph = import_graph()
  leaks = {
    module: sorted(target for target in targets if target.split('.')[0] in FAMILIES)
    for module, targets in graph.items()
    if module.split('.')[0] in SHARED
  }
  assert {module: targets for module, targets in leaks.items() if targets} == {}


def test_no_module_imports_one_that_imports_it_back():
  assert cycles(import_graph()) == []


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
  seen, todo = set(), [start]
  while todo:
    for target in graph[todo.pop()] - seen:
      seen.add(target)
      todo.append(target)
  return seen


def test_no_command_imports_its_own_module_back():
  """``python -m pkg.mod`` whose ``__main__`` block imports what imports ``pkg.mod`` runs the module
  twice, as ``__main__`` and as itself: a circle the graph above cannot see."""
  graph, commands = import_graph(), import_graph(main_blocks=True)
  circles = {
    module: sorted(target for target in targets if module in _reachable(graph, target) | {target})
    for module, targets in commands.items()
  }
  assert {module: targets for module, targets in circles.items() if targets} == {}


def test_the_cycle_finder_finds_a_cycle():
  assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]
  assert cycles({'a': {'b'}, 'b': set()}) == []


@pytest.mark.slow  # a fresh interpreter imports every library module
def test_importing_the_library_changes_no_logging_and_no_hooks():
  """Log filters and the unraisable hook are the command lines' business (``trainer.command_line.log_filters``)."""
  modules = sorted(module for module in import_graph() if module.split('.')[0] in (*SHARED, *FAMILIES))
  script = f"""
import logging, sys
def snapshot():
  return (sys.unraisablehook, sys.excepthook, {{name: list(logging.getLogger(name).filters)
          for name in ('', 'absl', 'asyncio', 'jax', 'orbax')}})
before = snapshot()
import importlib
for module in {modules!r}:
  importlib.import_module(module)
assert snapshot() == before, (before, snapshot())
"""
  result = subprocess.run(
    [sys.executable, '-c', script], cwd=REPO, capture_output=True, text=True, timeout=600
  )
  assert result.returncode == 0, result.stderr[-3000:]


_NUMBER = r'\d[\d,]*(?:\.\d+)?(?:\s*(?:-|to)\s*\d[\d,]*(?:\.\d+)?)?'
# A duration, a speed-up, a rate or a share of the time, after a number: '2 s', '75 s', '3.5 ms',
# '25 minutes', '3-5% faster', '1.2x slower', '67.1 images/s', '35% of the time'.
TIMING = re.compile(
  rf'\b{_NUMBER}\s*(?:ms|µs|us|secs?|seconds?|mins?|minutes?|hours?)\b'
  rf'|\b{_NUMBER}\s+s\b(?!\))'
  rf'|\b{_NUMBER}\s*(?:%|x|×|times)\s+(?:faster|slower|quicker|shorter|longer|more time|less time)\b'
  rf'|\b{_NUMBER}\s*(?:images|examples|steps|tokens|clips|sentences|batches|it)/s\b'
  rf'|\b{_NUMBER}\s*%\s+of\s+(?:the\s+|its\s+|each\s+)?(?:time|step|ops|start-up|wall)',
  re.IGNORECASE,
)


def _notes(source: str):
  """``(line, text)`` of every comment and every docstring line (module, class, function) of ``source``."""
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type == tokenize.COMMENT:
      yield token.start[0], token.string
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
      docstring = ast.get_docstring(node, clean=False)
      if docstring is not None:
        for offset, text in enumerate(docstring.splitlines()):
          yield node.body[0].lineno + offset, text


def quoted_timings(root: pathlib.Path = REPO) -> list[str]:
  """``path:line: text`` of each comment or docstring line under ``root`` that quotes a timing
  (the project's .py files, outside tests/ and hidden folders such as .venv)."""
  found = []
  for path in sorted(root.rglob('*.py')):
    parts = path.relative_to(root).parts
    if parts[0] == 'tests' or any(part.startswith('.') for part in parts):
      continue
    for line, text in sorted(_notes(path.read_text())):
      if TIMING.search(text):
        found.append(f'{path.relative_to(root)}:{line}: {text.strip()}')
  return found


def test_no_comment_or_docstring_quotes_a_timing():
  found = quoted_timings()
  assert not found, 'timings belong in docs/results.md or docs/performance.md:\n' + '\n'.join(found)


def test_the_timing_finder_finds_timings_in_comments_and_docstrings_only(tmp_path):
  (tmp_path / 'tests').mkdir()
  (tmp_path / 'tests' / 'test_x.py').write_text("# 3 s here is a test's business\n")
  (tmp_path / 'a.py').write_text(
    '"""Fast.\n\nIt took 2 s on a laptop."""\n'
    'WIDTH = 3  # 3-5% faster than the reference\n'
    "SHAPE = '[3, H] and 2 MiB pages, 20% wider buckets, then 0s'  # [D, 3, H, Dh]; 512 times fewer faults\n"
    'def f():\n'
    '  """67.1 images/s (docs/results.md)."""\n'
    "  print(f'{1.5} s, 3 ms')\n"
  )
  assert quoted_timings(tmp_path) == [
    'a.py:3: It took 2 s on a laptop.',
    'a.py:4: # 3-5% faster than the reference',
    'a.py:7: 67.1 images/s (docs/results.md).',
  ]
