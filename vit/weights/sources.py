"""timm and Hugging Face ViT weights as they come, read without PyTorch into our canonical layout.

Sources (``read_weights``):
- a timm folder as the hub gives it: ``config.json`` (``architecture``, ``num_classes``,
  ``label_names``, ``pretrained_cfg``) and ``model.safetensors``;
- a transformers folder: ``config.json`` (``model_type`` ``vit``, ``deit`` or ``dinov2``),
  ``model.safetensors`` and, when present, ``preprocessor_config.json``;
- a bare ``.safetensors`` file with timm's names, given the timm architecture (``init_from.arch``,
  ``NAME`` or ``NAME.TAG``), prepared as timm prepares that tag (``vit.weights.timm_architectures``).

The arrays are read with ``safetensors.numpy`` and renamed into ``vit.weights.checkpoint_npz``'s canonical
form (``vit.weights.timm_layout``, ``vit.weights.transformers_layout``). The model options are what the source
library builds: for timm, ``timm.create_model``'s ``model_args`` (``timm_layout.resolve``); for
transformers, ``config.json``. The arrays' shapes (width, depth, MLP, patch, prefix tokens, which
layers exist) must agree with them. Pickles (``pytorch_model.bin``, ``.pth``) are refused: loading one runs
code from the file.
"""

import dataclasses
import json
import math
import pathlib
import re

import numpy as np

from trainer.errors import CheckpointError, MissingFileError
from vit.weights import timm_architectures, timm_layout, transformers_layout
from vit.weights.checkpoint_npz import POSEMB_KEY

SAFETENSORS = 'model.safetensors'
PICKLE_SUFFIXES = ('.bin', '.pth', '.pt', '.pkl', '.ckpt')
_CONVERT = (
  'convert it to safetensors where PyTorch is installed: '
  "safetensors.torch.save_file(torch.load(PATH, weights_only=True), 'model.safetensors')"
)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclasses.dataclass(frozen=True)
class Preprocessing:
  """How the source's own code prepares an image: resize (``shortest`` side to ``size[0]``, or
  ``exact`` to ``size``), then a centre crop to ``crop`` (None: none), then ``(x / 255 - mean) / std``."""

  resize: str
  size: tuple[int, ...]
  crop: tuple[int, int] | None
  interpolation: str  # 'bicubic' or 'bilinear'
  mean: tuple[float, ...]
  std: tuple[float, ...]
  # The crop's corner for an odd margin: 'round' ((H - h) / 2 rounded, torchvision's center_crop,
  # which timm uses) or 'floor' ((H - h) // 2, transformers' image processors).
  crop_corner: str = 'round'

  @property
  def image_size(self) -> tuple[int, int]:
    return tuple(self.crop) if self.crop else tuple(self.size)


@dataclasses.dataclass(frozen=True)
class Weights:
  """A source read: canonical arrays, our model options, its classes and its preprocessing."""

  source: str  # 'timm' or 'transformers'
  path: pathlib.Path
  canonical: dict[str, np.ndarray]
  model: dict  # fields of our ``model`` section
  image_size: tuple[int, int]  # the grid of its position table, in pixels
  num_classes: int  # 0: no head
  class_names: list[str] | None
  preprocessing: Preprocessing
  arch: str = ''

  @property
  def channels(self) -> int:
    return int(self.canonical['embedding/kernel'].shape[2])


def is_weights_path(path) -> bool:
  """A safetensors file, a pickle, or a folder of timm or transformers weights (not a workdir of ours)."""
  path = pathlib.Path(path)
  if path.is_file() or not path.exists():
    return path.suffix in ('.safetensors', *PICKLE_SUFFIXES)
  if (path / SAFETENSORS).exists() or any((path / name).exists() for name in ('pytorch_model.bin',)):
    return True
  config = _read_json(path / 'config.json') if (path / 'config.json').is_file() else {}
  return 'architecture' in config or 'model_type' in config


def read_weights(path, arch: str = '', *, header_only: bool = False) -> Weights:
  """Reads a timm or transformers folder, or a bare timm ``.safetensors`` (with ``arch``).

  ``header_only``: only the JSON files and the safetensors header are read, enough for the model
  options, the classes and the preprocessing; ``canonical`` then holds read-only stand-ins of the
  arrays' shapes (every value 0, no memory behind them), not the weights.
  """
  path = pathlib.Path(path)
  load = _shapes if header_only else _load
  if not path.exists():
    raise MissingFileError(f'init_from: {path} does not exist.')
  if path.is_file():
    _refuse_pickle(path)
    if not arch:
      raise CheckpointError(
        f'init_from: {path} is a bare .safetensors file: name its timm architecture with '
        '--config.init_from.arch (e.g. vit_base_patch16_224).'
      )
    return _read_timm(path, load(path), {'architecture': arch})
  config = _read_json(path / 'config.json') if (path / 'config.json').is_file() else {}
  weights = path / SAFETENSORS
  if not weights.is_file():
    pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
      _refuse_pickle(path / pickles[0])
    raise MissingFileError(f'init_from: {path} has no {SAFETENSORS} (a folder of weights without weights).')
  if 'architecture' in config or arch:
    return _read_timm(weights, load(weights), dict(config, architecture=arch or config['architecture']))
  if 'model_type' in config:
    processor = path / 'preprocessor_config.json'
    return _read_transformers(
      weights, load(weights), config, _read_json(processor) if processor.is_file() else None
    )
  raise CheckpointError(
    f'init_from: {path}/config.json names no timm architecture and no transformers model_type.'
  )


def _refuse_pickle(path: pathlib.Path) -> None:
  if path.suffix in PICKLE_SUFFIXES:
    raise CheckpointError(
      f'init_from: {path} is a pickle, which is not read (loading one runs code from the file); {_CONVERT}.'
    )
  if path.suffix != '.safetensors':
    raise CheckpointError(f'init_from: {path} is not a .safetensors file.')


def _read_json(path: pathlib.Path) -> dict:
  try:
    return json.loads(path.read_text())
  except (OSError, ValueError) as error:
    raise CheckpointError(f'init_from: {path} is not readable JSON ({error}).') from None


def _load(path: pathlib.Path) -> dict[str, np.ndarray]:
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top

  try:
    arrays = load_file(str(path))
  except Exception as error:  # safetensors raises its own SafetensorError for a damaged header
    raise CheckpointError(f'init_from: {path} is not a readable .safetensors file ({error}).') from None
  return {
    key: value.astype(np.float32) if value.dtype != np.float32 else value for key, value in arrays.items()
  }


def _shapes(path: pathlib.Path) -> dict[str, np.ndarray]:
  """Each array of the file as a zero-strided float32 stand-in of its shape, from the header alone.

  The layouts' renames, transposes, slices and reshapes keep such a stand-in a view of one zero, so
  the canonical form's shapes come out without reading (or allocating) the weights.
  """
  from safetensors import safe_open  # pylint: disable=g-import-not-at-top

  try:
    with safe_open(str(path), framework='numpy') as file:
      shapes = {key: tuple(file.get_slice(key).get_shape()) for key in file.keys()}
  except Exception as error:  # safetensors raises its own SafetensorError for a damaged header
    raise CheckpointError(f'init_from: {path} is not a readable .safetensors file ({error}).') from None
  return {key: np.broadcast_to(np.float32(0), shape) for key, shape in shapes.items()}


def options_from_canonical(canonical: dict[str, np.ndarray]) -> dict:
  """The model options the arrays decide: width, depth, MLP, patch, pooling and which layers exist."""
  kernel = canonical.get('embedding/kernel')
  if kernel is None or kernel.ndim != 4:
    raise CheckpointError('init_from: the file has no patch embedding (patch_embed.proj.weight).')
  if kernel.shape[0] != kernel.shape[1]:
    raise CheckpointError(f'init_from: the patch embedding {kernel.shape[:2]} is not square.')
  depth = len({m.group(1) for key in canonical if (m := re.match(r'Transformer/encoderblock_(\d+)/', key))})
  options = dict(
    variant='custom',
    width=int(kernel.shape[-1]),
    depth=depth,
    mlp_dim=int(canonical['Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel'].shape[1]),
    patch_size=int(kernel.shape[0]),
    pool='cls' if 'cls' in canonical else 'map' if 'MAPHead_0/probe' in canonical else 'gap',
    posemb='learn1d',
    reg_tokens=int(canonical['reg'].shape[1]) if 'reg' in canonical else 0,
    norm_pre='Transformer/norm_pre/scale' in canonical,
    fc_norm='fc_norm/scale' in canonical,
    patch_bias='embedding/bias' in canonical,
    distill_token='dist_token' in canonical,
    pre_logits=int(canonical['pre_logits/kernel'].shape[1]) if 'pre_logits/kernel' in canonical else 0,
  )
  options['layer_scale'] = 1e-5 if 'Transformer/encoderblock_0/LayerScale_0/scale' in canonical else 0.0
  return options


def _check_shapes(declared: dict, patch_kernel: np.ndarray, what: str) -> None:
  """Width and patch size, read off the patch kernel ``[D, C, P, P]``, against ``declared``, before the
  arrays are cut into heads."""
  from_arrays = {'width': int(patch_kernel.shape[0]), 'patch_size': int(patch_kernel.shape[-1])}
  differ = [
    f'{n} {declared[n]!r} in {what}, {v!r} in the arrays'
    for n, v in from_arrays.items()
    if declared.get(n, v) != v
  ]
  if differ:
    raise CheckpointError(f'init_from: {what} does not match the arrays: {"; ".join(differ)}.')
  if from_arrays['width'] % declared['num_heads']:
    raise CheckpointError(
      f'init_from: {what} has {declared["num_heads"]} heads, which do not divide the width {from_arrays["width"]}.'
    )


def _merge(declared: dict, from_arrays: dict, what: str) -> dict:
  """The arrays' options over the declared ones; a one-line error listing the ones they contradict."""
  differ = [
    f'{name} {declared[name]!r} in {what}, {value!r} in the arrays'
    for name, value in from_arrays.items()
    if name in declared and name != 'layer_scale' and declared[name] != value
  ]
  if bool(declared.get('layer_scale')) != bool(from_arrays['layer_scale']):
    differ.append(
      f'layer scale {"on" if declared.get("layer_scale") else "off"} in {what}, not in the arrays'
    )
  if differ:
    raise CheckpointError(f'init_from: {what} does not match the arrays: {"; ".join(differ)}.')
  merged = dict(declared, **from_arrays)
  if declared.get('layer_scale'):
    merged['layer_scale'] = declared['layer_scale']
  return merged


def _read_timm(path: pathlib.Path, arrays: dict, config: dict) -> Weights:
  """A timm model as ``timm.create_model`` builds it (``timm_layout.resolve``), prepared as the
  folder's ``pretrained_cfg`` says; without one (a bare file), as timm's default for the name and tag."""
  name = config['architecture']
  architecture = timm_layout.resolve(name, config.get('model_args'))
  what = f'timm architecture {architecture.name!r}'
  declared = dict(architecture.options)
  pretrained = config.get('pretrained_cfg') or _default_pretrained_cfg(path, name)
  size = architecture.image_size or tuple(int(v) for v in (pretrained.get('input_size') or [3, 224, 224])[1:])
  if 'patch_embed.proj.weight' not in arrays:
    raise CheckpointError(f'init_from: {path} has no patch_embed.proj.weight: not a timm ViT.')
  _check_shapes(declared, arrays['patch_embed.proj.weight'], what)
  if declared['distill_token'] != ('dist_token' in arrays):
    has = 'has a' if declared['distill_token'] else 'has no'
    raise CheckpointError(
      f'init_from: {what} {has} distillation token, the file '
      f'{"does not" if declared["distill_token"] else "does"} (dist_token; the distilled DeiTs are '
      'deit_{tiny,small,base}_distilled_patch16_{224,384}).'
    )
  patch = arrays['patch_embed.proj.weight'].shape[-1]
  grid = (int(size[0]) // patch, int(size[1]) // patch)
  canonical = timm_layout.to_canonical(
    arrays, num_heads=declared['num_heads'], no_embed_class=architecture.no_embed_class, grid=grid,
    class_token_as_register=architecture.class_token_as_register,
  )  # fmt: skip
  options = _merge(declared, options_from_canonical(canonical), what)
  num_classes = int(canonical['head/kernel'].shape[1]) if 'head/kernel' in canonical else 0
  crop_pct = float(pretrained.get('crop_pct', 0.875))  # timm's DEFAULT_CROP_PCT
  crop = (int(size[0]), int(size[1]))
  resize = tuple(math.floor(side / crop_pct) for side in crop)
  interpolation = pretrained.get('interpolation', 'bicubic')
  if pretrained.get('crop_mode', 'center') == 'squash' or resize[0] != resize[1]:
    preprocessing = Preprocessing('exact', resize, crop, interpolation, *_norms(pretrained))
  else:
    preprocessing = Preprocessing('shortest', resize[:1], crop, interpolation, *_norms(pretrained))
  return Weights(
    'timm', path, canonical, options, crop, num_classes,
    _label_names(config.get('label_names'), num_classes), preprocessing, architecture.name,
  )  # fmt: skip


def _default_pretrained_cfg(path: pathlib.Path, name: str) -> dict:
  """timm's ``pretrained_cfg`` for ``name`` (``arch.tag``; no tag: the architecture's default tag), as
  ``timm.create_model(name, pretrained=True)`` prepares images; one line when timm has none."""
  cfg = timm_architectures.pretrained_cfg(name)
  if cfg is None:
    known = timm_architectures.architecture(name)
    tags = ', '.join(known['tags']) if known else ''
    raise CheckpointError(
      f'init_from: {path} has no pretrained_cfg and timm has none for {name!r}'
      f'{f" (its tags: {tags})" if tags else ""}: give the folder with its config.json, whose '
      'pretrained_cfg says how images are prepared.'
    )
  return cfg


def _norms(pretrained: dict) -> tuple[tuple[float, ...], tuple[float, ...]]:
  mean = tuple(float(v) for v in pretrained.get('mean', IMAGENET_MEAN))
  std = tuple(float(v) for v in pretrained.get('std', IMAGENET_STD))
  return mean, std


def _label_names(names, num_classes: int) -> list[str] | None:
  if not names or not num_classes:
    return None
  if isinstance(names, dict):
    return [str(names.get(str(index), names.get(index, index))) for index in range(num_classes)]
  return [str(name) for name in names][:num_classes]


def _read_transformers(path: pathlib.Path, arrays: dict, config: dict, processor: dict | None) -> Weights:
  declared = transformers_layout.options_from_config(config)
  key = next((k for k in arrays if k.endswith('embeddings.patch_embeddings.projection.weight')), None)
  if key is None:
    raise CheckpointError(f'init_from: {path} has no embeddings.patch_embeddings.projection.weight.')
  _check_shapes(declared, arrays[key], f'{path.parent}/config.json')
  canonical = transformers_layout.to_canonical(
    arrays, num_heads=declared['num_heads'], dinov2=config['model_type'] == 'dinov2'
  )
  options = _merge(declared, options_from_canonical(canonical), f'{path.parent}/config.json')
  side = transformers_layout.image_size(config)
  table_rows = canonical[POSEMB_KEY].shape[0]
  grid = side // options['patch_size']
  if table_rows != grid * grid:
    raise CheckpointError(
      f'init_from: config.json image_size {side} gives a {grid}x{grid} grid, but position_embeddings '
      f'has {table_rows} patch rows.'
    )
  num_classes = int(canonical['head/kernel'].shape[1]) if 'head/kernel' in canonical else 0
  id2label = config.get('id2label') if num_classes else None
  return Weights(
    'transformers', path, canonical, options, (side, side), num_classes,
    _label_names(id2label, num_classes), _processor(processor, side), '',
  )  # fmt: skip


def _processor(processor: dict | None, side: int) -> Preprocessing:
  """transformers' image processor config: resize (``height``/``width`` exact or ``shortest_edge``),
  centre crop when ``do_center_crop``, normalise (ViT's defaults: 0.5, 0.5)."""
  if processor is None:
    return Preprocessing('exact', (side, side), None, 'bilinear', (0.5,) * 3, (0.5,) * 3)
  size = processor.get('size', {'height': side, 'width': side})
  if isinstance(size, int):
    size = {'shortest_edge': size}
  resample = {2: 'bilinear', 3: 'bicubic'}.get(processor.get('resample', 2), 'bilinear')
  if 'shortest_edge' in size:
    resize, sizes = 'shortest', (int(size['shortest_edge']),)
  else:
    resize, sizes = 'exact', (int(size['height']), int(size['width']))
  crop = None
  if processor.get('do_center_crop'):
    crop_size = processor.get('crop_size', {'height': side, 'width': side})
    crop_size = {'height': crop_size, 'width': crop_size} if isinstance(crop_size, int) else crop_size
    crop = (int(crop_size['height']), int(crop_size['width']))
  mean = tuple(float(v) for v in processor.get('image_mean', (0.5,) * 3))
  std = tuple(float(v) for v in processor.get('image_std', (0.5,) * 3))
  if not processor.get('do_normalize', True):
    mean, std = (0.0,) * 3, (1.0,) * 3
  return Preprocessing(resize, sizes, crop, resample, mean, std, crop_corner='floor')
