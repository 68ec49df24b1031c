"""Predict with a trained model on your own inputs: ``python predict.py --workdir runs/vit_digits digit.png``.

Inputs are what the workdir's task reads (``Prediction.read_input``): image files or folders of them for an
image classifier, sentences for a translator, ``.npy`` clips, video files (``.mp4``...) or folders of frames
for a video classifier.
They come from the arguments, from ``--input FILE`` (one per line; ``-`` is standard input), or, with
neither, from standard input one per line, each answered as it comes.

  python predict.py --workdir runs/vit_digits digit.png photos/ --explain out/
  echo "jump twice" | python predict.py --workdir runs/transformer_scan --beam_size 1
  python predict.py --workdir runs/video_digits clip.npy clip.mp4 --json
  python predict.py --weights vit_base_patch16_224.augreg2_in21k_ft_in1k/ cat.jpg --explain out/
  python predict.py --weights dinov2-small/ photos/ --features photos.npy

``--weights PATH`` reads a timm or Hugging Face transformers ViT folder (or a bare timm ``.safetensors``
with ``--arch``) instead of a workdir (``trainer.predictor.load_predictor`` opens either); ``--features FILE.npy`` writes each
input's pooled pre-logits embedding, one row per input read, in order, instead of classes.

One line per input on stdout (``--json``: one JSON object), in the order given. An input that cannot
be read prints ``error: <input>: <problem>`` on stderr (and ``{"input": ..., "error": ...}`` with
``--json``); the others are still answered, and the exit status is 1. A workdir that cannot be
used (no checkpoint, not a workdir) is one ``error:`` line and status 2. ``--explain DIR`` writes one
picture of the attention per input (``DIR/<position>_<name>.png``). ``--params ema`` predicts with the
moving average of the parameters that a run with ``config.ema.decay`` kept.
"""

import gc
import json
import pathlib
import sys

from trainer.command_line import host_memory

if __name__ == '__main__':
  host_memory.reexec_with_huge_page_malloc()  # faster XLA:CPU steps on some CPUs; see trainer/command_line/host_memory.py

from absl import app, flags

from trainer.command_line import cli
from trainer.errors import InputError
from trainer.io import storage

_WORKDIR = flags.DEFINE_string('workdir', None, 'A workdir written by train.py.')
_WEIGHTS = flags.DEFINE_string(
  'weights',
  None,
  'Instead of a workdir: a timm or Hugging Face ViT folder, or a timm .safetensors with --arch.',
)
_ARCH = flags.DEFINE_string('arch', '', 'The timm architecture of a bare .safetensors given to --weights.')
_FEATURES = flags.DEFINE_string(
  'features', None, "Write each input's pooled pre-logits embedding to this .npy."
)
_CHECKPOINT = flags.DEFINE_string('checkpoint', 'latest', "'latest', 'best', or a step number.")
_PARAMS = flags.DEFINE_enum(
  'params', 'raw', ['raw', 'ema'], "'raw': the trained parameters; 'ema': their moving average (config.ema)."
)
_INPUT = flags.DEFINE_string('input', None, "A file of inputs, one per line ('-': standard input).")
_JSON = flags.DEFINE_bool('json', False, 'One JSON object per input instead of plain text.')
_EXPLAIN = flags.DEFINE_string('explain', None, 'Write a picture of the attention for each input into DIR.')
_TOP_K = flags.DEFINE_integer(
  'top_k', 3, 'Classifiers: how many of the most probable classes to show.', lower_bound=1
)
_BEAM_SIZE = flags.DEFINE_integer(
  'beam_size', None, "Translators: beam size (1 = greedy); default: the config's.", lower_bound=1
)
_ALPHA = flags.DEFINE_float(
  'alpha', None, "Translators: length penalty; default: the config's.", lower_bound=0
)
flags.mark_flags_as_mutual_exclusive(['workdir', 'weights'], required=True)

CHUNK = 256  # inputs read and predicted together from arguments and files


def _chunks(names, size):
  chunk = []
  for name in names:
    chunk.append(name)
    if len(chunk) == size:
      yield chunk
      chunk = []
  if chunk:
    yield chunk


def _lines(file, predictor):
  """The inputs named by each line of ``file`` (a folder of images: its files), read as they come."""
  for line in file:
    yield from predictor.input_names(line.rstrip('\r\n'))


def answer(predictor, names, options: dict, *, as_json=False, explain_dir=None, chunk_size=CHUNK, out=None):
  """Answers every input named (a chunk at a time); returns how many failed."""
  out = out or sys.stdout
  failed, position = 0, 0
  if explain_dir is not None:
    try:
      pathlib.Path(explain_dir).mkdir(parents=True, exist_ok=True)
    except OSError as error:
      _error(
        f'could not write pictures into {explain_dir}: {error.strerror or error}', out if as_json else None
      )
      explain_dir, failed = None, 1
  for chunk in _chunks(names, chunk_size):
    read = []
    for name in chunk:
      try:
        read.append((name, predictor.read(name)))
      except InputError as error:
        read.append((name, error))
    good = [value for _, value in read if not isinstance(value, InputError)]
    predictions = iter(predictor.predict(good, **options) if good else [])
    for name, value in read:
      position += 1
      if isinstance(value, InputError):
        failed += 1
        _error(str(value), out if as_json else None, name)
        continue
      prediction = next(predictions)
      shown = {key: item for key, item in prediction.items() if not key.startswith('_')}
      print(
        json.dumps({'input': name, **shown}) if as_json else predictor.present(name, prediction), file=out
      )
      if explain_dir is not None:
        from trainer.predictor import picture_name  # pylint: disable=g-import-not-at-top

        path = pathlib.Path(explain_dir) / picture_name(position, name)
        try:
          predictor.explain(value, path, prediction=prediction, is_read=True, **options)
          print(f'picture: {path}', file=sys.stderr)
        except OSError as error:
          failed += 1
          _error(f'could not write {path}: {error.strerror or error}', None)
    out.flush()
  return failed


def write_features(predictor, names, path: str) -> int:
  """Each readable input's features as rows of ``path`` (``.npy``), in order; returns how many failed."""
  import numpy as np  # pylint: disable=g-import-not-at-top

  read, failed = [], 0
  for name in names:
    try:
      read.append(predictor.read(name))
    except InputError as error:
      failed += 1
      _error(str(error), None, name)
  features = predictor.features(read, is_read=True) if read else np.zeros((0,), np.float32)
  try:
    np.save(path, features)
  except OSError as error:
    cli.fail(f'--features {path}: {error.strerror or error}')
  print(f'wrote the features of {len(read)} inputs, {features.shape}, to {path}', file=sys.stderr)
  return failed


def _error(message: str, json_out, name: str | None = None) -> None:
  message = ' '.join(message.split())
  print(f'error: {message}', file=sys.stderr, flush=True)
  if json_out is not None:
    print(json.dumps({'input': name, 'error': message}), file=json_out, flush=True)


def main(argv):
  cli.quiet_library_logs()
  # Loading makes millions of objects that live to the end (modules, traced programs, the model), and
  # the garbage collector's passes over them slow the start-up and the exit (docs/results.md,
  # "Predict start-up"). Frozen, they are never looked at again.
  gc.disable()
  with cli.interrupt_exits('loading the model', 'nothing was written'):
    from trainer.predictor import load_predictor, missing_class_names_note  # pylint: disable=g-import-not-at-top

    if _WEIGHTS.value is not None:
      options = {'arch': _ARCH.value} if _ARCH.value else {}
      predictor = cli.run_reporting_user_errors(load_predictor, _WEIGHTS.value, **options)
    else:
      predictor = cli.run_reporting_user_errors(
        load_predictor, storage.as_path(_WORKDIR.value), _CHECKPOINT.value, _PARAMS.value
      )
  gc.freeze()
  gc.enable()
  note = missing_class_names_note(predictor) if _WEIGHTS.value is None else None
  if note:
    print(note, file=sys.stderr)
  options = {'top_k': _TOP_K.value}
  if _BEAM_SIZE.value is not None:
    options['beam_size'] = _BEAM_SIZE.value
  if _ALPHA.value is not None:
    options['alpha'] = _ALPHA.value
  kwargs = dict(as_json=_JSON.value, explain_dir=_EXPLAIN.value)
  arguments = argv[1:]
  if _INPUT.value is None and not arguments:
    failed = answer(
      predictor, _lines(sys.stdin, predictor), options, chunk_size=1, **kwargs
    )  # answered as they come
  else:
    names = [name for argument in arguments for name in predictor.input_names(argument)]
    if _INPUT.value == '-':
      names += list(_lines(sys.stdin, predictor))
    elif _INPUT.value is not None:
      try:
        with open(_INPUT.value, encoding='utf-8') as file:
          names += list(_lines(file, predictor))
      except (OSError, UnicodeDecodeError) as error:
        cli.fail(f'--input {_INPUT.value}: {getattr(error, "strerror", None) or error}')
    if _FEATURES.value is not None:
      failed = write_features(predictor, names, _FEATURES.value)
    else:
      failed = answer(predictor, names, options, **kwargs)
  gc.freeze()
  sys.exit(1 if failed else 0)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
