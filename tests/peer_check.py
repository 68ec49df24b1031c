"""Our ViT weights against the real PyTorch, timm and transformers: the peer tier of ``.ci/run``.

  bash .ci/peer                       # builds .venv-peer (requirements-peer.txt) and runs this
  .venv-peer/bin/python -m tests.peer_check [--keep DIR]

Run with ``.venv-peer``'s Python, which imports both our code (``.venv``'s packages) and the
libraries. Every model is tiny and random (fixed seeds), and every folder is written by the library
itself, so nothing is downloaded. For each case it prints a row (source, model, check, largest
absolute difference, pass or fail), then ``N passed, M failed``; it exits 1 when any check differs
by more than ``TOLERANCE`` or raised (the error is the row's note).

- We read theirs: timm folders written by ``save_for_hf`` (one per ViT family) and transformers
  folders written by ``save_pretrained``, opened with ``trainer.predictor.load_predictor``: logits and
  pooled features on the same float input, and the pixels our predictor prepares from one uint8
  image against the library's own preprocessing; bare timm ``.safetensors`` files (no config) with
  their architecture's preprocessing.
- They read ours: a briefly trained digits workdir exported with ``vit.weights.export`` (with no
  ``--arch``, and with one), a model fine-tuned from a timm folder and a distilled DeiT (to timm and
  transformers), opened with ``timm.create_model('local-dir:...')`` and transformers'
  ``from_pretrained``: logits and features.
- A teacher from their folders: ``config.distill.teacher`` set to each folder gives timm's and
  transformers' logits (``vit.distillation.load_teacher``).
"""

import argparse
import contextlib
import dataclasses
import io
import json
import logging
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

from benchmarks import torch_libraries
from tests import xla_flags

REPO = pathlib.Path(__file__).resolve().parents[1]
TOLERANCE = 1e-4  # float32 throughout
# timm's keyword arguments for the tiny models: width 24, 3 heads, 2 blocks, 4x4 patches of 16x16 images
TINY = dict(embed_dim=24, depth=2, num_heads=3, patch_size=4, img_size=16, mlp_ratio=2.0)
# One architecture of each timm ViT family, written at the tiny size by timm itself.
TIMM_FOLDERS = (
  'vit_base_patch16_224',  # AugReg: class token, exact GELU
  'deit_base_patch16_224',
  'deit_base_distilled_patch16_224',  # distillation token and second head
  'deit3_base_patch16_224',  # layer scale, no position rows for the class token
  'vit_base_patch16_siglip_224',  # attention pooling (map)
  'vit_base_patch16_siglip_gap_224',  # average pooling
  'vit_base_patch32_siglip_gap_256',  # tanh GELU
  'vit_base_patch16_clip_224',  # pre-norm, no patch bias
  'vit_base_patch16_clip_quickgelu_224',  # QuickGELU
  'vit_small_patch14_dinov2',  # layer scale
  'vit_small_patch14_reg4_dinov2',  # register tokens
  'vit_medium_patch16_gap_256',  # no class token, average pooling, recognised from its model_args
)
# Bare files: real widths (one block), so that the architecture's name says what the arrays do not.
BARE_FILES = (
  'vit_tiny_patch16_224',
  'vit_base_patch16_siglip_224',
  'vit_base_patch16_clip_224',
  'vit_small_patch14_dinov2',
)
CLASSES = 5
PARTS = ('timm', 'bare', 'transformers', 'ours', 'teachers')


@dataclasses.dataclass
class Row:
  source: str
  model: str
  check: str
  difference: float | None = None
  note: str = ''
  seconds: float = 0.0

  @property
  def passed(self) -> bool:
    return self.difference is not None and self.difference <= TOLERANCE


class Checks:
  """The rows, each from a comparison or from the error that stopped it."""

  def __init__(self):
    self.rows: list[Row] = []

  @contextlib.contextmanager
  def case(self, source: str, model: str, check: str):
    row = Row(source, model, check)
    self.rows.append(row)
    start = time.perf_counter()
    try:
      yield row
    except Exception as error:  # pylint: disable=broad-except  (a check that raised is a failed row)
      row.note = f'{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ""}'[:160]
      LOG.write(f'{source}, {model}, {check}:\n')
      traceback.print_exc(file=LOG)
    row.seconds = time.perf_counter() - start

  def compare(self, row: Row, ours, theirs) -> None:
    ours, theirs = np.asarray(ours, np.float32), np.asarray(theirs, np.float32)
    if ours.shape != theirs.shape:
      raise ValueError(f'shapes differ: ours {ours.shape}, theirs {theirs.shape}')
    row.difference = float(np.abs(ours - theirs).max())

  def numbers(self) -> dict:
    """The counts and the largest difference, for ``python -m records.record`` (``--numbers``)."""
    measured = [r.difference for r in self.rows if r.difference is not None]
    return {
      'checks': len(self.rows),
      'failed': sum(not r.passed for r in self.rows),
      'largest_difference': max(measured, default=None),
      'check_seconds': round(time.perf_counter() - STARTED, 1),
    }

  def report(self) -> int:
    widths = [max(len(getattr(r, f)) for r in self.rows) for f in ('source', 'model', 'check')]
    print(f'{"source":{widths[0]}}  {"model":{widths[1]}}  {"check":{widths[2]}}  max abs diff  result')
    for r in self.rows:
      diff = f'{r.difference:.1e}' if r.difference is not None else '-'
      line = f'{r.source:{widths[0]}}  {r.model:{widths[1]}}  {r.check:{widths[2]}}  {diff:>12}  '
      print(line + ('pass' if r.passed else 'FAIL') + (f'  {r.note}' if r.note else ''))
    failed = sum(not r.passed for r in self.rows)
    seconds = {}
    for r in self.rows:
      seconds[r.source] = seconds.get(r.source, 0.0) + r.seconds
    print('seconds: ' + ', '.join(f'{source} {value:.0f}' for source, value in seconds.items()))
    print(f'tolerance {TOLERANCE:g}; the errors in full: {LOG_PATH}')
    print(f'{time.perf_counter() - STARTED:.0f} s in all')
    print(f'{len(self.rows) - failed} passed, {failed} failed')
    return 1 if failed else 0


LOG = io.StringIO()
STARTED = time.perf_counter()
LOG_PATH = pathlib.Path()


def _import_libraries():
  """torch, timm (``benchmarks/torch_libraries.py`` says how beside a CPU torch) and transformers."""
  import torch  # pylint: disable=g-import-not-at-top

  timm = torch_libraries.import_timm()
  import transformers  # pylint: disable=g-import-not-at-top

  transformers.logging.set_verbosity_error()
  transformers.utils.logging.disable_progress_bar()
  logging.getLogger('timm').setLevel(
    logging.ERROR
  )  # its notices (a one-channel model's mean) are not results
  return torch, timm, transformers


def randomised(torch, model, seed: int, scale: float = 0.2):
  """The model with every parameter moved by noise (zero-initialised heads and tokens too), in eval mode."""
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for parameter in model.parameters():
      parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
  return model.eval()


def our_predictor(path, **options):
  """Our predictor for a workdir, a weights folder or a bare file (``arch=``), through the one entry
  point, ``trainer.predictor.load_predictor``."""
  from trainer.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  return load_predictor(path, **options)


def ours(predictor, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Logits and pooled features of already normalised ``images`` [B, H, W, C]."""
  logits, intermediates = predictor.model(images)
  return np.asarray(logits), np.asarray(intermediates['pre_logits'])


def our_pixels(predictor, image: np.ndarray) -> np.ndarray:
  """One uint8 image as our predictor prepares it: float32 [H, W, C]."""
  read = predictor.read(image)
  return np.asarray(predictor.prediction.prepare(np.asarray(read)[None]))[0]


def timm_features(torch, model, x):
  with torch.no_grad():
    return model.forward_head(model.forward_features(x), pre_logits=True).numpy()


def we_read_timm(checks, torch, timm, root, images, photo):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from timm.data import create_transform, resolve_data_config  # pylint: disable=g-import-not-at-top
  from timm.models import save_for_hf  # pylint: disable=g-import-not-at-top

  x = torch.from_numpy(images).permute(0, 3, 1, 2)
  folders = {}
  for seed, arch in enumerate(TIMM_FOLDERS):
    folder = root / 'timm' / arch
    with checks.case('timm folder', arch, 'timm reads back') as row:
      model = randomised(torch, timm.create_model(arch, **TINY, num_classes=CLASSES), seed)
      with torch.no_grad():
        built = model(x).numpy()
      save_for_hf(model, folder, model_config={'label_names': list('abcde')}, model_args=TINY,
                  safe_serialization=True)  # fmt: skip
      # timm's own reading of the folder, as a user's timm.create_model('local-dir:...') gives it
      model = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
      with torch.no_grad():
        logits = model(x).numpy()
      checks.compare(row, logits, built)
      folders[arch] = (model, logits)
    if arch not in folders:
      continue
    model, logits = folders[arch]
    predictor = None
    with checks.case('timm folder', arch, 'logits') as row:
      predictor = our_predictor(folder)
      checks.compare(row, ours(predictor, images)[0], logits)
    # A distilled DeiT's pooled features: timm's average the class and distillation tokens, ours are
    # the class token's (what the class head reads), compared with timm's class token.
    distilled = 'distilled' in arch
    with checks.case('timm folder', arch, 'features (class token)' if distilled else 'features') as row:
      if predictor is None:
        raise RuntimeError('our predictor did not open the folder')
      if distilled:
        with torch.no_grad():
          theirs = model.forward_features(x)[:, 0].numpy()
      else:
        theirs = timm_features(torch, model, x)
      checks.compare(row, ours(predictor, images)[1], theirs)
    with checks.case('timm folder', arch, 'preprocessing') as row:
      if predictor is None:
        raise RuntimeError('our predictor did not open the folder')
      transform = create_transform(**resolve_data_config({}, model=model))
      theirs = transform(Image.fromarray(photo)).permute(1, 2, 0).numpy()
      checks.compare(row, our_pixels(predictor, photo), theirs)
  return {arch: (root / 'timm' / arch, logits) for arch, (_, logits) in folders.items()}


def we_read_bare_files(checks, torch, timm, root, photo):
  """A bare timm file (``model.safetensors`` alone): our predictor's pixels against timm's default
  preprocessing of that architecture, and the features of those pixels."""
  import safetensors.torch  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from timm.data import create_transform, resolve_data_config  # pylint: disable=g-import-not-at-top

  for seed, arch in enumerate(BARE_FILES):
    path = root / 'bare' / f'{arch}.safetensors'
    model = None
    with checks.case('timm bare file', arch, 'preprocessing') as row:
      # at their real width, a smaller noise keeps the activations near 1, as in the tiny models
      model = randomised(torch, timm.create_model(arch, depth=1, num_classes=CLASSES), 100 + seed, 0.02)
      path.parent.mkdir(parents=True, exist_ok=True)
      safetensors.torch.save_file(model.state_dict(), str(path))
      transform = create_transform(**resolve_data_config({}, model=model))
      theirs = transform(Image.fromarray(photo)).permute(1, 2, 0).numpy()
      predictor = our_predictor(path, arch=arch)
      pixels = our_pixels(predictor, photo)
      checks.compare(row, pixels, theirs)
    with checks.case('timm bare file', arch, 'features') as row:
      if model is None or pixels.shape != theirs.shape:
        raise RuntimeError('no common input (see the preprocessing row)')
      x = torch.from_numpy(theirs).permute(2, 0, 1)[None]
      checks.compare(row, ours(predictor, theirs[None])[1], timm_features(torch, model, x))


def we_read_transformers(checks, torch, transformers, root, images, photo):
  x = torch.from_numpy(images).permute(0, 3, 1, 2)
  common = dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=3, image_size=16, patch_size=4)
  cases = (
    ('ViTForImageClassification', 'ViTConfig', 'ViTImageProcessor', dict(intermediate_size=48, num_labels=CLASSES)),
    ('ViTModel', 'ViTConfig', 'ViTImageProcessor', dict(intermediate_size=48)),
    ('DeiTForImageClassificationWithTeacher', 'DeiTConfig', 'DeiTImageProcessor', dict(intermediate_size=48, num_labels=CLASSES)),
    ('Dinov2Model', 'Dinov2Config', 'BitImageProcessor', dict(mlp_ratio=2)),
  )  # fmt: skip
  written = {}
  for seed, (name, config_class, processor_class, extra) in enumerate(cases):
    folder = root / 'transformers' / name
    with checks.case('transformers folder', name, 'logits' if 'num_labels' in extra else 'features') as row:
      config = getattr(transformers, config_class)(**common, **extra)
      model = randomised(torch, getattr(transformers, name)(config), 200 + seed)
      model.save_pretrained(folder)
      size = {'height': 16, 'width': 16} if processor_class != 'BitImageProcessor' else {'shortest_edge': 18}
      crop = {'crop_size': {'height': 16, 'width': 16}} if processor_class != 'ViTImageProcessor' else {}
      processor = getattr(transformers, processor_class)(size=size, **crop)
      processor.save_pretrained(folder)
      with torch.no_grad():
        outputs = model(pixel_values=x)
      predictor = our_predictor(folder)
      logits, features = ours(predictor, images)
      if 'num_labels' in extra:
        checks.compare(row, logits, outputs.logits.numpy())
        written[name] = (folder, outputs.logits.numpy())
      else:
        checks.compare(row, features, outputs.pooler_output.numpy())
    with checks.case('transformers folder', name, 'preprocessing (PIL backend)') as row:
      # transformers' PIL backend: its default (torchvision) backend resamples tensors, not PIL images
      pil = getattr(transformers, f'{processor_class}Pil').from_pretrained(folder)
      theirs = pil(images=photo, return_tensors='np')['pixel_values'][0].transpose(1, 2, 0)
      checks.compare(row, our_pixels(predictor, photo), theirs)
  return written


class Training:
  """A few steps of a digits ViT through ``train.py``, as a user runs it, started in the background
  (the libraries' checks run meanwhile); ``wait`` raises with its last line if it failed."""

  def __init__(self, workdir: pathlib.Path, config: str):
    self.workdir = workdir
    command = [
      sys.executable, 'train.py', '--config', config, '--workdir', str(workdir),
      '--config.num_epochs=0', '--config.total_steps=6', '--config.eval_every_steps=6',
      '--config.checkpoint_every_steps=6', '--config.log_every_steps=6',
    ]  # fmt: skip
    self.process = subprocess.Popen(
      command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )

  def wait(self) -> pathlib.Path:
    if self.process.returncode is None:
      output, _ = self.process.communicate()
      LOG.write(output)
      self.output = output
    output = self.output
    if self.process.returncode:
      last = output.strip().splitlines()[-1] if output.strip() else ''
      raise RuntimeError(f'train.py exited {self.process.returncode}: {last}')
    return self.workdir


# The digits ViT at the tiny timm folder's sizes and numerics, starting from that folder.
FINETUNE_CONFIG = """from configs import vit_digits
from configs.common import experiment


def get_config():
  return experiment(
    vit_digits.get_config(),
    init_from=dict(path={start!r}),
    model=dict(width=24, depth=2, num_heads=3, mlp_dim=48, patch_size=4, pool='cls', drop_path=0.0,
               activation='gelu_exact', layernorm_epsilon=1e-6),
  )
"""


def start_training(torch, timm, root) -> dict:
  """The quick start's digits ViT, and one fine-tuned from a one-channel timm folder at the digits' size."""
  start = root / 'timm_gray'
  gray_args = dict(TINY, in_chans=1, img_size=8)
  gray = randomised(torch, timm.create_model('vit_base_patch16_224', **gray_args), 300)
  timm.models.save_for_hf(gray, start, model_args=gray_args, safe_serialization=True)
  config = root / 'finetune_config.py'
  config.write_text(FINETUNE_CONFIG.format(start=str(start)))
  return {
    'vit_digits': Training(root / 'ours' / 'vit_digits', 'configs/vit_digits.py'),
    'fine-tuned from timm': Training(root / 'ours' / 'finetuned', str(config)),
  }


def they_read_ours(checks, torch, timm, transformers, root, timm_folders, trainings):
  from vit.weights import export  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(1)
  exports = (
    ('vit_digits', 'timm', 'timm, no --arch', ''),
    ('vit_digits', 'timm', 'timm, --arch vit_base_patch32_siglip_gap_256', 'vit_base_patch32_siglip_gap_256'),
    ('fine-tuned from timm', 'timm', 'timm, no --arch', ''),
    ('fine-tuned from timm', 'transformers', 'transformers', ''),
  )
  for name, to, what, arch in exports:
    with checks.case('our export', name, what) as row:
      workdir = trainings[name].wait()
      predictor = our_predictor(workdir)
      inputs = rng.uniform(-1, 1, (2, *predictor.task.sizes.image_shape)).astype(np.float32)
      out = root / 'ours' / f'{workdir.name}_{to}_{arch or "own"}'
      export.export(str(workdir), to, str(out), arch)
      compare_export(checks, row, torch, timm, transformers, to, out, predictor, inputs)

  # A distilled DeiT of ours: the model our reader builds from timm's folder, written back by our export.
  source = timm_folders.get('deit_base_distilled_patch16_224')
  images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
  common = dict(image_size=(16, 16), mean=(0.5,) * 3, std=(0.5,) * 3, class_names=list('abcde'))
  for to in ('timm', 'transformers'):
    with checks.case('our export', 'distilled DeiT', to) as row:
      if source is None:
        raise RuntimeError('no timm folder of the distilled DeiT to start from')
      predictor = our_predictor(source[0])
      out = root / 'ours' / f'deit_distilled_{to}'
      if to == 'timm':
        export.write_timm(predictor.model, out, 'deit_base_distilled_patch16_224', **common)
      else:
        export.write_transformers(predictor.model, out, **common)
      compare_export(checks, row, torch, timm, transformers, to, out, predictor, images)


def compare_export(checks, row, torch, timm, transformers, to, out, predictor, inputs) -> None:
  """The library's logits of our exported folder into ``row``, then a row of its features (the
  class token's for a distilled DeiT): a briefly trained head's logits are small, the features not."""
  x = torch.from_numpy(inputs).permute(0, 3, 1, 2)
  distilled = predictor.model.distill_head is not None
  with torch.no_grad():
    if to == 'timm':
      model = timm.create_model(f'local-dir:{out}', pretrained=True).eval()
      logits = model(x).numpy()
      tokens = model.forward_features(x)
      features = tokens[:, 0].numpy() if distilled else model.forward_head(tokens, pre_logits=True).numpy()
    else:
      kind = (
        transformers.DeiTForImageClassificationWithTeacher
        if distilled
        else transformers.ViTForImageClassification
      )
      model = kind.from_pretrained(out).eval()
      logits = model(pixel_values=x).logits.numpy()
      encoder = model.deit if distilled else model.vit
      features = encoder(pixel_values=x).last_hidden_state[:, 0].numpy()
  ours_logits, ours_features = ours(predictor, inputs)
  checks.compare(row, ours_logits, logits)
  with checks.case(row.source, row.model, f'{row.check}: features') as features_row:
    checks.compare(features_row, ours_features, features)


def teachers(checks, sources, images):
  """``config.distill.teacher`` = each folder: the teacher's logits of the same normalised images."""
  import ml_collections  # pylint: disable=g-import-not-at-top

  from vit import distillation  # pylint: disable=g-import-not-at-top

  for (source, name), (folder, logits) in sources.items():
    with checks.case(source, name, 'as distillation teacher') as row:
      config = distillation.check_distill(
        ml_collections.ConfigDict(dict(distillation.default_distill_config(), teacher=str(folder)))
      )
      teacher = distillation.load_teacher(
        config, num_classes=CLASSES, image_shape=images.shape[1:], dtype='float32'
      )
      mean, std = teacher.mean or (0.5,) * 3, teacher.std or (0.5,) * 3
      checks.compare(row, teacher.logits(teacher.variables, images, mean, std), logits)


def main() -> int:
  global LOG_PATH  # pylint: disable=global-statement
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--keep', help='write the folders here and keep them (default: a temporary folder)')
  parser.add_argument('--numbers', help='also write the counts and the largest difference to this JSON file')
  parser.add_argument('--only', nargs='+', choices=PARTS, help='these parts alone (default: all)')
  args = parser.parse_args()
  # Tiny programs: XLA's optimisation passes cost more than they save (as in the test suite); the
  # train.py processes inherit both settings.
  os.environ['JAX_DISABLE_MOST_OPTIMIZATIONS'] = '1'
  os.environ['XLA_FLAGS'] = xla_flags.with_fast_compile(os.environ.get('XLA_FLAGS', ''))
  torch, timm, transformers = _import_libraries()
  torch.manual_seed(0)
  print(
    f'torch {torch.__version__}, timm {timm.__version__}, transformers {transformers.__version__}', flush=True
  )
  with tempfile.TemporaryDirectory(prefix='peer-check-') as temporary:
    root = pathlib.Path(args.keep or temporary)
    LOG_PATH = (
      root / 'errors.log' if args.keep else pathlib.Path(tempfile.gettempdir()) / 'peer_check_errors.log'
    )
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
    photo = rng.integers(0, 256, (61, 47, 3), dtype=np.uint8)  # resized up and cropped by every source
    photo = np.asarray(np.cumsum(photo, axis=1) % 256, np.uint8)  # structure for the interpolation to show
    checks = Checks()
    parts = set(args.only or PARTS)
    trainings = start_training(torch, timm, root) if 'ours' in parts else {}
    timm_folders = (
      we_read_timm(checks, torch, timm, root, images, photo) if parts & {'timm', 'teachers', 'ours'} else {}
    )
    if 'bare' in parts:
      we_read_bare_files(checks, torch, timm, root, photo)
    hf_folders = (
      we_read_transformers(checks, torch, transformers, root, images, photo)
      if parts & {'transformers', 'teachers'}
      else {}
    )
    if 'ours' in parts:
      they_read_ours(checks, torch, timm, transformers, root, timm_folders, trainings)
    if 'teachers' in parts:
      sources = {('timm folder', k): v for k, v in timm_folders.items()}
      sources |= {('transformers folder', k): v for k, v in hf_folders.items()}
      teachers(checks, sources, images)
    LOG_PATH.write_text(LOG.getvalue())
    if args.numbers:
      pathlib.Path(args.numbers).write_text(json.dumps(checks.numbers()))
    return checks.report()


if __name__ == '__main__':
  sys.path.insert(0, str(REPO))
  sys.exit(main())
