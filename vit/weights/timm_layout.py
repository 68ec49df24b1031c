"""timm's ViT names and architectures <-> our canonical layout (``vit.weights.checkpoint_npz``).

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

What the arrays cannot say (heads, activation, LayerNorm epsilon, pooling, whether the positions
cover the prefix tokens) comes from timm's ``model_args``, as ``timm.create_model`` builds the model:
``VisionTransformer``'s defaults, then the ``model_args`` of the architecture's own function in
timm's source (``vit.weights.timm_architectures``), then the folder's ``config.json`` ``model_args``
(``model_options``). A timm feature our ViT has no place for (RoPE, SwiGLU, RMSNorm, qk-norm,
parallel blocks, ...) is refused in one line naming it.
"""

import dataclasses
import re

import numpy as np

from trainer.errors import CheckpointError
from vit.weights import timm_architectures
from vit.weights.checkpoint_npz import POSEMB_KEY

# timm.models.vision_transformer.VisionTransformer's defaults for what the arrays cannot say
_DEFAULTS = dict(
  global_pool='token', class_token=True, reg_tokens=0, no_embed_class=False, pre_norm=False,
  final_norm=True, fc_norm=None, init_values=None, act_layer=None, norm_layer=None, qkv_bias=True,
  mlp_ratio=4.0, pos_embed='learn',
)  # fmt: skip
_ACTIVATIONS = {None: 'gelu_exact', 'gelu': 'gelu_exact', 'gelu_tanh': 'gelu', 'quick_gelu': 'quick_gelu'}
_POOLS = {'token': 'cls', 'avg': 'gap', 'map': 'map'}
# read and checked; or, when true, one with no place in our ViT
_READ_ARGS = {
  'img_size', 'patch_size', 'in_chans', 'num_classes', 'embed_dim', 'depth', 'num_heads',
  'dynamic_img_size', 'dynamic_img_pad', 'drop_rate', 'pos_drop_rate', 'patch_drop_rate',
  'proj_drop_rate', 'attn_drop_rate', 'drop_path_rate', 'weight_init', 'fix_init', 'proj_bias',
  *_DEFAULTS,
}  # fmt: skip
_FLAGS_REFUSED = {
  'qk_norm': 'query/key norms (qk_norm)',
  'scale_attn_norm': 'a norm inside attention (scale_attn_norm)',
  'scale_mlp_norm': 'a norm inside the MLP (scale_mlp_norm)',
  'pool_include_prefix': 'pooling over the prefix tokens (pool_include_prefix)',
}

# the timm models of other files than vision_transformer.py and deit.py, by a word of their names
_NAMED_FEATURES = {
  'rope': 'rotary position embeddings (RoPE)',
  'eva': "EVA's blocks (SwiGLU MLPs, RoPE)",
  'eva02': "EVA's blocks (SwiGLU MLPs, RoPE)",
  'naflexvit': 'NaFlex variable-resolution patches',
  'swiglu': 'a SwiGLU MLP',
}


@dataclasses.dataclass(frozen=True)
class Architecture:
  """A timm model resolved: our model options, its image size, the position table's layout, and whether
  its class token is only attended to (pooled ``avg`` or ``map``: our ViT holds it as a register)."""

  name: str
  options: dict  # fields of our model section
  image_size: tuple[int, int] | None  # from img_size; None: the pretrained config's input size
  no_embed_class: bool
  class_token_as_register: bool = False


def model_args(name: str, folder_args: dict | None = None) -> dict:
  """What ``timm.create_model(name, **folder_args)`` passes to ``VisionTransformer``: its defaults, the
  name's own ``model_args`` (a ``.tag`` dropped), then ``folder_args``; one line for an unknown name
  whose ``folder_args`` do not give the heads."""
  known = timm_architectures.architecture(name)
  folder_args = dict(folder_args or {})
  for token, feature in _NAMED_FEATURES.items():
    if known is None and token in name.partition('.')[0].split('_'):
      raise CheckpointError(f'init_from: timm {name!r} has {feature}, which our ViT does not have.')
  if known is None and 'num_heads' not in folder_args:
    raise CheckpointError(
      f"init_from: unknown timm architecture {name!r} (not a ViT of timm's vision_transformer.py or "
      'deit.py) with no model_args giving its num_heads.'
    )
  return {**_DEFAULTS, **(known['model_args'] if known else {}), **folder_args}


def is_distilled(name: str) -> bool:
  """timm builds ``name`` as ``VisionTransformerDistilled`` (the distilled DeiTs)."""
  known = timm_architectures.architecture(name)
  return bool(known and known['distilled'])


def resolve(name: str, folder_args: dict | None = None) -> Architecture:
  """The model timm builds for ``name`` and ``folder_args`` (``model_args``), as our options; a
  ``CheckpointError`` of one line naming a feature we have not."""
  args = model_args(name, folder_args)
  what = f'timm {name!r}'
  missing = [
    f'{key}={value["unsupported"]}'
    for key, value in args.items()
    if isinstance(value, dict) and 'unsupported' in value
  ]
  missing += [feature for key, feature in _FLAGS_REFUSED.items() if args.get(key)]
  missing += [
    f'model_args {key}={value!r}'
    for key, value in args.items()
    if key not in _READ_ARGS | set(_FLAGS_REFUSED)
    and not (isinstance(value, dict) and 'unsupported' in value)
  ]
  if missing:
    raise CheckpointError(f'init_from: {what} has {", ".join(missing)}, which our ViT does not have.')
  if args['pos_embed'] != 'learn':
    raise CheckpointError(
      f'init_from: {what} has pos_embed={args["pos_embed"]!r}; only a learned table (learn) is read.'
    )
  if args['act_layer'] not in _ACTIVATIONS:
    raise CheckpointError(
      f'init_from: {what} has act_layer={args["act_layer"]!r}; the ones read: gelu, gelu_tanh, quick_gelu.'
    )
  norm = args['norm_layer']
  if isinstance(norm, dict):
    epsilon = norm['norm_eps']
  elif norm in (None, 'layernorm', 'layer_norm'):
    epsilon = 1e-6  # timm.layers.LayerNorm
  else:
    raise CheckpointError(f'init_from: {what} has norm_layer={norm!r}; only LayerNorm is read.')
  pool = args['global_pool']
  if pool not in _POOLS:
    raise CheckpointError(f'init_from: {what} has global_pool={pool!r}; the ones read: {", ".join(_POOLS)}.')
  fc_norm = pool == 'avg' if args['fc_norm'] is None else bool(args['fc_norm'])
  if not args['final_norm']:
    raise CheckpointError(f'init_from: {what} has final_norm=False (no final norm), which our ViT has not.')
  if pool == 'token' and not args['class_token']:
    raise CheckpointError(f'init_from: {what} pools the class token but has none (class_token=False).')
  distilled = is_distilled(name)
  options = dict(
    variant='custom',
    width=int(args.get('embed_dim', 768)),
    num_heads=int(args.get('num_heads', 12)),
    patch_size=_pair(args.get('patch_size', 16))[0],
    pool=_POOLS[pool],
    activation=_ACTIVATIONS[args['act_layer']],
    layernorm_epsilon=float(epsilon),
    reg_tokens=int(args['reg_tokens']) + (1 if args['class_token'] and pool != 'token' else 0),
    layer_scale=float(args['init_values'] or 0.0),
    norm_pre=bool(args['pre_norm']),
    fc_norm=fc_norm,
    patch_bias=not args['pre_norm'],
    distill_token=distilled,
  )
  if 'depth' in (folder_args or {}):  # the name's depth is a default: the arrays count the blocks
    options['depth'] = int(folder_args['depth'])
  image = _pair(args['img_size']) if 'img_size' in args else None
  return Architecture(
    name.partition('.')[0], options, image, bool(args['no_embed_class']),
    bool(args['class_token']) and pool != 'token',
  )  # fmt: skip


def _pair(value) -> tuple[int, int]:
  return (int(value), int(value)) if isinstance(value, (int, float)) else (int(value[0]), int(value[1]))


# timm name -> (canonical name, how the array is laid out), for the arrays that are renamed and
# transposed as a whole; a Linear's weight is [out, in], a Conv2d's [out, in, height, width]
_TO_OURS = {'linear': lambda value: value.T, 'conv': lambda value: value.transpose(2, 3, 1, 0)}
_TO_TIMM = {'linear': lambda value: value.T, 'conv': lambda value: value.transpose(3, 2, 0, 1)}


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
  'patch_embed.proj.weight': ('embedding/kernel', 'conv'),
  'patch_embed.proj.bias': ('embedding/bias', None),
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
  arrays: dict[str, np.ndarray],
  *,
  num_heads: int,
  no_embed_class: bool,
  grid: tuple[int, int],
  class_token_as_register: bool = False,
) -> dict[str, np.ndarray]:
  """timm's arrays -> canonical arrays; one-line ``CheckpointError`` for a name with no place. A block's
  linear layer without a bias (``qkv_bias=False``, ``proj_bias=False``) gets a zero one, which computes
  the same; ``class_token_as_register``: the class token (not pooled) leads the register tokens."""
  for key, why in _REFUSED.items():
    if key in arrays:
      raise CheckpointError(f'init_from: {why} ({key!r} in the file).')
  arrays = dict(arrays)
  for key in list(arrays):
    if re.fullmatch(r'blocks\.\d+\.(attn\.(qkv|proj)|mlp\.fc[12])\.weight', key):
      bias = key[: -len('weight')] + 'bias'
      arrays.setdefault(bias, np.zeros(arrays[key].shape[0], np.float32))
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
      canonical[ours] = _TO_OURS[how](value) if how else value
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
  if class_token_as_register and 'cls' in canonical:
    canonical['reg'] = np.concatenate(
      [canonical.pop('cls'), *([canonical['reg']] if 'reg' in canonical else [])], 1
    )
  return canonical


def _attention(key: str, value: np.ndarray, width: int, heads: int, head_dim: int) -> dict:
  layer, part, kind = key.split('.')[1], key.split('.')[3], key.split('.')[4]
  prefix = f'Transformer/encoderblock_{layer}/MultiHeadDotProductAttention_1'
  if part == 'proj':
    if kind == 'weight':
      return {f'{prefix}/out/kernel': value.T.reshape(heads, head_dim, width)}
    return {f'{prefix}/out/bias': value}
  return _split_heads(value, kind, prefix, ('query', 'key', 'value'), heads, head_dim)


def _pool_attention(key: str, value: np.ndarray, heads: int, head_dim: int) -> dict:
  part, kind = key.split('.')[1], key.split('.')[2]
  if part == 'proj':
    name = 'out/kernel' if kind == 'weight' else 'out/bias'
    shaped = value.T.reshape(heads, head_dim, -1) if kind == 'weight' else value
    return {f'{_MAP_ATTENTION}/{name}': shaped}
  pieces = ('query',) if part == 'q' else ('key', 'value')
  return _split_heads(value, kind, _MAP_ATTENTION, pieces, heads, head_dim)


def _split_heads(value: np.ndarray, kind: str, prefix: str, names: tuple, heads: int, head_dim: int) -> dict:
  """A fused input projection's ``weight`` or ``bias`` (``names`` stacked along its output) -> each
  name's kernel ``[in, heads, head_dim]`` or bias ``[heads, head_dim]`` under ``prefix``."""
  width = heads * head_dim
  result = {}
  for index, name in enumerate(names):
    piece = value[index * width : (index + 1) * width]
    if kind == 'weight':
      result[f'{prefix}/{name}/kernel'] = piece.T.reshape(-1, heads, head_dim)
    else:
      result[f'{prefix}/{name}/bias'] = piece.reshape(heads, head_dim)
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
      arrays[theirs] = _TO_TIMM[how](value) if how else value
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
