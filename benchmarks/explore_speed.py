"""How fast the explorer page answers, in a real browser: ``python -m benchmarks.explore_speed``.

  python -m benchmarks.explore_speed --workdir runs/vit_digits --translator runs/transformer_scan \\
      --image zero.png --image one.png --sentence 'jump twice' --sentence 'walk left'

For the image workdir: the seconds from starting ``python -m explore`` to the page ready in Chromium
(``ready_s``: shown, with the step of the checkpoint it answers for, so restored; ``ready_cpu_s``: the
CPU seconds the server process used until then, which grow much less than the wall-clock seconds when
other jobs share the CPU), and the seconds from an action to its answer on the page: a new image
(``image_s``), a click on a patch (``patch_s``), a move of the checkpoint slider (``checkpoint_s``). For
the translator: its ``ready_s``, a new sentence (``sentence_s``) and a checkpoint move. Each action is
repeated ``--repeats`` times (alternating inputs, patches and checkpoints): the first time (which may
compile) and the median of the others are printed. The last line is the JSON of all of them.

Caches: the explorer is started three times for each workdir, with caches of its own: a bytecode
cache (``PYTHONPYCACHEPREFIX``, whatever ``PYTHONDONTWRITEBYTECODE`` says) and a JAX compilation cache
(``--compile_cache``). The cold start (``ready_cold_start_s``) has both empty: it compiles every module
it imports from source, as where nothing compiled the installed packages (``pip install --no-compile``,
or ``PYTHONDONTWRITEBYTECODE`` set). The first start (``ready_first_start_s``) is a user's first after
``pip install``: the installed packages compiled to bytecode beforehand (``compileall`` over the
site-packages folders, as pip does at install), the project's own modules not, the JAX cache empty; it
answers one input and stops. The later start, timed in full, reads what the first wrote.

Needs ``requirements-explore.txt`` and ``/usr/bin/chromium``.
"""

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import shutil
import site
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

_WORKDIR = flags.DEFINE_string('workdir', None, 'An image classifier workdir (two or more checkpoints).')
_TRANSLATOR = flags.DEFINE_string('translator', None, 'A translator workdir (two or more checkpoints).')
_IMAGES = flags.DEFINE_multi_string(
  'image', [], 'Images to upload, in turn (two or more, with different names).'
)
_SENTENCES = flags.DEFINE_multi_string('sentence', ['jump twice', 'walk left'], 'Sentences to type, in turn.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Times each action is timed.', lower_bound=2)


def _start(workdir: str, caches: str):
  with socket.socket() as sock:
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
  environment = {**os.environ, 'PYTHONPYCACHEPREFIX': os.path.join(caches, 'python')}
  environment.pop('PYTHONDONTWRITEBYTECODE', None)
  compile_cache = os.path.join(caches, 'jax')
  start = time.perf_counter()
  process = subprocess.Popen(
    [
      sys.executable,
      '-m',
      'explore',
      f'--workdir={workdir}',
      f'--port={port}',
      f'--compile_cache={compile_cache}',
    ],
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
    env=environment,
  )
  for line in process.stdout:
    found = re.search(r'Explorer ready at (\S+)', line)
    if found:
      return process, found.group(1), start
  raise SystemExit(f'the explorer did not start for {workdir}')


def _cpu_seconds(pid: int) -> float:
  """User and system CPU seconds process ``pid`` (all its threads) has used so far (Linux ``/proc``)."""
  fields = pathlib.Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def _until(read, predicate, what: str, timeout: float = 120.0):
  deadline = time.monotonic() + timeout
  text = ''
  while time.monotonic() < deadline:
    text = read()
    if text:
      value = json.loads(text)
      if predicate(value):
        return value
    time.sleep(0.02)
  raise SystemExit(f'the page did not answer {what} in {timeout:.0f} s; it shows {text[:200]}')


def _timed(page, act, predicate, what: str) -> float:
  box = page.locator('#numbers-0 textarea')
  start = time.perf_counter()
  act()
  _until(box.input_value, predicate, what)
  return time.perf_counter() - start


def _open(browser, process, url, start, ready_selector):
  """The page, once ready (``ready_selector`` shown, and the step the first column answers for): and
  the seconds since the command started, and the CPU seconds the server used."""
  page = browser.new_page(viewport={'width': 1300, 'height': 1000})
  page.set_default_timeout(120_000)
  page.goto(url)
  page.locator(ready_selector).wait_for()
  page.locator('#step-0').get_by_text(re.compile(r'step \d+')).wait_for()
  ready, cpu = time.perf_counter() - start, _cpu_seconds(process.pid)
  page.get_by_text('numbers behind the pictures').first.click()
  return page, {'ready_s': round(ready, 3), 'ready_cpu_s': round(cpu, 3)}


def _first_start(browser, workdir: str, caches: str, ready_selector: str, act) -> float:
  """The seconds from the explorer's first start (empty ``caches``) to its page ready; then ``act(page)``
  answers one input before the explorer stops."""
  process, url, start = _start(workdir, caches)
  try:
    page, numbers = _open(browser, process, url, start, ready_selector)
    act(page)
    page.close()
    return numbers['ready_s']
  finally:
    process.terminate()
    process.wait()


def _checkpoint(page, position: int):
  box = page.locator('#checkpoint-0 input[type=number]')
  box.fill(str(position))
  box.press('Enter')


def _summary(name: str, times: list[float]) -> dict:
  return {f'{name}_first_s': round(times[0], 3), f'{name}_s': round(statistics.median(times[1:]), 3)}


def _upload(page, image: str) -> float:
  name = image.rsplit('/', 1)[-1]
  return _timed(
    page,
    lambda: page.locator('#image-upload input[type=file]').set_input_files(image),
    lambda n: n.get('input') == name and n.get('query') is None,
    f'an upload of {name}',
  )


def _compile_installed_packages(caches: str):
  """Bytecode for every installed package in ``caches``'s bytecode cache, as ``pip install`` writes it."""
  environment = {**os.environ, 'PYTHONPYCACHEPREFIX': os.path.join(caches, 'python')}
  for folder in site.getsitepackages():
    subprocess.run(
      [sys.executable, '-m', 'compileall', '-q', '-j', '0', folder],
      env=environment,
      stdout=subprocess.DEVNULL,
      check=False,  # as pip, it goes on past a file that does not compile (some packages ship such files)
    )


@dataclasses.dataclass(frozen=True)
class _Bench:
  browser: object
  caches: str  #: a folder of its own for each workdir's caches
  installed: str  #: the installed packages' bytecode, as pip compiles it
  repeats: int


@contextlib.contextmanager
def _later_start(bench: _Bench, workdir: str, caches: str, ready_selector: str, first_act):
  """``(page, numbers)`` of the explorer's later start on ``workdir``: before it, a cold start with empty
  caches and a first start with the installed packages' bytecode copied into ``caches``, each timed
  with ``first_act`` answering one input; the server stops on leaving."""
  cold = _first_start(bench.browser, workdir, os.path.join(caches, 'cold'), ready_selector, first_act)
  caches = os.path.join(caches, 'installed')
  shutil.copytree(bench.installed, os.path.join(caches, 'python'))
  first = _first_start(bench.browser, workdir, caches, ready_selector, first_act)
  process, url, start = _start(workdir, caches)
  try:
    page, numbers = _open(bench.browser, process, url, start, ready_selector)
    numbers['ready_first_start_s'] = first
    numbers['ready_cold_start_s'] = cold
    yield page, numbers
  finally:
    process.terminate()
    process.wait()


@contextlib.contextmanager
def _answering(bench: _Bench, workdir: str, ready_selector: str, act, inputs: list[str], name: str):
  """``(page, numbers)`` of the later start on ``workdir`` once ``act(page, input)`` has been timed over
  ``inputs`` in turn (``name``: the numbers' prefix)."""
  first_act = lambda page: act(page, inputs[-1])  # noqa: E731  (the first starts' one input)
  caches = os.path.join(bench.caches, name)
  with _later_start(bench, workdir, caches, ready_selector, first_act) as (page, numbers):
    times = [act(page, inputs[index % len(inputs)]) for index in range(bench.repeats)]
    numbers.update(_summary(name, times))
    yield page, numbers


def measure_images(bench: _Bench, workdir: str, images: list[str]) -> dict:
  with _answering(bench, workdir, '#image-upload', _upload, images, 'image') as (page, numbers):
    picture = page.locator('#input-0 img')
    times = []
    for index in range(bench.repeats):
      box = picture.bounding_box()
      x, y = (0.2, 0.2) if index % 2 == 0 else (0.8, 0.8)
      where = {'x': x * box['width'], 'y': y * box['height']}
      previous = json.loads(page.locator('#numbers-0 textarea').input_value())['query']
      times.append(
        _timed(
          page,
          lambda where=where: picture.click(position=where),
          lambda n, previous=previous: n['query'] != previous,
          'a click on a patch',
        )
      )
    numbers.update(_summary('patch', times))
    numbers.update(_summary('checkpoint', _checkpoint_times(page, bench.repeats)))
    return numbers


def _checkpoint_times(page, repeats: int) -> list[float]:
  times = []
  for index in range(repeats):
    before = json.loads(page.locator('#numbers-0 textarea').input_value())['step']
    times.append(
      _timed(
        page,
        lambda index=index: _checkpoint(page, index % 2),
        lambda n, before=before: n['step'] != before,
        f'a move to checkpoint {index % 2}',
      )
    )
  return times


def _translate(page, sentence: str) -> float:
  box = page.locator('#sentence textarea')

  def act():
    box.fill(sentence)
    page.locator('#translate').click()

  previous = page.locator('#numbers-0 textarea').input_value()
  return _timed(
    page,
    act,
    lambda n: json.dumps(n) != previous and 'hypotheses' in n,
    f'the sentence {sentence!r}',
  )


def measure_translator(bench: _Bench, workdir: str, sentences: list[str]) -> dict:
  with _answering(bench, workdir, '#sentence', _translate, sentences, 'sentence') as (page, numbers):
    numbers.update(_summary('checkpoint', _checkpoint_times(page, bench.repeats)))
    return numbers


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  if _WORKDIR.value and len(set(_IMAGES.value)) < 2:
    raise app.UsageError(
      'give two images or more (--image, repeated): each upload must differ from the last.'
    )
  if _TRANSLATOR.value and len(set(_SENTENCES.value)) < 2:
    raise app.UsageError('give two sentences or more (--sentence, repeated): each must differ from the last.')
  from playwright.sync_api import sync_playwright  # pylint: disable=g-import-not-at-top

  results = {}
  with tempfile.TemporaryDirectory() as caches, sync_playwright() as playwright:
    _compile_installed_packages(os.path.join(caches, 'installed'))
    browser = playwright.chromium.launch(executable_path='/usr/bin/chromium', args=['--no-sandbox'])
    bench = _Bench(browser, caches, os.path.join(caches, 'installed', 'python'), _REPEATS.value)
    if _WORKDIR.value:
      for key, value in measure_images(bench, _WORKDIR.value, _IMAGES.value).items():
        results[f'image_run_{key}'] = value
        print(f'image run: {key} {value}', flush=True)
    if _TRANSLATOR.value:
      for key, value in measure_translator(bench, _TRANSLATOR.value, _SENTENCES.value).items():
        results[f'translator_{key}'] = value
        print(f'translator: {key} {value}', flush=True)
    browser.close()
  print(json.dumps(results))


if __name__ == '__main__':
  app.run(main)
