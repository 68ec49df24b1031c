"""See attention in the browser: ``python -m explore --workdir runs/vit_digits``.

  python -m explore --workdir runs/vit_digits                                # one run
  python -m explore --workdir runs/posemb=learn1d --workdir runs/posemb=none  # side by side
  python -m explore --weights vit_base_patch16_224.augreg2_in21k_ft_in1k/     # a timm or HF folder
  python -m explore --sweep runs/ablation                                    # an ablate.py sweep

Prints the page's local address and serves it until interrupted (``--host``, ``--port``; 127.0.0.1 by
default). The page (``explore.page``) reads only the paths given here and the files uploaded to it.
Compiled functions are kept across starts in ``--compile_cache``. Needs the packages of
``requirements-explore.txt``.
"""

import os
import pathlib
import sys
import threading

from absl import app, flags

from trainer.command_line import cli
from trainer.errors import WorkdirError

_WORKDIRS = flags.DEFINE_multi_string(
  'workdir', [], 'A workdir written by train.py; repeat for side by side.'
)
_WEIGHTS = flags.DEFINE_multi_string(
  'weights', [], 'A timm or Hugging Face ViT folder (as predict.py --weights).'
)
_ARCH = flags.DEFINE_string('arch', '', 'The timm architecture of a bare .safetensors given to --weights.')
_SWEEP = flags.DEFINE_string(
  'sweep', None, 'A sweep written by ablate.py: its table and its arms side by side.'
)
_HOST = flags.DEFINE_string('host', '127.0.0.1', 'The address to serve on.')
_PORT = flags.DEFINE_integer('port', 7860, 'The port to serve on.', lower_bound=1, upper_bound=65535)
_COMPILE_CACHE = flags.DEFINE_string(
  'compile_cache',
  None,
  "A folder for JAX's compiled functions, kept across starts (default: JAX_COMPILATION_CACHE_DIR, else "
  '~/.cache/attention-lab/jax); empty: none.',
)

_KINDS = {'vit': 'image', 'seq2seq': 'sentence', 'video': 'clip'}


def _sources():
  """The runs named on the command line (``explore.runs.Run``) and the sweep, checked."""
  from explore import runs as runs_lib  # pylint: disable=g-import-not-at-top

  given = sum(bool(x) for x in (_WORKDIRS.value, _WEIGHTS.value, _SWEEP.value))
  if given != 1:
    raise app.UsageError('Give --workdir (one or more), --weights or --sweep, one kind of source.')
  if _SWEEP.value:
    sweep = runs_lib.load_sweep(pathlib.Path(_SWEEP.value))
    return sweep.arms, sweep
  if _WEIGHTS.value:
    for path in _WEIGHTS.value:
      if not os.path.exists(path):
        raise WorkdirError(f'--weights {path}: no such file or folder.')
    return [runs_lib.Run(pathlib.Path(path), weights=True, arch=_ARCH.value) for path in _WEIGHTS.value], None
  paths = [pathlib.Path(path) for path in _WORKDIRS.value]
  for path in paths:
    runs_lib.check_workdir(path)
  names = [path.name for path in paths]
  return [runs_lib.Run(path, name=str(path) if names.count(path.name) > 1 else None) for path in paths], None


def _kind(runs) -> str:
  """What the runs read (one kind for all of them), from their saved configs: nothing is restored
  before the page is up."""
  from trainer.io import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

  kinds = set()
  for run in runs:
    task = 'vit' if run.weights else workdir_lib.load_config(run.path).task.split('.')[0]
    if task not in _KINDS:
      raise WorkdirError(
        f'{run.path}: the explorer shows image, translation and video runs, not {task!r} ones.'
      )
    kinds.add(_KINDS[task])
  if len(kinds) > 1:
    raise WorkdirError(
      f'the runs read different inputs ({", ".join(sorted(kinds))}); show one kind at a time.'
    )
  return kinds.pop()


def _warm(runs, kind: str, beam_size: int) -> None:
  """Behind the page: compiles what answers an input for each run's latest checkpoint (for sentences, of
  the shortest width: a longer one compiles when first typed), then restores every other kept checkpoint."""
  import numpy as np  # pylint: disable=g-import-not-at-top

  from explore import views  # pylint: disable=g-import-not-at-top

  for run in runs:
    steps = run.steps()
    if not steps:
      continue
    predictor = run.predictor(steps[-1])
    if kind == 'sentence':
      views.compile_sentence(predictor, views.sentence_widths(predictor)[0], beam_size)
    else:
      example = views.Example(np.zeros((1, *predictor.prediction.input_shape), np.float32))
      views.forward(predictor.model, example.model_input)
  for run in runs:
    for step in reversed(run.steps()):
      run.predictor(step)


def _use_compile_cache(path: str | None) -> None:
  """Compiled functions are kept in ``path`` and read back by later starts (JAX's persistent cache)."""
  import jax  # pylint: disable=g-import-not-at-top

  if path is None:
    cache_home = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
    path = jax.config.jax_compilation_cache_dir or os.path.join(cache_home, 'attention-lab', 'jax')
  if path:
    jax.config.update('jax_compilation_cache_dir', path)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.1)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  cli.quiet_library_logs()
  os.environ.setdefault('GRADIO_ANALYTICS_ENABLED', 'False')
  runs, sweep = cli.run_reporting_user_errors(_sources)
  kind = cli.run_reporting_user_errors(_kind, runs)
  try:
    from explore import page as page_lib  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    cli.fail(f'the explorer needs its packages: pip install -r requirements-explore.txt ({error})')
  beam_size = 4
  if kind == 'sentence':
    from trainer.io import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

    beam_size = max(int(workdir_lib.load_config(runs[0].path).decode.beam_size), 2)
  _use_compile_cache(_COMPILE_CACHE.value)
  page = page_lib.build(runs, kind, sweep=sweep, beam_size=beam_size)
  _, url, _ = page.launch(
    server_name=_HOST.value,
    server_port=_PORT.value,
    prevent_thread_lock=True,
    quiet=True,
    ssr_mode=False,
    css=page_lib.CSS,
    footer_links=[],
  )
  print(f'Explorer ready at {url}', flush=True)
  threading.Thread(target=_warm, args=(runs, kind, beam_size), daemon=True).start()
  try:
    page.block_thread()
  except KeyboardInterrupt:
    pass
  page.close()
  sys.exit(0)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
