"""Hugging Face transformers' ViT, DeiT and DINOv2 names <-> our canonical layout (``vit.weights.checkpoint_npz``).

The names are those of ``modeling_vit.py``, ``modeling_deit.py`` and ``modeling_dinov2.py`` as the
hub's files hold them: a base model's arrays under ``vit.``, ``deit.`` or ``dinov2.`` in a model with a
head (``ViTForImageClassification``: ``classifier``), or with no prefix in a base model saved alone
(``ViTModel``, ``Dinov2Model``). Each layer ``encoder.layer.N`` has ``layernorm_before`` / ``norm1``,
``attention.attention.{query,key,value}``, ``attention.output.dense``, ``layernorm_after`` /
``norm2``, ``intermediate.dense`` and ``output.dense`` (ViT, DeiT) or ``mlp.fc1``, ``mlp.fc2`` and
``layer_scale{1,2}.lambda1`` (DINOv2). ``layernorm`` follows the last layer; ViT's ``pooler.dense``
(a Dense + tanh of the class token, ``ViTModel``) is our ``pre_logits``. ``position_embeddings``
``[1, 1 + N, D]`` has the class token's row first, folded into ``cls`` as for timm. DeiT's
``DeiTForImageClassification`` has a second prefix token, ``distillation_token`` (its row second),
which attends like any token and which the classifier (on the class token) does not read: our ViT
holds it as one register token. The distilled model with two heads
(``DeiTForImageClassificationWithTeacher``: ``cls_classifier`` on the class token,
``distillation_classifier`` on the distillation token, logits their mean) is our ViT with
``distill_token``: ``cls_classifier`` is ``head``, ``distillation_classifier`` ``head_dist``. Weights are
PyTorch's ``[out, in]``; the patch embedding a ``Conv2d`` ``[D, C, P, P]``.

transformers 5 names the same arrays otherwise in memory (its ``conversion_mapping.py``: ``ViTModel``,
which ``DeiTModel`` shares, and ``Dinov2Model``): ``layers.N`` for ViT's and DeiT's ``encoder.layer.N``,
``attention.{q,k,v,o}_proj`` for ``attention.attention.{query,key,value}`` and
``attention.output.dense``, and ViT's and DeiT's ``mlp.fc1``, ``mlp.fc2`` for ``intermediate.dense``,
``output.dense``. ``save_pretrained`` writes the hub's names by default; ``model.state_dict()`` and
``save_pretrained(save_original_format=False)`` give these, which are read too (``hub_name``).

The model options come from ``config.json``: ``hidden_size``, ``num_attention_heads``,
``intermediate_size`` (DINOv2: ``mlp_ratio``), ``hidden_act`` (``gelu`` is erf, ``gelu_pytorch_tanh``
and ``gelu_new`` the tanh form, ``quick_gelu``), ``layer_norm_eps`` (1e-12 for ViT),
``layerscale_value`` (DINOv2), ``image_size``, ``patch_size``, ``num_channels`` and ``id2label``.
"""

import re

import numpy as np

from trainer.errors import CheckpointError
from vit.weights.checkpoint_npz import POSEMB_KEY

MODEL_TYPES = ('vit', 'deit', 'dinov2')
ACTIVATIONS = {
  'gelu': 'gelu_exact',
  'gelu_pytorch_tanh': 'gelu',
  'gelu_new': 'gelu',
  'quick_gelu': 'quick_gelu',
}
_PREFIXES = ('vit.', 'deit.', 'dinov2.')


def options_from_config(config: dict) -> dict:
  """Our model section's fields from a transformers ``config.json`` (widths are checked against the arrays later)."""
  model_type = config.get('model_type')
  if model_type not in MODEL_TYPES:
    raise CheckpointError(
      f'init_from: config.json has model_type {model_type!r}; the ones read: {", ".join(MODEL_TYPES)}.'
    )
  if config.get('use_swiglu_ffn'):
    raise CheckpointError('init_from: a DINOv2 with a SwiGLU MLP (use_swiglu_ffn) is not supported.')
  activation = config.get('hidden_act', 'gelu')
  if activation not in ACTIVATIONS:
    raise CheckpointError(
      f'init_from: config.json hidden_act {activation!r} is not one of {", ".join(ACTIVATIONS)}.'
    )
  width = int(config['hidden_size'])
  if model_type == 'dinov2':
    mlp_dim = int(width * float(config.get('mlp_ratio', 4)))
  else:
    mlp_dim = int(config['intermediate_size'])
  patch = config.get('patch_size', 16)
  options = dict(
    variant='custom',
    width=width,
    depth=int(config['num_hidden_layers']),
    num_heads=int(config['num_attention_heads']),
    mlp_dim=mlp_dim,
    patch_size=int(patch if isinstance(patch, int) else patch[0]),
    pool='cls',
    activation=ACTIVATIONS[activation],
    layernorm_epsilon=float(config.get('layer_norm_eps', 1e-12)),
  )
  if model_type == 'dinov2':
    options['layer_scale'] = float(config.get('layerscale_value', 1.0))
  return options


def image_size(config: dict) -> int:
  size = config.get('image_size', 224)
  return int(size if isinstance(size, int) else size[0])


def _strip_prefix(key: str) -> str:
  for prefix in _PREFIXES:
    if key.startswith(prefix):
      return key[len(prefix) :]
  return key


def _linear(theirs: str, ours: str) -> dict:
  return {f'{theirs}.weight': (f'{ours}/kernel', 'linear'), f'{theirs}.bias': (f'{ours}/bias', None)}


def _norm(theirs: str, ours: str) -> dict:
  return {f'{theirs}.weight': (f'{ours}/scale', None), f'{theirs}.bias': (f'{ours}/bias', None)}


def _layer_names(layer: int, dinov2: bool) -> dict:
  theirs, ours = f'encoder.layer.{layer}', f'Transformer/encoderblock_{layer}'
  if dinov2:
    return {
      **_norm(f'{theirs}.norm1', f'{ours}/LayerNorm_0'),
      **_norm(f'{theirs}.norm2', f'{ours}/LayerNorm_2'),
      **_linear(f'{theirs}.mlp.fc1', f'{ours}/MlpBlock_3/Dense_0'),
      **_linear(f'{theirs}.mlp.fc2', f'{ours}/MlpBlock_3/Dense_1'),
      f'{theirs}.layer_scale1.lambda1': (f'{ours}/LayerScale_0/scale', None),
      f'{theirs}.layer_scale2.lambda1': (f'{ours}/LayerScale_1/scale', None),
    }
  return {
    **_norm(f'{theirs}.layernorm_before', f'{ours}/LayerNorm_0'),
    **_norm(f'{theirs}.layernorm_after', f'{ours}/LayerNorm_2'),
    **_linear(f'{theirs}.intermediate.dense', f'{ours}/MlpBlock_3/Dense_0'),
    **_linear(f'{theirs}.output.dense', f'{ours}/MlpBlock_3/Dense_1'),
  }


def _names(depth: int, dinov2: bool, teacher: bool = False) -> dict:
  heads = {**_linear('cls_classifier', 'head'), **_linear('distillation_classifier', 'head_dist')}
  names = {
    **_norm('layernorm', 'Transformer/encoder_norm'),
    **_linear('pooler.dense', 'pre_logits'),
    **(heads if teacher else _linear('classifier', 'head')),
  }
  for layer in range(depth):
    names.update(_layer_names(layer, dinov2))
  return names


_HUB_NAMES = {
  'attention.q_proj': 'attention.attention.query',
  'attention.k_proj': 'attention.attention.key',
  'attention.v_proj': 'attention.attention.value',
  'attention.o_proj': 'attention.output.dense',
}
_HUB_MLP_NAMES = {'mlp.fc1': 'intermediate.dense', 'mlp.fc2': 'output.dense'}  # ViT, DeiT (DINOv2 keeps them)


def hub_name(key: str, *, dinov2: bool) -> str:
  """A name as transformers 5 holds it (prefix removed) -> the hub's; a hub name is returned as it is."""
  key = re.sub(r'^layers\.(\d+)\.', r'encoder.layer.\1.', key)
  match = re.fullmatch(r'(encoder\.layer\.\d+)\.(attention\.[qkvo]_proj|mlp\.fc[12])\.(weight|bias)', key)
  if not match:
    return key
  layer, part, kind = match.groups()
  names = _HUB_NAMES if dinov2 else {**_HUB_NAMES, **_HUB_MLP_NAMES}
  return f'{layer}.{names.get(part, part)}.{kind}'


def num_layers(arrays: dict[str, np.ndarray]) -> int:
  found = {int(m.group(1)) for key in arrays if (m := re.search(r'encoder\.layer\.(\d+)\.', key))}
  return len(found)


def to_canonical(arrays: dict[str, np.ndarray], *, num_heads: int, dinov2: bool) -> dict[str, np.ndarray]:
  """transformers' arrays -> canonical arrays; one-line ``CheckpointError`` for one with no place."""
  arrays = {hub_name(_strip_prefix(key), dinov2=dinov2): np.asarray(value) for key, value in arrays.items()}
  teacher = 'cls_classifier.weight' in arrays or 'distillation_classifier.weight' in arrays
  if teacher and 'embeddings.distillation_token' not in arrays:
    raise CheckpointError(
      'init_from: the file has DeiTForImageClassificationWithTeacher heads (cls_classifier, '
      'distillation_classifier) but no embeddings.distillation_token.'
    )
  width = arrays['embeddings.patch_embeddings.projection.weight'].shape[0]
  head_dim = width // num_heads
  names = _names(num_layers(arrays), dinov2, teacher)
  canonical, left = {}, []
  for key, value in arrays.items():
    attention = re.fullmatch(
      r'encoder\.layer\.(\d+)\.attention\.(attention\.(query|key|value)|output\.dense)\.(weight|bias)', key
    )
    if key in names:
      ours, how = names[key]
      canonical[ours] = value.T if how == 'linear' else value
    elif attention:
      layer, which, kind = attention.group(1), attention.group(3) or 'out', attention.group(4)
      prefix = f'Transformer/encoderblock_{layer}/MultiHeadDotProductAttention_1/{which}'
      if kind == 'bias':
        canonical[f'{prefix}/bias'] = value if which == 'out' else value.reshape(num_heads, head_dim)
      elif which == 'out':
        canonical[f'{prefix}/kernel'] = value.T.reshape(num_heads, head_dim, width)
      else:
        canonical[f'{prefix}/kernel'] = value.T.reshape(width, num_heads, head_dim)
    elif key == 'embeddings.patch_embeddings.projection.weight':
      canonical['embedding/kernel'] = value.transpose(2, 3, 1, 0)
    elif key == 'embeddings.patch_embeddings.projection.bias':
      canonical['embedding/bias'] = value
    elif key in ('embeddings.cls_token', 'embeddings.distillation_token', 'embeddings.position_embeddings'):
      continue
    elif key == 'embeddings.mask_token':
      continue
    else:
      left.append(f'{key} {value.shape}')
  if left:
    more = f' (and {len(left) - 1} more)' if len(left) > 1 else ''
    raise CheckpointError(f'init_from: transformers array {left[0]} has no place in our ViT{more}.')
  table = arrays['embeddings.position_embeddings'][0]
  canonical['cls'] = arrays['embeddings.cls_token'] + table[:1][None]
  prefix = 1
  if 'embeddings.distillation_token' in arrays:  # with two heads our distillation token, else a register
    canonical['dist_token' if teacher else 'reg'] = arrays['embeddings.distillation_token'] + table[1:2][None]
    prefix = 2
  canonical[POSEMB_KEY] = table[prefix:]
  return canonical


def from_canonical(canonical: dict[str, np.ndarray], *, prefix: str) -> dict[str, np.ndarray]:
  """Canonical arrays -> ViT names (``prefix`` ``'vit.'`` for ``ViTForImageClassification``, ``''`` for
  ``ViTModel``; with a ``dist_token``, ``'deit.'`` for ``DeiTForImageClassificationWithTeacher``), float32;
  the prefix tokens' position rows zero."""
  depth = len({m.group(1) for key in canonical if (m := re.match(r'Transformer/encoderblock_(\d+)/', key))})
  teacher = 'dist_token' in canonical
  by_canonical = {ours: (theirs, how) for theirs, (ours, how) in _names(depth, False, teacher).items()}
  arrays = {}
  for key, value in canonical.items():
    value = np.asarray(value, np.float32)
    attention = re.fullmatch(
      r'Transformer/encoderblock_(\d+)/MultiHeadDotProductAttention_1/(\w+)/(kernel|bias)', key
    )
    if key in by_canonical:
      theirs, how = by_canonical[key]
      name = theirs if 'classifier' in theirs else prefix + theirs
      arrays[name] = value.T if how == 'linear' else value
    elif attention:
      layer, which, kind = attention.groups()
      theirs = f'{prefix}encoder.layer.{layer}.attention.' + (
        'output.dense' if which == 'out' else f'attention.{which}'
      )
      if kind == 'bias':
        arrays[f'{theirs}.bias'] = value.reshape(-1)
      elif which == 'out':
        arrays[f'{theirs}.weight'] = value.reshape(-1, value.shape[-1]).T
      else:
        arrays[f'{theirs}.weight'] = value.reshape(value.shape[0], -1).T
    elif key == 'embedding/kernel':
      arrays[f'{prefix}embeddings.patch_embeddings.projection.weight'] = value.transpose(3, 2, 0, 1)
    elif key == 'embedding/bias':
      arrays[f'{prefix}embeddings.patch_embeddings.projection.bias'] = value
    elif key == 'cls':
      arrays[f'{prefix}embeddings.cls_token'] = value
    elif key == 'dist_token':
      arrays[f'{prefix}embeddings.distillation_token'] = value
    elif key == POSEMB_KEY:
      rows = np.zeros((1 + teacher, value.shape[1]), value.dtype)
      arrays[f'{prefix}embeddings.position_embeddings'] = np.concatenate([rows, value])[None]
    else:
      raise CheckpointError(
        f'export: {key!r} has no place in a transformers ViT (only class-token ViTs with a learned '
        'position table and none of layer scale, registers, norm_pre, fc_norm or attention pooling).'
      )
  return {key: np.ascontiguousarray(value) for key, value in arrays.items()}
