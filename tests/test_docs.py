"""The README, CONTRIBUTING.md and the pages of docs/: every relative link and picture resolves,
anchors included; every page is reachable from the README, which stays a front page; the headline
results page has short lines; a name of this project's code quoted in the prose, and a module a
command runs, still exist; a prediction or a duration quoted in the README or docs is its record's;
and the user pages do not speak of how the project was built."""

import ast
import functools
import json
import pathlib
import re

import pytest

from records import store
from records.reproduce import duration

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / 'docs').rglob('*.md'))
PAGES = sorted(
  [
    ROOT / 'README.md',
    ROOT / 'CHANGELOG.md',
    ROOT / 'CONTRIBUTING.md',
    *DOCS,
    ROOT / 'docs' / 'tutorial.ipynb',
  ]
)
README_MAX_LINES = 250
HEADLINE_PAGE = ROOT / 'docs' / 'results.md'
HEADLINE_MAX_CHARACTERS = 160
USER_PAGES = [ROOT / 'README.md', ROOT / 'CONTRIBUTING.md', *DOCS]

LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')


def _markdown(path: pathlib.Path) -> str:
  """A page's markdown: the file itself, or a notebook's markdown cells."""
  if path.suffix != '.ipynb':
    return path.read_text()
  cells = json.loads(path.read_text())['cells']
  return '\n\n'.join(''.join(cell['source']) for cell in cells if cell['cell_type'] == 'markdown')


def _prose(text: str) -> str:
  """The text without HTML comments (placeholders) and fenced code blocks."""
  text = re.sub(r'<!--.*?-->', '', text, flags=re.S)
  return re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)


def anchor(heading: str) -> str:
  """GitHub's anchor for a heading: lowercase, code and emphasis marks and punctuation dropped (not
  ``_`` or ``-``), spaces to hyphens."""
  text = re.sub(r'[`*]', '', heading)
  text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)
  text = re.sub(r'[^\w\- ]', '', text.lower())
  return text.replace(' ', '-')


def anchors(path: pathlib.Path) -> set[str]:
  found, seen = set(), {}
  for line in _prose(_markdown(path)).splitlines():
    match = HEADING.match(line)
    if match:
      base = anchor(match.group(2))
      count = seen.get(base, 0)
      seen[base] = count + 1
      found.add(base if count == 0 else f'{base}-{count}')
  return found


def relative_links(path: pathlib.Path) -> list[str]:
  return [
    target
    for target in LINK.findall(_prose(_markdown(path)))
    if not re.match(r'[a-z][a-z0-9+.-]*:', target)  # http:, https:, mailto:
  ]


def test_the_anchor_rule_matches_githubs():
  assert anchor("The ViT paper's Table 8 on the digits") == 'the-vit-papers-table-8-on-the-digits'
  assert anchor('Meshes: data, fsdp and model parallelism') == 'meshes-data-fsdp-and-model-parallelism'
  assert anchor('Longer ablations (documented, not yet run)') == 'longer-ablations-documented-not-yet-run'
  assert anchor('`init_from` and the `.npz` layout') == 'init_from-and-the-npz-layout'


def test_the_link_finder_skips_comments_code_and_web_addresses(tmp_path):
  page = tmp_path / 'page.md'
  page.write_text(
    '[a](a.md) ![b](images/b.png "title") [web](https://example.com) [#](#top)\n'
    '<!-- pending: ![c](c.png) -->\n```\n[d](d.md)\n```\n'
  )
  assert relative_links(page) == ['a.md', 'images/b.png', '#top']


@pytest.mark.parametrize('page', PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_and_picture_resolves(page):
  broken = []
  for target in relative_links(page):
    file_part, _, fragment = target.partition('#')
    linked = (page.parent / file_part).resolve() if file_part else page
    if not linked.exists():
      broken.append(f'{target}: no file {linked}')
    elif fragment and linked.suffix == '.md' and fragment not in anchors(linked):
      broken.append(f'{target}: no heading with anchor #{fragment} in {linked.name}')
  assert not broken, f'{page.name}: ' + '; '.join(broken)


def reachable_from(start: pathlib.Path) -> set[pathlib.Path]:
  """The pages a reader reaches from ``start`` by following relative links, ``start`` included."""
  seen, waiting = {start.resolve()}, [start.resolve()]
  while waiting:
    page = waiting.pop()
    if page.suffix not in ('.md', '.ipynb'):
      continue
    for target in relative_links(page):
      linked = (page.parent / target.partition('#')[0]).resolve()
      if linked.exists() and linked not in seen:
        seen.add(linked)
        waiting.append(linked)
  return seen


def test_the_docs_pages_are_all_reachable_from_the_readme():
  pages = {*DOCS, ROOT / 'docs' / 'tutorial.ipynb', ROOT / 'CHANGELOG.md', ROOT / 'CONTRIBUTING.md'}
  unreachable = {page.resolve() for page in pages} - reachable_from(ROOT / 'README.md')
  assert not unreachable, f'no link leads from the README to {sorted(map(str, unreachable))}'


def test_the_readme_is_a_front_page():
  lines = (ROOT / 'README.md').read_text().splitlines()
  assert len(lines) < README_MAX_LINES, f'README.md has {len(lines)} lines; move detail into docs/'


def test_the_headline_results_page_has_short_lines():
  long = [
    f'line {number}: {len(line)} characters'
    for number, line in enumerate(HEADLINE_PAGE.read_text().splitlines(), 1)
    if len(line) > HEADLINE_MAX_CHARACTERS
  ]
  assert not long, f'{HEADLINE_PAGE.name} is the page a user compares with; shorten: ' + '; '.join(long)


# Words for how the project was made, which a user page does not need.
MAKING_OF = re.compile(
  r'\bround (?:one|two|three|four|five|six)\b|\bthe house\b|\bin rooms\b|\bsessions?\b', re.I
)


@pytest.mark.parametrize('page', USER_PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_user_page_does_not_speak_of_how_the_project_was_built(page):
  found = [
    f'line {n}: {m.group(0)!r}'
    for n, line in enumerate(page.read_text().splitlines(), 1)
    for m in MAKING_OF.finditer(line)
  ]
  assert not found, f'{page.name}: ' + '; '.join(found)


# A name of this project's code: a top-level package of the repository, then attributes.
PACKAGES = sorted(path.parent.name for path in ROOT.glob('*/__init__.py'))
DOTTED = re.compile(r'`((?:%s)(?:\.\w+)+|[A-Z]\w*\.\w+)`' % '|'.join(PACKAGES))
# Dotted names in backquotes that are not this project's code: transformers' parameter names quoted
# on the ViT page (`vit.layers.N...` for `vit.encoder.layer.N...`).
OTHER_LIBRARIES = {
  'vit.layers.N.attention.q_proj.weight',
  'vit.encoder.layer.N.attention.attention.query.weight',
  'attention.o_proj',
  'attention.output.dense',
}
# A quoted file name of data (`records.json` of a data folder) is not code, though it reads as one.
DATA_FILE = re.compile(r'\.(json|jsonl|npz|txt|png|csv)$')


@functools.lru_cache(maxsize=None)
def _definitions(path: pathlib.Path) -> dict[str, ast.AST]:
  """The names a module defines at its top level (functions, classes, assignments, imports)."""
  found = {}
  for node in ast.parse(path.read_text()).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      found[node.name] = node
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
        for name in ast.walk(target):
          if isinstance(name, ast.Name):
            found[name.id] = node
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      for alias in node.names:
        found[(alias.asname or alias.name).split('.')[0]] = node
  return found


def _class_members(node: ast.ClassDef) -> set[str]:
  members = set()
  for item in node.body:
    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      members.add(item.name)
    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
      members.add(item.target.id)
    elif isinstance(item, ast.Assign):
      members.update(target.id for target in item.targets if isinstance(target, ast.Name))
  return members


@functools.lru_cache(maxsize=None)
def _classes() -> dict[str, list[tuple[pathlib.Path, ast.ClassDef]]]:
  """Every class of the project's packages by name."""
  found = {}
  for package in PACKAGES:
    for path in (ROOT / package).rglob('*.py'):
      for node in _definitions(path).values():
        if isinstance(node, ast.ClassDef):
          found.setdefault(node.name, []).append((path, node))
  return found


def _class_has(name: str, member: str, depth: int = 0) -> bool | None:
  """Whether the project's one class ``name`` (or a base class of the project's) has ``member``;
  None where ``name`` is not one class of the project."""
  candidates = _classes().get(name, [])
  if len(candidates) != 1 or depth > 5:
    return None
  _, node = candidates[0]
  if member in _class_members(node):
    return True
  bases = [base.id if isinstance(base, ast.Name) else getattr(base, 'attr', '') for base in node.bases]
  return any(_class_has(base, member, depth + 1) for base in bases)


def code_name_exists(name: str) -> bool | None:
  """Whether a dotted name of the project's code exists: the longest module path, then a name it
  defines, then a member of that class. None where the name is not the project's code."""
  parts = name.split('.')
  if parts[0] not in PACKAGES:
    return _class_has(parts[0], parts[1]) if len(parts) == 2 else None
  module, index = None, 0
  for end in range(len(parts), 0, -1):
    path = ROOT.joinpath(*parts[:end])
    for candidate in (path.with_suffix('.py'), path / '__init__.py'):
      if candidate.exists():
        module, index = candidate, end
        break
    if module:
      break
  rest = parts[index:]
  if not rest:
    return True
  definition = _definitions(module).get(rest[0])
  if definition is None:
    return False
  if len(rest) == 1 or not isinstance(definition, ast.ClassDef):
    return len(rest) == 1 or isinstance(definition, (ast.Import, ast.ImportFrom))
  return _class_has(definition.name, rest[1]) is not False and len(rest) == 2


def quoted_code_names(page: pathlib.Path) -> list[str]:
  names = DOTTED.findall(_prose(page.read_text()))
  return [name for name in names if name not in OTHER_LIBRARIES and not DATA_FILE.search(name)]


def test_the_code_name_finder_reads_modules_classes_and_their_members():
  assert code_name_exists('trainer.predictor.load_predictor')
  assert code_name_exists('trainer.observe.model_flops')  # a module
  assert code_name_exists('Task.without_data')
  assert code_name_exists('trainer.task.Task.without_data')
  assert code_name_exists('trainer.parameter_regexes.py') is False
  assert code_name_exists('Task.data_sizes') is False
  assert code_name_exists('trainer.predictor.no_such_function') is False
  assert code_name_exists('Path.exists') is None  # not a class of this project


@pytest.mark.parametrize('page', USER_PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_code_name_quoted_in_the_docs_exists(page):
  missing = sorted({name for name in quoted_code_names(page) if code_name_exists(name) is False})
  assert not missing, f'{page.name} names code that does not exist: {", ".join(missing)}'


# A module run as a command, wherever a page shows it: prose, tables and code blocks alike.
RUN_MODULE = re.compile(r'python3? -m ((?:%s)(?:\.\w+)*)' % '|'.join(PACKAGES))


def test_the_module_finder_reads_commands():
  text = '`python -m vit.weights.export_npz --workdir W` and `python -m records.tables --write`'
  assert RUN_MODULE.findall(text) == ['vit.weights.export_npz', 'records.tables']


@pytest.mark.parametrize('page', USER_PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_module_a_command_runs_exists(page):
  missing = sorted({name for name in RUN_MODULE.findall(_markdown(page)) if not code_name_exists(name)})
  assert not missing, f'{page.name} runs modules that do not exist: {", ".join(missing)}'


# A prediction as predict.py prints it: `digit.png: 7 (91.5%), 9 (1.2%), 6 (1.1%)`.
PREDICTION = re.compile(r'([\w.-]+\.(?:png|jpg|jpeg)): ((?:[\w-]+ \(\d+\.\d%\)(?:, )?)+)')
# A duration as the records' tables write it (records.reproduce.duration).
DURATION = re.compile(r'\b\d+ h \d+ min\b|\b\d+ min \d+ s\b')


@functools.lru_cache(maxsize=None)
def _records() -> tuple[dict, ...]:
  return tuple(store.load_all())


def recorded_answers() -> set[str]:
  """The answers the records hold: a `predict.py --json` run's classes (numbers
  ``classes.NAME.probability``, in order), and the answers a record's note quotes."""
  answers = set()
  for record in _records():
    classes = [
      (key.split('.')[1], value)
      for key, value in record['numbers'].items()
      if key.startswith('classes.') and key.endswith('.probability')
    ]
    if classes:
      answers.add(', '.join(f'{name} ({100 * value:.1f}%)' for name, value in classes))
    answers.update(
      match.rstrip(', ')
      for match in re.findall(r'((?:[\w-]+ \(\d+\.\d%\)(?:, )?)+)', record.get('note') or '')
    )
  return answers


def recorded_durations() -> set[str]:
  return {
    duration(record[key]) for record in _records() for key in ('wall_seconds', 'cpu_seconds') if record[key]
  }


@pytest.mark.parametrize('page', USER_PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_prediction_quoted_in_the_docs_is_its_records(page):
  quoted = [match.group(2).rstrip(', ') for match in PREDICTION.finditer(page.read_text())]
  unknown = sorted(set(quoted) - recorded_answers())
  assert not unknown, f'{page.name} quotes predictions no record holds: {unknown}'


def test_a_duration_quoted_in_the_readme_is_a_records():
  quoted = set(DURATION.findall(_prose((ROOT / 'README.md').read_text())))
  assert quoted, 'the README quotes no duration: the test looks for the wrong pattern'
  unknown = sorted(quoted - recorded_durations())
  assert not unknown, f'README.md quotes durations no record has: {unknown}'
