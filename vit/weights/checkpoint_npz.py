"""ViT parameters as ``.npz`` files in the published layouts, read into our model and written out.

Two layouts are read, from the kinds of file their code writes:
- ``official`` (google-research/vision_transformer): ``embedding/kernel`` ``(P, P, C, D)``,
  ``cls`` ``(1, 1, D)``, ``Transformer/posembed_input/pos_embedding`` ``(1, 1 + N, D)`` whose
  first row is the class token's, ``Transformer/encoderblock_{i}/LayerNorm_0|2``,
  ``.../MultiHeadDotProductAttention_1/{query,key,value}`` (kernel ``(D, H, D/H)``, bias
  ``(H, D/H)``), ``.../out`` (kernel ``(H, D/H, D)``), ``.../MlpBlock_3/Dense_0|1``,
  ``Transformer/encoder_norm``, optional ``pre_logits``, ``head``; a DeiT model with a
  distillation token has ``dist_token`` (its position row after the class token's) and
  ``head_dist`` as timm names them.
- ``big_vision``: the same with ``pos_embedding`` at the top level and no class-token row,
  ``MultiHeadDotProductAttention_0``, ``MlpBlock_0``, ``LayerNorm_0|1``, an optional
  ``MAPHead_0``, and the scanned form in which ``Transformer/encoderblock/...`` holds every layer
  stacked on a leading axis. The image tower is found where big_vision's files keep it:
  ``params/img/`` (a two-tower file, SigLIP-style, beside ``params/txt/``, ``params/t``,
  ``params/b``), ``params/`` (a parameter file, or a trainer checkpoint beside ``opt/`` and
  ``chrono/``), or the top level (a bare parameter tree, told from the official layout by its
  names). Everything outside the tower is ignored and counted (``ignored_summary``).

The options of timm's and Hugging Face's ViTs (``vit.model``) have canonical keys of their own, in
the same style: ``reg`` ``(1, R, D)`` (register tokens), ``.../encoderblock_{i}/LayerScale_0/scale``
and ``LayerScale_1/scale`` (after attention and after the MLP), ``Transformer/norm_pre``,
``fc_norm``; a patch embedding without bias has no ``embedding/bias`` and a model whose final
LayerNorm follows the pooling has no ``Transformer/encoder_norm``. ``vit.weights.sources`` reads those
sources into this form.

Both are first brought to one canonical form: official names, the class-token position row
folded into ``cls`` (exact: the stem only adds it to the class token) and the position table
as ``(N, D)``. ``canonical_to_model`` then checks every key against the model, naming the key
and both shapes on a mismatch, and adapts what fine-tuning changes (a new head, a new grid).
``model_to_official`` writes the official layout, which reads back to the same parameters.
A model with a scanned encoder (``model.scan_layers``) reads and writes the same files: its
stacked blocks are unstacked into ``encoderblock_{i}`` and back.
"""

import collections
import dataclasses
import math
import pathlib
import re
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, traverse_util

from attention.layers import layer_of, stack_blocks, unstack_blocks
from attention.resample import resample_grid_table
from trainer.errors import CheckpointError, MissingFileError

POSEMB_KEY = 'Transformer/posembed_input/pos_embedding'
# big_vision block names -> official ones
_BIG_VISION_BLOCK_NAMES = {
  'LayerNorm_0': 'LayerNorm_0',
  'LayerNorm_1': 'LayerNorm_2',
  'MultiHeadDotProductAttention_0': 'MultiHeadDotProductAttention_1',
  'MlpBlock_0': 'MlpBlock_3',
}
# where big_vision's files keep the image tower, most specific first ('': at the top level)
_TOWER_PREFIXES = ('params/img/', 'params/', '')
# names only big_vision uses, to tell a bare big_vision tree from the official layout
_BIG_VISION_NAMES = re.compile(
  r'^(pos_embedding$|Transformer/encoderblock/'
  r'|Transformer/encoderblock_\d+/(MultiHeadDotProductAttention_0|MlpBlock_0)/)'
)
# parameters that a fine-tuning run may drop or leave freshly initialised
_HEAD_KEYS = ('head/kernel', 'head/bias')
# DeiT's distillation token and head (timm's names), whose position row follows the class token's
_DISTILL_TOKEN_KEY, _DISTILL_HEAD_KEYS = 'dist_token', ('head_dist/kernel', 'head_dist/bias')
_PRE_LOGITS_KEYS = ('pre_logits/kernel', 'pre_logits/bias')


def read_npz(path: str | pathlib.Path) -> dict[str, np.ndarray]:
  """Every array of an ``.npz`` file by key; one-line errors for a missing or non-npz file."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise MissingFileError(f'init_from: {path} does not exist (expected an .npz file or a workdir).')
  if not zipfile.is_zipfile(path):
    raise CheckpointError(f'init_from: {path} is not an .npz file (not a zip archive of arrays).')
  try:
    with np.load(path, allow_pickle=False) as archive:
      return {key: np.asarray(archive[key]) for key in archive.files}
  except (ValueError, OSError, zipfile.BadZipFile) as error:
    raise CheckpointError(f'init_from: {path} is not a readable .npz file ({error}).') from None


def image_tower_prefix(arrays: dict[str, np.ndarray]) -> str:
  """The key prefix of the image tower's parameters: ``'params/img/'``, ``'params/'`` or ``''``."""
  for prefix in _TOWER_PREFIXES:
    if f'{prefix}embedding/kernel' in arrays:
      return prefix
  raise CheckpointError(
    'init_from: the .npz holds no ViT image tower (no embedding/kernel, params/embedding/kernel '
    f'or params/img/embedding/kernel); its first keys: {sorted(arrays)[:5]}.'
  )


def detect_layout(arrays: dict[str, np.ndarray]) -> str:
  """``'official'`` or ``'big_vision'`` (under a ``params/`` prefix, or bare with big_vision's names)."""
  prefix = image_tower_prefix(arrays)
  if prefix or any(_BIG_VISION_NAMES.match(key) for key in arrays):
    return 'big_vision'
  return 'official'


def ignored_summary(arrays: dict[str, np.ndarray]) -> str | None:
  """One line counting the arrays outside the image tower by prefix (``None`` if there are none):
  ``ignored 5 arrays outside the image tower params/img/: params/txt/ 3, params/b 1, params/t 1``."""
  prefix = image_tower_prefix(arrays)
  ignored = collections.Counter(_group(key, prefix) for key in arrays if not key.startswith(prefix))
  if not ignored:
    return None
  counts = ', '.join(f'{group} {count}' for group, count in sorted(ignored.items()))
  return f'ignored {sum(ignored.values())} arrays outside the image tower {prefix}: {counts}'


def _group(key: str, prefix: str) -> str:
  """``key`` up to its first name that leaves ``prefix``: ``params/txt/a/b`` -> ``params/txt/``."""
  parts, tower = key.split('/'), prefix.split('/')[:-1]
  for index, part in enumerate(parts):
    if index >= len(tower) or part != tower[index]:
      return '/'.join(parts[: index + 1]) + ('/' if index + 1 < len(parts) else '')
  return key


def to_canonical(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The image tower's arrays with official names, the class-token position row folded into
  ``cls``, the table ``(N, D)``; arrays outside the tower are dropped (see ``ignored_summary``)."""
  layout, prefix = detect_layout(arrays), image_tower_prefix(arrays)
  arrays = {key[len(prefix) :]: value for key, value in arrays.items() if key.startswith(prefix)}
  if layout == 'big_vision':
    arrays = _big_vision_to_official_names(arrays)
  canonical = dict(arrays)
  if POSEMB_KEY in canonical:
    table = canonical[POSEMB_KEY]
    table = table.reshape(table.shape[-2:]) if table.ndim == 3 else table
    for token in ('cls', _DISTILL_TOKEN_KEY):
      if layout == 'official' and token in canonical:
        canonical[token] = canonical[token] + table[:1][None]
        table = table[1:]
    canonical[POSEMB_KEY] = table
  return canonical


def _big_vision_to_official_names(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The image tower's arrays (prefix removed) under the official names."""
  renamed = {}
  for key, value in arrays.items():
    if key == 'pos_embedding':
      renamed[POSEMB_KEY] = value
    elif key.startswith('Transformer/encoderblock/'):  # scanned: one leading axis over the layers
      rest = key[len('Transformer/encoderblock/') :]
      for layer, layer_value in enumerate(value):
        renamed[_official_block_key(layer, rest)] = layer_value
    elif key.startswith('Transformer/encoderblock_'):
      block, _, rest = key[len('Transformer/') :].partition('/')
      renamed[_official_block_key(int(block.rpartition('_')[2]), rest)] = value
    else:
      renamed[key] = value
  return renamed


def _official_block_key(layer: int, rest: str) -> str:
  module, _, tail = rest.partition('/')
  return f'Transformer/encoderblock_{layer}/{_BIG_VISION_BLOCK_NAMES.get(module, module)}/{tail}'


@dataclasses.dataclass(frozen=True)
class _Entry:
  """One of our parameters (or one part of it) and its canonical key, with the reshapes between the two.

  ``part`` (with ``axis``) says that the key holds ``ours[..., part, ...]`` (index ``part`` of
  ``axis``): our self-attention keeps query, key and value in one ``[D, 3, H, Dh]`` kernel where
  the published layouts keep three.
  """

  path: tuple
  key: str
  official_shape: tuple[int, ...] | None = None  # None: the same shape as ours
  part: int | None = None
  axis: int = 0

  def to_ours(self, value: np.ndarray, ours: np.ndarray) -> np.ndarray:
    if self.part is None:
      return value.reshape(ours.shape)
    full = np.array(ours)
    index = (slice(None),) * self.axis + (self.part,)
    full[index] = value.reshape(full[index].shape)
    return full

  def to_official(self, value: np.ndarray) -> np.ndarray:
    if self.part is not None:
      value = np.take(value, self.part, axis=self.axis)
    return value.reshape(self.official_shape or value.shape)


def _attention_entries(path: tuple, prefix: str, width: int, heads: int, cross: bool) -> list[_Entry]:
  """Official ``query``/``key``/``value``/``out`` of one attention layer <-> our ``qkv`` (self-attention)
  or ``query`` and ``kv`` (cross-attention), and ``out``."""
  head_dim = width // heads
  kernel_shape, bias_shape = (width, heads, head_dim), (heads, head_dim)
  if cross:
    packed = {'query': (('query',), None), 'key': (('kv',), 0), 'value': (('kv',), 1)}
  else:
    packed = {name: (('qkv',), part) for part, name in enumerate(('query', 'key', 'value'))}
  entries = []
  for name, ((layer,), part) in packed.items():
    entries.append(_Entry((*path, layer, 'kernel'), f'{prefix}/{name}/kernel', kernel_shape, part, 1))
    entries.append(_Entry((*path, layer, 'bias'), f'{prefix}/{name}/bias', bias_shape, part, 0))
  entries.append(_Entry((*path, 'out', 'kernel'), f'{prefix}/out/kernel', (heads, head_dim, width)))
  entries.append(_Entry((*path, 'out', 'bias'), f'{prefix}/out/bias'))
  return entries


def _norm_and_mlp_entries(path: tuple, key: str) -> list[_Entry]:
  return [_Entry((*path, 'scale'), f'{key}/scale'), _Entry((*path, 'bias'), f'{key}/bias')]


def _dense_entries(path: tuple, key: str) -> list[_Entry]:
  return [_Entry((*path, 'kernel'), f'{key}/kernel'), _Entry((*path, 'bias'), f'{key}/bias')]


def model_entries(model) -> list[_Entry]:
  """Every parameter of ``model`` (a ``VisionTransformer``) with its canonical key."""
  width = model.patch_embedding.kernel.shape[-1]
  heads = layer_of(model.encoder.blocks, 0).attention.num_heads
  entries = [_Entry(('patch_embedding', 'kernel'), 'embedding/kernel')]
  if model.patch_embedding.bias is not None:
    entries.append(_Entry(('patch_embedding', 'bias'), 'embedding/bias'))
  if model.pool == 'cls':
    entries.append(_Entry(('class_token',), 'cls'))
  if model.register_tokens is not None:
    entries.append(_Entry(('register_tokens',), 'reg'))
  if model.distill_token is not None:
    entries.append(_Entry(('distill_token',), _DISTILL_TOKEN_KEY))
  if model.encoder.positional.kind == 'learn1d' and model.encoder.positional.injection == 'stem':
    entries.append(_Entry(('encoder', 'positional', 'tables', 0, 'table'), POSEMB_KEY))
  for layer in range(model.encoder.depth):
    ours, theirs = ('encoder', 'blocks', layer), f'Transformer/encoderblock_{layer}'
    entries += _norm_and_mlp_entries((*ours, 'norm1'), f'{theirs}/LayerNorm_0')
    entries += _attention_entries(
      (*ours, 'attention'), f'{theirs}/MultiHeadDotProductAttention_1', width, heads, cross=False
    )
    entries += _norm_and_mlp_entries((*ours, 'norm2'), f'{theirs}/LayerNorm_2')
    entries += _dense_entries((*ours, 'mlp', 'fc1'), f'{theirs}/MlpBlock_3/Dense_0')
    entries += _dense_entries((*ours, 'mlp', 'fc2'), f'{theirs}/MlpBlock_3/Dense_1')
    if layer_of(model.encoder.blocks, 0).ls1 is not None:
      entries.append(_Entry((*ours, 'ls1'), f'{theirs}/LayerScale_0/scale'))
      entries.append(_Entry((*ours, 'ls2'), f'{theirs}/LayerScale_1/scale'))
  if model.encoder.norm_pre is not None:
    entries += _norm_and_mlp_entries(('encoder', 'norm_pre'), 'Transformer/norm_pre')
  if model.encoder.final_norm:
    entries += _norm_and_mlp_entries(('encoder', 'norm'), 'Transformer/encoder_norm')
  if model.pool == 'map':
    entries.append(_Entry(('pooling', 'probe'), 'MAPHead_0/probe'))
    entries += _attention_entries(
      ('pooling', 'attention'), 'MAPHead_0/MultiHeadDotProductAttention_0', width, heads, cross=True
    )
    entries += _norm_and_mlp_entries(('pooling', 'norm'), 'MAPHead_0/LayerNorm_0')
    entries += _dense_entries(('pooling', 'mlp', 'fc1'), 'MAPHead_0/MlpBlock_0/Dense_0')
    entries += _dense_entries(('pooling', 'mlp', 'fc2'), 'MAPHead_0/MlpBlock_0/Dense_1')
  if model.fc_norm is not None:
    entries += _norm_and_mlp_entries(('fc_norm',), 'fc_norm')
  if model.pre_logits is not None:
    entries += _dense_entries(('pre_logits',), 'pre_logits')
  entries += _dense_entries(('head',), 'head')
  if model.distill_head is not None:
    entries += _dense_entries(('distill_head',), 'head_dist')
  return entries


def _model_params(model) -> dict[tuple, np.ndarray]:
  """Our parameters by path, a scanned encoder's unstacked into layers (as the published layouts number them)."""
  params = unstack_blocks(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
  return {path: np.asarray(value) for path, value in traverse_util.flatten_dict(params).items()}


def _check_every_param_mapped(model, entries: list[_Entry]) -> None:
  unmapped = sorted(set(_model_params(model)) - {entry.path for entry in entries})
  if unmapped:
    names = ', '.join('.'.join(map(str, path)) for path in unmapped[:4])
    raise CheckpointError(
      f'The ViT .npz layouts have no place for these parameters of this model: {names} '
      '(only the learn1d or sincos2d positional encodings at the stem exist there).'
    )


def model_to_official(model) -> dict[str, np.ndarray]:
  """Our parameters in the official layout (a zero class-token row in the position table)."""
  entries = model_entries(model)
  _check_every_param_mapped(model, entries)
  params = _model_params(model)
  arrays = {entry.key: entry.to_official(params[entry.path]) for entry in entries}
  if POSEMB_KEY in arrays:
    table = arrays[POSEMB_KEY]
    # A zero row for the class and distillation tokens (the stem adds no position to them); register
    # tokens have no row in this layout.
    rows = (model.pool == 'cls') + (model.distill_token is not None)
    if rows:
      table = np.concatenate([np.zeros_like(table[:1])] * rows + [table])
    arrays[POSEMB_KEY] = table[None]
  return arrays


def write_official_npz(model, path: str | pathlib.Path) -> None:
  np.savez(path, **model_to_official(model))


@dataclasses.dataclass
class LoadReport:
  loaded: list[str] = dataclasses.field(default_factory=list)
  skipped: list[str] = dataclasses.field(default_factory=list)  # with the reason
  adapted: list[str] = dataclasses.field(default_factory=list)

  def summary(self) -> str:
    lines = [f'loaded {len(self.loaded)} arrays']
    lines += [f'adapted {item}' for item in self.adapted]
    lines += [f'skipped {item}' for item in self.skipped]
    return '; '.join(lines)


def canonical_to_model(
  model,
  canonical: dict[str, np.ndarray],
  *,
  strict: bool = True,
  init_head: bool = True,
  resample_method: str = 'bilinear',
) -> LoadReport:
  """Writes ``canonical`` (from ``to_canonical``) into ``model`` in place.

  The head is decided whole: it is loaded only when ``init_head``, both its arrays fit, and it
  reads what it was trained on (not a ``pre_logits`` layer the model drops); otherwise kernel and
  bias are both zeros (the paper's fine-tuning). ``pre_logits`` arrays the model has no place for
  are dropped. A learned position table of another grid is resampled (``resample_method``); a
  patch kernel of another patch size is resized (``resize_patch_kernel``). Any other missing,
  left-over or wrong-shape key raises ``CheckpointError`` naming the key and both shapes, unless
  ``strict=False``, which skips it and lists it in the report.
  """
  entries = model_entries(model)
  _check_every_param_mapped(model, entries)
  params = _model_params(model)
  report, problems = LoadReport(), []
  why_new_head = _why_new_head(model, canonical, params, init_head)
  if why_new_head:
    report.adapted.append(f'head: zero-initialised ({why_new_head})')
  for entry in entries:
    ours = params[entry.path]
    if entry.key in (_DISTILL_TOKEN_KEY, *_DISTILL_HEAD_KEYS) and entry.key not in canonical:
      if entry.key != _DISTILL_TOKEN_KEY:  # a fresh distillation head starts at zero, as a new head
        params[entry.path] = np.zeros_like(ours)
      report.adapted.append(f'{entry.key}: not in the checkpoint, freshly initialised')
      continue
    if entry.key in _HEAD_KEYS or (entry.key in _DISTILL_HEAD_KEYS and why_new_head):
      if why_new_head:
        params[entry.path] = np.zeros_like(ours)
      else:
        params[entry.path] = canonical[entry.key].astype(ours.dtype)
        report.loaded.append(entry.key)
      continue
    if entry.key not in canonical:
      problems.append(f'checkpoint has no {entry.key!r}; the model needs {_official_shape(entry, ours)}')
      continue
    source = canonical[entry.key]
    if entry.key == POSEMB_KEY and source.shape != ours.shape:
      source = _resampled_table(source, model.grid, resample_method, report)
    if entry.key == 'embedding/kernel' and source.shape[2:] == ours.shape[2:] and source.shape != ours.shape:
      report.adapted.append(
        f'{entry.key}: patch {source.shape[:2]} -> {ours.shape[:2]} (pseudo-inverse resize)'
      )
      source = resize_patch_kernel(source, ours.shape[:2])
    if entry.key == 'embedding/kernel' and source.shape != ours.shape:
      problems.append(
        f'checkpoint {entry.key!r} has shape {source.shape}; the model needs {ours.shape} '
        '(patch height, patch width, channels, width)'
      )
      continue
    expected = _official_shape(entry, ours) if entry.key != POSEMB_KEY else ours.shape
    if source.shape != expected:
      problems.append(f'checkpoint {entry.key!r} has shape {source.shape}; the model needs {expected}')
      continue
    params[entry.path] = entry.to_ours(source, ours).astype(ours.dtype)
    report.loaded.append(entry.key)
  known = {entry.key for entry in entries}
  for key in sorted(set(canonical) - known):
    if key in _PRE_LOGITS_KEYS or key in _HEAD_KEYS or key in (_DISTILL_TOKEN_KEY, *_DISTILL_HEAD_KEYS):
      report.skipped.append(f'{key} {canonical[key].shape} (dropped: the model has none)')
    else:
      problems.append(f'checkpoint key {key!r} {canonical[key].shape} has no place in the model')
  if problems and strict:
    more = f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''
    raise CheckpointError(f'init_from: {problems[0]}{more}.')
  report.skipped += problems
  state = nnx.state(model, nnx.Param)
  loaded = traverse_util.unflatten_dict({p: jnp.asarray(v) for p, v in params.items()})
  nnx.replace_by_pure_dict(state, stack_blocks(loaded) if model.encoder.scan_layers else loaded)
  nnx.update(model, state)
  return report


def _why_new_head(model, canonical: dict[str, np.ndarray], params: dict, init_head: bool) -> str | None:
  """Why the checkpoint's head cannot be loaded whole (``None``: it can)."""
  if not init_head:
    return 'init_head is False'
  for key in _HEAD_KEYS:
    ours = params[('head', key.partition('/')[2])]
    if key not in canonical:
      return f'the checkpoint has no {key}'
    if canonical[key].shape != ours.shape:
      return f"the checkpoint's {key} is {canonical[key].shape}, the model's {ours.shape}"
  if _PRE_LOGITS_KEYS[0] in canonical and model.pre_logits is None:
    return "the checkpoint's head reads the pre_logits layer, which the model has not"
  return None


def resize_patch_kernel(kernel: np.ndarray, new_patch: tuple[int, int]) -> np.ndarray:
  """FlexiViT's pseudo-inverse resize of a patch-embedding kernel ``(P, P, C, D)`` to another patch size.

  With ``B`` the bilinear resize of a patch as a matrix (``resize(x) = B x``), the new kernel is
  ``pinv(B^T) w``: the one whose response to a resized patch is closest to the old kernel's
  response to the original patch (exact when upsampling).
  """
  old_patch = kernel.shape[:2]
  basis = np.eye(old_patch[0] * old_patch[1], dtype=np.float32).reshape(-1, *old_patch)
  resized = jax.vmap(lambda x: jax.image.resize(x, new_patch, method='bilinear', antialias=False))(basis)
  resize_matrix = np.asarray(resized, np.float64).reshape(len(basis), -1).T  # [new pixels, old pixels]
  flat = kernel.reshape(len(basis), -1).astype(np.float64)
  return (np.linalg.pinv(resize_matrix.T) @ flat).reshape(*new_patch, *kernel.shape[2:]).astype(kernel.dtype)


def _official_shape(entry: _Entry, ours: np.ndarray) -> tuple[int, ...]:
  return tuple(entry.official_shape or ours.shape)


def _resampled_table(table: np.ndarray, grid: tuple[int, int], method: str, report: LoadReport) -> np.ndarray:
  side = math.isqrt(table.shape[0])
  if side * side != table.shape[0]:
    raise CheckpointError(
      f'init_from: {POSEMB_KEY!r} has {table.shape[0]} rows, not a square grid; cannot resample it '
      f'to the {grid[0]}x{grid[1]} grid.'
    )
  report.adapted.append(f'{POSEMB_KEY}: resampled {side}x{side} -> {grid[0]}x{grid[1]} ({method})')
  return np.asarray(resample_grid_table(jnp.asarray(table), (side, side), grid, 0, method))
