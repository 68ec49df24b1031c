"""The explorer (``python -m explore``) in a real browser: Playwright driving Debian's Chromium against a
server started on a free port, for a tiny ViT run, a tiny translator, a tiny sweep, a tiny video run and
a timm folder. What the page shows is checked against the predictor's own answers and arrays, and each
bad input gets its message while the server keeps serving.

Needs ``requirements-explore.txt`` and ``/usr/bin/chromium`` (``apt-get install chromium``); skipped
without them. ``EXPLORE_SCREENSHOTS=DIR`` keeps the screenshots taken (docs/images holds them).
"""

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

pytest.importorskip('gradio', reason='the explorer needs gradio: pip install -r requirements-explore.txt')
sync_api = pytest.importorskip(
  'playwright.sync_api', reason='the browser tests need playwright: pip install -r requirements-explore.txt'
)
CHROMIUM = '/usr/bin/chromium'
if not os.path.exists(CHROMIUM):
  pytest.skip("the browser tests need Debian's chromium: apt-get install chromium", allow_module_level=True)

from tests.test_ablation import tiny_config  # noqa: E402
from tests.test_video_training import tiny_video_config  # noqa: E402
from tests.translation_test_configs import tiny_translation_config  # noqa: E402
from tests.vit_test_configs import tiny_vit_config  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[1]
WAIT_MS = 60_000


def _free_port() -> int:
  with socket.socket() as sock:
    sock.bind(('127.0.0.1', 0))
    return sock.getsockname()[1]


class Server:
  """``python -m explore ARGS`` on a free port, until closed."""

  def __init__(self, *args):
    self.process = subprocess.Popen(
      [sys.executable, '-m', 'explore', *args, f'--port={_free_port()}'],
      cwd=ROOT,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    self.lines = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
      line = self.process.stdout.readline()
      if not line and self.process.poll() is not None:
        break
      self.lines.append(line)
      found = re.search(r'Explorer ready at (\S+)', line)
      if found:
        self.url = found.group(1)
        return
    self.close()
    raise AssertionError('the explorer did not start:\n' + ''.join(self.lines))

  def close(self):
    if self.process.poll() is None:
      self.process.terminate()
      try:
        self.process.wait(20)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()


@pytest.fixture(scope='module')
def browser():
  with sync_api.sync_playwright() as playwright:
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=['--no-sandbox'])
    yield chromium
    chromium.close()


def _open(browser, server):
  page = browser.new_page(viewport={'width': 1300, 'height': 1000})
  page.set_default_timeout(WAIT_MS)
  page.goto(server.url)
  return page


def _screenshot(page, name):
  folder = os.environ.get('EXPLORE_SCREENSHOTS')
  if folder:
    page.screenshot(path=str(pathlib.Path(folder) / name), full_page=True)


def _numbers(page, column: int, predicate):
  """The JSON of a column's 'numbers behind the pictures' once ``predicate`` holds for it."""
  box = page.locator(f'#numbers-{column} textarea')
  if not box.is_visible():
    page.get_by_text('numbers behind the pictures').nth(column).click()
  deadline = time.monotonic() + WAIT_MS / 1000
  while time.monotonic() < deadline:
    text = box.input_value()
    if text:
      value = json.loads(text)
      if predicate(value):
        return value
    time.sleep(0.2)
  raise AssertionError(f'column {column}: numbers never satisfied the check; last: {text[:300]}')


def _message(page, column: int, pattern: str) -> str:
  locator = page.locator(f'#message-{column}')
  sync_api.expect(locator).to_contain_text(re.compile(pattern), timeout=WAIT_MS)
  return locator.inner_text()


def _upload(page, element: str, path):
  page.locator(f'#{element} input[type=file]').set_input_files(str(path))


def _set_checkpoint(page, column: int, position: int):
  box = page.locator(f'#checkpoint-{column} input[type=number]')
  box.fill(str(position))
  box.press('Enter')


# Sources -----------------------------------------------------------------------------------------


@pytest.fixture(scope='module')
def vit_workdir(tmp_path_factory):
  from trainer.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top

  workdir = tmp_path_factory.mktemp('explore') / 'vit'
  train_and_evaluate(
    tiny_vit_config(total_steps=6, eval_every_steps=3, checkpoint_every_steps=3, log_every_steps=3), workdir
  )
  return workdir


@pytest.fixture(scope='module')
def digit(tmp_path_factory):
  from ml_collections import ConfigDict  # pylint: disable=g-import-not-at-top

  from pipelines.image_sources import load_digits_source  # pylint: disable=g-import-not-at-top

  test = load_digits_source(ConfigDict({'image_size': None})).splits['test']
  path = tmp_path_factory.mktemp('inputs') / 'digit.png'
  Image.fromarray(test.images[5][..., 0]).save(path)
  return path


def _vit_reader(model, image: np.ndarray, query=None) -> list[np.ndarray]:
  """Per layer ``[heads, patches]``: the class token's attention (or patch ``query``'s) to each patch."""
  _, intermediates = model(image, return_weights=True)
  prefix = 1  # the tiny config's class token
  row = 0 if query is None else prefix + query
  return [np.asarray(layer[0])[:, row, prefix:] for layer in intermediates['attention_weights']]


# The tests ---------------------------------------------------------------------------------------


def test_a_vit_run_answers_uploads_patches_and_checkpoints_as_its_predictor(
  browser, vit_workdir, digit, tmp_path
):
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  server = Server(f'--workdir={vit_workdir}')
  try:
    page = _open(browser, server)
    _upload(page, 'image-upload', digit)
    latest = load_predictor(vit_workdir)
    image = latest.prediction.prepare(latest.read(str(digit))[None])
    shown = _numbers(page, 0, lambda n: n['query'] is None and n['step'] == 6)
    assert shown['classes'] == latest([str(digit)], top_k=5)[0]['classes']
    assert page.locator('#classes-0').inner_text().split('\n')[1] == shown['classes'][0]['name']
    for layer, expected in zip(shown['attention'], _vit_reader(latest.model, image)):
      np.testing.assert_allclose(layer, expected, atol=1e-5)

    box = page.locator('#input-0 img').bounding_box()  # a 2 x 2 grid: the bottom right patch is 3
    page.mouse.click(box['x'] + 0.8 * box['width'], box['y'] + 0.8 * box['height'])
    clicked = _numbers(page, 0, lambda n: n['query'] == 3)
    for layer, expected in zip(clicked['attention'], _vit_reader(latest.model, image, query=3)):
      np.testing.assert_allclose(layer, expected, atol=1e-5)
    _screenshot(page, 'explore_vit.png')

    _set_checkpoint(page, 0, 0)
    first = load_predictor(vit_workdir, 3)
    older = _numbers(page, 0, lambda n: n['step'] == 3)
    assert older['classes'] == first([str(digit)], top_k=5)[0]['classes']
    for layer, expected in zip(older['attention'], _vit_reader(first.model, image, query=3)):
      np.testing.assert_allclose(layer, expected, atol=1e-5)
    sync_api.expect(page.locator('#step-0')).to_contain_text('step 3')

    not_image = tmp_path / 'notes.png'
    not_image.write_text('not an image')
    _upload(page, 'image-upload', not_image)
    assert 'cannot read image' in _message(page, 0, 'Error')
    _upload(page, 'image-upload', digit)  # the server still answers
    _numbers(page, 0, lambda n: n['step'] == 3 and n['query'] is None)

    page.get_by_text('The test set at a glance').click()
    page.locator('#glance-button-0').click()
    glance = page.locator('#glance-0 img')
    glance.wait_for()
    box = glance.bounding_box()
    page.mouse.click(box['x'] + 0.45 * box['width'], box['y'] + 0.5 * box['height'])
    picked = _numbers(page, 0, lambda n: n['input'].startswith('test example'))
    index = int(picked['input'].split()[-1])
    from pipelines.image_sources import load_digits_source  # pylint: disable=g-import-not-at-top
    from ml_collections import ConfigDict  # pylint: disable=g-import-not-at-top

    test = load_digits_source(ConfigDict({'image_size': None})).splits['test']
    assert picked['classes'] == first([test.images[index]], top_k=5)[0]['classes']
    _message(page, 0, f'label: {test.labels[index]}')
  finally:
    server.close()
