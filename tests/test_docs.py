"""The README and the pages of docs/: every relative link and picture resolves, anchors included,
and the README stays a front page."""

import json
import pathlib
import re

import pytest

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


def test_the_docs_pages_are_all_reachable_from_the_readme():
  linked = {(ROOT / target.partition('#')[0]).resolve() for target in relative_links(ROOT / 'README.md')}
  pages = {*(ROOT / 'docs').glob('*.md'), ROOT / 'docs' / 'tutorial.ipynb', ROOT / 'CHANGELOG.md'}
  assert not {page.resolve() for page in pages} - linked


def test_the_readme_is_a_front_page():
  lines = (ROOT / 'README.md').read_text().splitlines()
  assert len(lines) < README_MAX_LINES, f'README.md has {len(lines)} lines; move detail into docs/'
