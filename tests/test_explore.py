"""The explorer (``python -m explore``) in a real browser: Playwright driving Debian's Chromium against a
server started on a free port, for a tiny ViT run, a tiny Transformer and a tiny RNN translator, a tiny
sweep, a tiny video run and a timm folder. What the page shows is checked against the predictor's own
answers and arrays, and each bad input gets its message while the server keeps serving.

Needs ``requirements-explore.txt`` and ``/usr/bin/chromium`` (``apt-get install chromium``); skipped
without them. ``EXPLORE_SCREENSHOTS=DIR`` keeps the screenshots taken (docs/images holds them).
"""

import json
import os
import pathlib
import re
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
from tests.translation_test_configs import tiny_rnn_config, tiny_translation_config  # noqa: E402
from tests.vit_test_configs import tiny_vit_config  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parents[1]
WAIT_MS = 60_000
ALPHA_STEP = 1 / 255  # the browser keeps a colour's opacity in 8 bits


def _free_port() -> int:
  with socket.socket() as sock:
    sock.bind(('127.0.0.1', 0))
    return sock.getsockname()[1]


class Server:
  """``python -m explore ARGS`` on a free port, until closed; with no JAX compilation cache unless ARGS
  name one."""

  def __init__(self, *args):
    if not any(arg.startswith('--compile_cache') for arg in args):
      args = (*args, '--compile_cache=')
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


def _pick_from_the_glance(page):
  """Opens the first column's test set at a glance and clicks a picture in it."""
  page.get_by_text('The test set at a glance').click()
  page.locator('#glance-button-0').click()
  glance = page.locator('#glance-0 img')
  glance.wait_for()
  box = glance.bounding_box()
  glance.click(position={'x': 0.45 * box['width'], 'y': 0.5 * box['height']})


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


def test_a_vit_run_answers_uploads_patches_and_checkpoints_as_its_predictor_beside_an_untrained_one(
  browser, vit_workdir, digit, tmp_path
):
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  untrained = tmp_path / 'untrained'  # a workdir whose run has not saved a checkpoint yet
  untrained.mkdir()
  for name in ('config.json', 'model.json', 'classes.json'):
    if (vit_workdir / name).exists():
      (untrained / name).write_bytes((vit_workdir / name).read_bytes())
  server = Server(f'--workdir={vit_workdir}', f'--workdir={untrained}')
  try:
    page = _open(browser, server)
    # Before any input, each column shows the step it answers for and its position similarity.
    sync_api.expect(page.locator('#step-0')).to_contain_text('step 6')
    page.locator('#similarity-0 img').wait_for()
    _message(page, 0, 'Upload an image')
    _upload(page, 'image-upload', digit)
    latest = load_predictor(vit_workdir)
    image = latest.prediction.prepare(latest.read(str(digit))[None])
    shown = _numbers(page, 0, lambda n: n['query'] is None and n['step'] == 6)
    assert shown['classes'] == latest([str(digit)], top_k=5)[0]['classes']
    assert page.locator('#classes-0').inner_text().split('\n')[1] == shown['classes'][0]['name']
    assert 'no intact checkpoint' in _message(page, 1, 'Error')
    for layer, expected in zip(shown['attention'], _vit_reader(latest.model, image)):
      np.testing.assert_allclose(layer, expected, atol=1e-5)

    picture = page.locator('#input-0 img')  # a 2 x 2 grid: the bottom right patch is 3
    box = picture.bounding_box()
    picture.click(position={'x': 0.8 * box['width'], 'y': 0.8 * box['height']})
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

    _pick_from_the_glance(page)
    picked = _numbers(page, 0, lambda n: n['input'].startswith('test example'))
    index = int(picked['input'].split()[-1])
    from ml_collections import ConfigDict  # pylint: disable=g-import-not-at-top

    from pipelines.image_sources import load_digits_source  # pylint: disable=g-import-not-at-top

    test = load_digits_source(ConfigDict({'image_size': None})).splits['test']
    assert picked['classes'] == first([test.images[index]], top_k=5)[0]['classes']
    _message(page, 0, f'label: {test.labels[index]}')

    page.get_by_text('Training and evaluation curves').click()
    page.locator('#curves-button').click()
    page.locator('#curves img').wait_for()
  finally:
    server.close()


@pytest.fixture(scope='module')
def scan_workdir(tmp_path_factory):
  from trainer.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top

  workdir = tmp_path_factory.mktemp('explore') / 'scan'
  train_and_evaluate(tiny_translation_config(eval_every_steps=4), workdir)
  return workdir


def _cross_attention(predictor, text: str, output_ids: list[int]) -> list[np.ndarray]:
  """Per layer ``[heads, target, source]``: the decoder's cross-attention while it writes ``output_ids``."""
  from seq2seq.tokenizer import BOS_ID  # pylint: disable=g-import-not-at-top

  source = np.asarray([predictor.read(text).ids], np.int32)
  decoder_input = np.asarray([[BOS_ID, *output_ids[:-1]]], np.int32)
  _, intermediates = predictor.model(source, decoder_input, return_weights=True)
  return [np.asarray(layer[0]) for layer in intermediates['cross_attention_weights']]


def _natural_width(page, selector: str) -> int:
  page.locator(selector).wait_for()
  return page.eval_on_selector(selector, 'image => image.naturalWidth')


def _alphas(page, selector: str) -> list[float]:
  """The opacity of each matching element's background colour."""
  colours = page.eval_on_selector_all(
    selector, 'nodes => nodes.map(n => getComputedStyle(n).backgroundColor)'
  )
  alphas = []
  for colour in colours:
    parts = [float(x) for x in re.findall(r'[\d.]+', colour)]
    alphas.append(parts[3] if len(parts) == 4 else 1.0)
  return alphas


def _translate(page, sentence: str):
  page.locator('#sentence textarea').fill(sentence)
  page.locator('#translate').click()


def _searches_as_the_predictors(page, predictor, sentence: str):
  """Types ``sentence`` and checks the greedy and beam hypotheses shown against ``predictor``'s; returns
  the numbers shown, the beam's size and the model's cross-attention (per layer ``[heads, target,
  source]``) while it writes the beam's output."""
  _translate(page, sentence)
  shown = _numbers(page, 0, lambda n: n.get('hypotheses'))
  greedy, beam = shown['hypotheses']
  beam_size = int(beam['search'].split()[-1])
  assert greedy['translation'] == predictor([sentence], beam_size=1)[0]['translation']
  assert beam['translation'] == predictor([sentence], beam_size=beam_size)[0]['translation']
  [prediction] = predictor.predict([predictor.read(sentence)], beam_size=beam_size)
  return shown, beam_size, _cross_attention(predictor, sentence, prediction['_output_ids'])


def _lit_by_each_target_word(page, count: int) -> list[list[float]]:
  """The opacity of each source word while the pointer is on target word 0, 1, ... ``count - 1``."""
  lit = []
  for i in range(count):
    page.locator(f'#alignment-0 .tgt[data-i="{i}"]').hover()
    lit.append(_alphas(page, '#alignment-0 .src'))
  return lit


def test_a_translator_shows_its_hypotheses_and_alignment_and_refuses_bad_sentences(
  browser, scan_workdir, tmp_path
):
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  compile_cache = tmp_path / 'compiled'
  server = Server(f'--workdir={scan_workdir}', f'--compile_cache={compile_cache}')
  try:
    page = _open(browser, server)
    sync_api.expect(page.locator('#step-0')).to_contain_text('step 4')
    predictor = load_predictor(scan_workdir)
    shown, beam_size, expected = _searches_as_the_predictors(page, predictor, 'jump twice')
    assert any(compile_cache.iterdir())  # the searches compiled, kept for the next start
    beam = shown['hypotheses'][1]
    sync_api.expect(page.locator('#hypotheses-0')).to_contain_text(f'beam of {beam_size}')
    for layer, direct in zip(beam['cross_attention'], expected):
      np.testing.assert_allclose(layer, direct, atol=1e-5)
    last = expected[-1].mean(axis=0)  # what the hover lights: the last layer, heads averaged
    for i, lit in enumerate(_lit_by_each_target_word(page, len(beam['target']))):
      assert int(np.argmax(lit)) == int(np.argmax(last[i])), (i, lit, last[i])
      np.testing.assert_allclose(lit, last[i] / last[i].max(), atol=ALPHA_STEP)
    _screenshot(page, 'explore_translator.png')

    # One panel per layer, heads averaged; on asking, one per layer and head (two heads: two panels).
    averaged = _natural_width(page, '#cross-0 img')
    page.locator('#attention-heads').get_by_text('each head').click()
    page.wait_for_function(
      f"() => document.querySelector('#cross-0 img')?.naturalWidth > {1.2 * averaged}", timeout=WAIT_MS
    )

    _set_checkpoint(page, 0, 0)
    older = _numbers(page, 0, lambda n: n['step'] == 2)
    assert (
      older['hypotheses'][0]['translation']
      == load_predictor(scan_workdir, 2)(['jump twice'], beam_size=1)[0]['translation']
    )

    for sentence, message in [
      ('   ', 'empty'),
      ('jump ' * 40, 'at most 8'),
      ('blorf zonk', 'none of its words'),
    ]:
      _translate(page, sentence)
      _message(page, 0, message)
    _translate(page, 'jump blorf')
    _message(page, 0, 'outside the vocabulary.*blorf')
    _numbers(page, 0, lambda n: n['step'] == 2 and n['hypotheses'][0]['translation'] is not None)
  finally:
    server.close()


@pytest.fixture(scope='module')
def rnn_workdir(tmp_path_factory):
  from trainer.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top

  workdir = tmp_path_factory.mktemp('explore') / 'rnn'
  train_and_evaluate(tiny_rnn_config(eval_every_steps=4), workdir)
  return workdir


def test_an_rnn_translator_shows_its_hypotheses_and_its_single_alignment(browser, rnn_workdir):
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  server = Server(f'--workdir={rnn_workdir}')
  try:
    page = _open(browser, server)
    sync_api.expect(page.locator('#step-0')).to_contain_text('step 4')
    predictor = load_predictor(rnn_workdir)
    shown, _, [expected] = _searches_as_the_predictors(page, predictor, 'walk left twice')
    beam = shown['hypotheses'][1]
    [layer] = beam['cross_attention']  # the RNN's one attention: one layer of one head
    assert np.asarray(layer).shape == expected.shape and expected.shape[0] == 1
    np.testing.assert_allclose(layer, expected, atol=1e-5)
    for i, lit in enumerate(_lit_by_each_target_word(page, len(beam['target']))):
      np.testing.assert_allclose(lit, expected[0, i] / expected[0, i].max(), atol=ALPHA_STEP)
    sync_api.expect(page.locator('#cross-0 img')).to_be_visible()
    _translate(page, 'walk blorf')
    _message(page, 0, 'outside the vocabulary.*blorf')
  finally:
    server.close()


@pytest.fixture(scope='module')
def sweep_dir(tmp_path_factory):
  from ablation import sweep, tables  # pylint: disable=g-import-not-at-top

  workdir = tmp_path_factory.mktemp('explore') / 'sweep'
  plan = sweep.plan_sweep(tiny_config(), ['model.posemb=none,learn2d'], 1, workdir)
  tables.write_results(workdir, sweep.run_sweep(plan, log=lambda line: None))
  return workdir


def test_a_sweep_shows_its_table_and_its_arms_side_by_side(browser, sweep_dir, digit):
  from ablation import tables  # pylint: disable=g-import-not-at-top
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  server = Server(f'--sweep={sweep_dir}')
  try:
    page = _open(browser, server)
    table = page.locator('#sweep-table').inner_text()
    summary = tables.read_results(sweep_dir)
    for line in tables.markdown(summary).splitlines():
      if line.startswith('|') and '---' not in line:
        for cell in line.strip('|').split('|'):
          assert cell.strip().replace('**', '') in table, cell
    _upload(page, 'image-upload', digit)
    for column, arm in enumerate(('posemb=none,seed=0', 'posemb=learn2d,seed=0')):
      shown = _numbers(page, column, lambda n: n['classes'])
      predictor = load_predictor(sweep_dir / arm)
      assert shown['classes'] == predictor([str(digit)], top_k=5)[0]['classes']
      image = predictor.prediction.prepare(predictor.read(str(digit))[None])
      for layer, expected in zip(shown['attention'], _vit_reader(predictor.model, image)):
        np.testing.assert_allclose(layer, expected, atol=1e-5)
    sync_api.expect(page.locator('#similarity-1 img')).to_have_count(1)
    assert page.locator('#similarity-0 img').count() == 0  # no learned table, no similarity
    _screenshot(page, 'explore_sweep.png')
  finally:
    server.close()


def test_a_path_that_is_no_workdir_is_one_line_before_anything_starts(tmp_path):
  missing = subprocess.run(
    [sys.executable, '-m', 'explore', f'--workdir={tmp_path / "nowhere"}'],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=False,
  )
  assert missing.returncode == 2
  assert (
    missing.stderr.strip().splitlines()[-1] == f'error: --workdir {tmp_path / "nowhere"}: no such folder.'
  )


@pytest.fixture(scope='module')
def video_workdir(tmp_path_factory):
  from trainer.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top

  workdir = tmp_path_factory.mktemp('explore') / 'video'
  train_and_evaluate(tiny_video_config(total_steps=2, eval_every_steps=2, checkpoint_every_steps=2), workdir)
  return workdir


def test_a_video_run_answers_a_clip_and_refuses_one_of_the_wrong_shape(browser, video_workdir, tmp_path):
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  predictor = load_predictor(video_workdir)
  clip = np.random.default_rng(0).integers(0, 256, predictor.prediction.input_shape, dtype=np.uint8)
  np.save(tmp_path / 'clip.npy', clip)
  np.save(tmp_path / 'short.npy', clip[:1])
  server = Server(f'--workdir={video_workdir}')
  try:
    page = _open(browser, server)
    _upload(page, 'clip-upload', tmp_path / 'short.npy')
    _message(page, 0, 'Error')
    _upload(page, 'clip-upload', tmp_path / 'clip.npy')
    top = predictor([clip])[0]['classes'][0]['name']
    sync_api.expect(page.locator('#classes-0')).to_contain_text(top)
    assert page.locator('#classes-0').inner_text().split('\n')[1] == top

    _pick_from_the_glance(page)
    _message(page, 0, r'label: \d+')  # a test clip, opened above
  finally:
    server.close()


def test_a_timm_folder_is_explored_as_its_predictor(browser, digit, tmp_path):
  from tests.test_vit_weights import CLASSES, timm_arrays, write_timm_folder  # pylint: disable=g-import-not-at-top
  from vit.weights.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  labels = [f'class {i}' for i in range(CLASSES)]
  folder = write_timm_folder(
    tmp_path / 'w', timm_arrays(np.random.default_rng(3)), 'vit_base_patch16_224', labels=labels
  )
  server = Server(f'--weights={folder}')
  try:
    page = _open(browser, server)
    _upload(page, 'image-upload', digit)
    shown = _numbers(page, 0, lambda n: n['classes'])
    assert shown['classes'] == load_predictor(folder)([str(digit)], top_k=5)[0]['classes']
  finally:
    server.close()
