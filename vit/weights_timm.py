"""timm's ViT names and architectures <-> our canonical layout (``vit.checkpoint_npz``).

timm keeps PyTorch's layouts: a ``Linear`` weight is ``[out, in]`` (our kernels are ``[in, out]``), the
patch embedding a ``Conv2d`` weight ``[D, C, P, P]``, self-attention one ``qkv`` weight ``[3D, D]``
(query, key, value stacked in that order, heads inside each), the attention-pooling head (SigLIP's
``attn_pool``) a ``q`` ``[D, D]`` and a ``kv`` ``[2D, D]``. The position table ``pos_embed``
``[1, L, D]`` has rows for the prefix tokens (class token, then DeiT's distillation token
``dist_token`` or register tokens) unless the architecture has ``no_embed_class``; those rows are
folded into the tokens, which is exact (the stem only adds them to those constant tokens), and
written back as zero rows. A distilled DeiT's second head ``head_dist`` reads the distillation token;
its logits are the mean of the two heads' (timm's ``VisionTransformerDistilled`` in evaluation), as
our ViT's ``distill_token`` computes.

What the arrays cannot say (heads, activation, LayerNorm epsilon, pooling) comes from the
architecture's name: ``ARCHITECTURES`` holds the families, each a pattern over timm's names with
the options that timm's ``vision_transformer.py`` and ``deit.py`` give them.
"""

import dataclasses
import re

import numpy as np

from trainer.errors import CheckpointError
from vit.checkpoint_npz import POSEMB_KEY

# timm size name -> heads (and width, to check the arrays against)
SIZES = {
  'tiny': (192, 3),
  'small': (384, 6),
  'medium': (512, 8),
  'base': (768, 12),
  'large': (1024, 16),
  'huge': (1280, 16),
  'giant': (1408, 16),
  'gigantic': (1664, 16),
  'so400m': (1152, 16),
}
# SigLIP architectures whose MLP uses the tanh GELU (timm's act_layer='gelu_tanh'); the others use erf
_SIGLIP_TANH = re.compile(
  r'^vit_(base_patch32_siglip(_gap)?_256|large_patch16_siglip(_gap)?_512|so400m_patch16_siglip(_gap)?_\d+)$'
)


@dataclasses.dataclass(frozen=True)
class Family:
  """One family of timm ViT architectures: a name pattern (groups ``size``, ``patch``) and its options."""

  name: str
  pattern: str
  options: dict
  no_embed_class: bool = False
  image_size: int | None = None  # when the name carries none


ARCHITECTURES = (
  Family(
    'AugReg / original ViT',
    r'vit_(?P<size>tiny|small|base|large|huge)_patch(?P<patch>8|14|16|32)_(?P<res>224|384)',
    {},
  ),
  Family('DeiT', r'deit_(?P<size>tiny|small|base)_patch(?P<patch>16)_(?P<res>224|384)', {}),
  Family(
    'DeiT, distilled',
    r'deit_(?P<size>tiny|small|base)_distilled_patch(?P<patch>16)_(?P<res>224|384)',
    dict(distill_token=True),
  ),
  Family(
    'DeiT III',
    r'deit3_(?P<size>small|medium|base|large|huge)_patch(?P<patch>14|16)_(?P<res>224|384)',
    dict(layer_scale=1e-6),
    no_embed_class=True,
  ),
  Family(
    'DINOv2',
    r'vit_(?P<size>small|base|large)_patch(?P<patch>14)_dinov2',
    dict(layer_scale=1e-5),
    image_size=518,
  ),
  Family(
    'DINOv2 with registers',
    r'vit_(?P<size>small|base|large)_patch(?P<patch>14)_reg4_dinov2',
    dict(layer_scale=1e-5, reg_tokens=4),
    no_embed_class=True,
    image_size=518,
  ),
  Family(
    'SigLIP',
    r'vit_(?P<size>base|large|so400m)_patch(?P<patch>14|16|32)_siglip_(?P<res>\d+)',
    dict(pool='map'),
  ),
  Family(
    'SigLIP, average pooling',
    r'vit_(?P<size>base|large|so400m)_patch(?P<patch>14|16|32)_siglip_gap_(?P<res>\d+)',
    dict(pool='gap'),
  ),
  Family(
    'CLIP',
    r'vit_(?P<size>base|large|huge)_patch(?P<patch>14|16|32)_clip_(?P<res>\d+)',
    dict(norm_pre=True, patch_bias=False, layernorm_epsilon=1e-5),
  ),
  Family(
    'CLIP, QuickGELU',
    r'vit_(?P<size>base|large|huge)_patch(?P<patch>14|16|32)_clip_quickgelu_(?P<res>\d+)',
    dict(norm_pre=True, patch_bias=False, layernorm_epsilon=1e-5, activation='quick_gelu'),
  ),
)


@dataclasses.dataclass(frozen=True)
class Architecture:
  """A timm architecture name resolved: our model options, the image size and the table's layout."""

  name: str
  family: str
  options: dict  # fields of our model section (width and heads; the rest from the arrays)
  image_size: int
  no_embed_class: bool


def known_architectures() -> str:
  return '; '.join(
    f'{family.name}: {family.pattern.replace("(?P<size>", "(").replace("(?P<patch>", "(").replace("(?P<res>", "(")}'
    for family in ARCHITECTURES
  )


def resolve_architecture(name: str) -> Architecture:
  """A timm architecture name (a ``.tag`` after it is dropped) -> ``Architecture``; one line naming the
  known families for any other name."""
  base = name.partition('.')[0]
  for family in ARCHITECTURES:
    match = re.fullmatch(family.pattern, base)
    if match:
      width, heads = SIZES[match['size']]
      options = dict(
        pool='cls',
        activation='gelu_exact',
        layernorm_epsilon=1e-6,
        width=width,
        num_heads=heads,
        patch_size=int(match['patch']),
        distill_token=False,
      )
      options.update(family.options)
      if family.name.startswith('SigLIP') and _SIGLIP_TANH.match(base):
        options['activation'] = 'gelu'
      resolution = family.image_size or int(match['res'])
      return Architecture(base, family.name, options, resolution, family.no_embed_class)
  raise CheckpointError(
    f'init_from: unknown timm architecture {name!r}; the known ones: {known_architectures()}.'
  )


# timm name -> canonical name, for the arrays that are renamed and transposed as a whole
def _linear(theirs: str, ours: str) -> dict:
  return {f'{theirs}.weight': (f'{ours}/kernel', 'linear'), f'{theirs}.bias': (f'{ours}/bias', None)}


def _norm(theirs: str, ours: str) -> dict:
  return {f'{theirs}.weight': (f'{ours}/scale', None), f'{theirs}.bias': (f'{ours}/bias', None)}


def _block_names(layer: int) -> dict:
  block, ours = f'blocks.{layer}', f'Transformer/encoderblock_{layer}'
  names = {
    **_norm(f'{block}.norm1', f'{ours}/LayerNorm_0'),
    **_norm(f'{block}.norm2', f'{ours}/LayerNorm_2'),
    **_linear(f'{block}.mlp.fc1', f'{ours}/MlpBlock_3/Dense_0'),
    **_linear(f'{block}.mlp.fc2', f'{ours}/MlpBlock_3/Dense_1'),
    f'{block}.ls1.gamma': (f'{ours}/LayerScale_0/scale', None),
    f'{block}.ls2.gamma': (f'{ours}/LayerScale_1/scale', None),
  }
  return names


_FIXED_NAMES = {
  **_norm('norm_pre', 'Transformer/norm_pre'),
  **_norm('norm', 'Transformer/encoder_norm'),
  **_norm('fc_norm', 'fc_norm'),
  **_linear('head', 'head'),
  **_linear('head_dist', 'head_dist'),
  **_norm('attn_pool.norm', 'MAPHead_0/LayerNorm_0'),
  **_linear('attn_pool.mlp.fc1', 'MAPHead_0/MlpBlock_0/Dense_0'),
  **_linear('attn_pool.mlp.fc2', 'MAPHead_0/MlpBlock_0/Dense_1'),
  'attn_pool.latent': ('MAPHead_0/probe', None),
}
_MAP_ATTENTION = 'MAPHead_0/MultiHeadDotProductAttention_0'
_REFUSED = {
  'attn_pool.q_norm.weight': 'an attention-pool head with query/key norms is not supported',
  'blocks.0.attn.q_norm.weight': 'attention with query/key norms (qk_norm) is not supported',
  'blocks.0.mlp.fc1_g.weight': 'a SwiGLU MLP is not supported',
  'blocks.0.mlp.w12.weight': 'a SwiGLU MLP is not supported',
}


def num_layers(arrays: dict[str, np.ndarray]) -> int:
  return len({int(key.split('.')[1]) for key in arrays if key.startswith('blocks.')})


def to_canonical(
  arrays: dict[str, np.ndarray], *, num_heads: int, no_embed_class: bool, grid: tuple[int, int]
) -> dict[str, np.ndarray]:
  """timm's arrays -> canonical arrays; one-line ``CheckpointError`` for a name with no place."""
  for key, why in _REFUSED.items():
    if key in arrays:
      raise CheckpointError(f'init_from: {why} ({key!r} in the file).')
  width = arrays['patch_embed.proj.weight'].shape[0]
  head_dim = width // num_heads
  names = dict(_FIXED_NAMES)
  for layer in range(num_layers(arrays)):
    names.update(_block_names(layer))
  canonical, left = {}, []
  for key, value in arrays.items():
    value = np.asarray(value)
    if key in names:
      ours, how = names[key]
      canonical[ours] = value.T if how == 'linear' else value
    elif key == 'patch_embed.proj.weight':
      canonical['embedding/kernel'] = value.transpose(2, 3, 1, 0)
    elif key == 'patch_embed.proj.bias':
      canonical['embedding/bias'] = value
    elif key in ('cls_token', 'dist_token', 'reg_token', 'pos_embed'):
      continue
    elif re.fullmatch(r'blocks\.\d+\.attn\.(qkv|proj)\.(weight|bias)', key):
      canonical.update(_attention(key, value, width, num_heads, head_dim))
    elif key.startswith('attn_pool.') and key.split('.')[1] in ('q', 'kv', 'proj'):
      canonical.update(_pool_attention(key, value, num_heads, head_dim))
    else:
      left.append(f'{key} {value.shape}')
  if left:
    more = f' (and {len(left) - 1} more)' if len(left) > 1 else ''
    raise CheckpointError(f'init_from: timm array {left[0]} has no place in our ViT{more}.')
  canonical.update(_prefix_and_table(arrays, no_embed_class, grid))
  return canonical


def _attention(key: str, value: np.ndarray, width: int, heads: int, head_dim: int) -> dict:
  layer, part, kind = key.split('.')[1], key.split('.')[3], key.split('.')[4]
  prefix = f'Transformer/encoderblock_{layer}/MultiHeadDotProductAttention_1'
  if part == 'proj':
    if kind == 'weight':
      return {f'{prefix}/out/kernel': value.T.reshape(heads, head_dim, width)}
    return {f'{prefix}/out/bias': value}
  result = {}
  for index, name in enumerate(('query', 'key', 'value')):
    piece = value[index * width : (index + 1) * width]
    if kind == 'weight':
      result[f'{prefix}/{name}/kernel'] = piece.T.reshape(-1, heads, head_dim)
    else:
      result[f'{prefix}/{name}/bias'] = piece.reshape(heads, head_dim)
  return result


def _pool_attention(key: str, value: np.ndarray, heads: int, head_dim: int) -> dict:
  part, kind = key.split('.')[1], key.split('.')[2]
  if part == 'proj':
    name = 'out/kernel' if kind == 'weight' else 'out/bias'
    shaped = value.T.reshape(heads, head_dim, -1) if kind == 'weight' else value
    return {f'{_MAP_ATTENTION}/{name}': shaped}
  width = heads * head_dim
  pieces = ('query',) if part == 'q' else ('key', 'value')
  result = {}
  for index, name in enumerate(pieces):
    piece = value[index * width : (index + 1) * width]
    if kind == 'weight':
      result[f'{_MAP_ATTENTION}/{name}/kernel'] = piece.T.reshape(-1, heads, head_dim)
    else:
      result[f'{_MAP_ATTENTION}/{name}/bias'] = piece.reshape(heads, head_dim)
  return result


def _prefix_and_table(arrays: dict[str, np.ndarray], no_embed_class: bool, grid: tuple[int, int]) -> dict:
  """``cls``, ``dist_token``, ``reg`` and the patch rows of ``pos_embed``, prefix rows folded into the
  tokens (in timm's order of the tokens and their rows: class, distillation, registers)."""
  result, prefix = {}, []
  for theirs, ours in (('cls_token', 'cls'), ('dist_token', 'dist_token'), ('reg_token', 'reg')):
    if theirs in arrays:
      prefix.append((ours, np.asarray(arrays[theirs])))
  table = np.asarray(arrays['pos_embed'])[0] if 'pos_embed' in arrays else None
  offset = 0
  for name, tokens in prefix:
    count = tokens.shape[1]
    if table is not None and not no_embed_class:
      tokens = tokens + table[offset : offset + count][None]
    result[name] = tokens
    offset += count
  if table is not None:
    rows = table if no_embed_class else table[offset:]
    if rows.shape[0] != grid[0] * grid[1]:
      raise CheckpointError(
        f'init_from: timm pos_embed has {table.shape[0]} rows; a {grid[0]}x{grid[1]} grid'
        f'{"" if no_embed_class else f" and {offset} prefix tokens"} needs '
        f'{grid[0] * grid[1] + (0 if no_embed_class else offset)} (config.json and arrays disagree).'
      )
    result[POSEMB_KEY] = rows
  return result


def from_canonical(canonical: dict[str, np.ndarray], *, no_embed_class: bool) -> dict[str, np.ndarray]:
  """Canonical arrays -> timm's names and layouts (float32; the prefix rows of ``pos_embed`` zero)."""
  inverse = dict(_FIXED_NAMES)
  layers = {int(m.group(1)) for key in canonical if (m := re.match(r'Transformer/encoderblock_(\d+)/', key))}
  for layer in layers:
    inverse.update(_block_names(layer))
  by_canonical = {ours: (theirs, how) for theirs, (ours, how) in inverse.items()}
  arrays = {}
  for key, value in canonical.items():
    value = np.asarray(value, np.float32)
    if key in by_canonical:
      theirs, how = by_canonical[key]
      arrays[theirs] = value.T if how == 'linear' else value
    elif key == 'embedding/kernel':
      arrays['patch_embed.proj.weight'] = value.transpose(3, 2, 0, 1)
    elif key == 'embedding/bias':
      arrays['patch_embed.proj.bias'] = value
    elif key == 'cls':
      arrays['cls_token'] = value
    elif key == 'reg':
      arrays['reg_token'] = value
    elif key == 'dist_token':
      arrays['dist_token'] = value
    elif key == POSEMB_KEY:
      continue
    elif '/MultiHeadDotProductAttention_' in key:
      continue
    else:
      raise CheckpointError(f'export: canonical array {key!r} has no timm name.')
  _attention_to_timm(canonical, arrays)
  if POSEMB_KEY in canonical:
    table = np.asarray(canonical[POSEMB_KEY], np.float32)
    if not no_embed_class:
      names = ('cls_token', 'dist_token', 'reg_token')
      prefix = sum(arrays[name].shape[1] for name in names if name in arrays)
      table = np.concatenate([np.zeros((prefix, table.shape[1]), np.float32), table])
    arrays['pos_embed'] = table[None]
  return {key: np.ascontiguousarray(value) for key, value in arrays.items()}


def _attention_to_timm(canonical: dict, arrays: dict) -> None:
  """Every attention layer's query/key/value/out (``[D, H, Dh]`` ...) -> timm's ``qkv`` / ``q``, ``kv`` / ``proj``."""
  prefixes = {key.rsplit('/', 2)[0] for key in canonical if '/MultiHeadDotProductAttention_' in key}
  for prefix in prefixes:

    def weight(name, prefix=prefix):
      kernel = np.asarray(canonical[f'{prefix}/{name}/kernel'], np.float32)
      return kernel.reshape(kernel.shape[0], -1).T

    def bias(name, prefix=prefix):
      return np.asarray(canonical[f'{prefix}/{name}/bias'], np.float32).reshape(-1)

    out = np.asarray(canonical[f'{prefix}/out/kernel'], np.float32)
    out_weight, out_bias = (
      out.reshape(-1, out.shape[-1]).T,
      np.asarray(canonical[f'{prefix}/out/bias'], np.float32),
    )
    if prefix == _MAP_ATTENTION:
      arrays['attn_pool.q.weight'], arrays['attn_pool.q.bias'] = weight('query'), bias('query')
      arrays['attn_pool.kv.weight'] = np.concatenate([weight('key'), weight('value')])
      arrays['attn_pool.kv.bias'] = np.concatenate([bias('key'), bias('value')])
      arrays['attn_pool.proj.weight'], arrays['attn_pool.proj.bias'] = out_weight, out_bias
    else:
      layer = int(re.match(r'Transformer/encoderblock_(\d+)/', prefix).group(1))
      names = ('query', 'key', 'value')
      arrays[f'blocks.{layer}.attn.qkv.weight'] = np.concatenate([weight(name) for name in names])
      arrays[f'blocks.{layer}.attn.qkv.bias'] = np.concatenate([bias(name) for name in names])
      arrays[f'blocks.{layer}.attn.proj.weight'], arrays[f'blocks.{layer}.attn.proj.bias'] = (
        out_weight,
        out_bias,
      )
