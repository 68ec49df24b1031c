"""timm and transformers ViT weights: files with each source's names, shapes and configs, at tiny sizes.

Every test writes a folder (or a bare file) as the source writes it, reads it with ``vit.weights.sources``, and
compares our forward pass with a NumPy forward pass of the source's own maths (timm's
``vision_transformer.py`` ``Block``, ``_pos_embed``, ``AttentionPoolLatent``, ``forward_head``;
transformers' ``ViTLayer``, ``Dinov2Layer``, ``ViTPooler``), written here from that code. No PyTorch.
"""

import json

import ml_collections
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file
from scipy.special import erf

from trainer.errors import CheckpointError, ConfigError, MissingFileError
from vit import pretrained
from vit.model import make_vit
from vit.weights import checkpoint_npz, file_options, sources

WIDTH, HEADS, DEPTH, MLP, PATCH, IMAGE, CLASSES = 24, 3, 2, 40, 4, 16, 5
GRID = IMAGE // PATCH


def _draw(rng, *shape, scale=0.3):
  return rng.normal(0.0, scale, shape).astype(np.float32)


# NumPy maths of the sources ------------------------------------------------------------------------


def _act(x, kind):
  if kind == 'gelu_exact':
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))
  if kind == 'gelu':  # tanh form
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
  if kind == 'quick_gelu':
    return x / (1 + np.exp(-1.702 * x))
  raise ValueError(kind)


def _ln(x, weight, bias, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * weight + bias


def _linear(x, a, name):
  out = x @ a[f'{name}.weight'].astype(np.float64).T
  return out + a[f'{name}.bias'] if f'{name}.bias' in a else out


def _sdpa(q, k, v):
  """``[B, H, T, Dh]`` -> ``[B, T, H * Dh]``."""
  logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
  logits -= logits.max(-1, keepdims=True)
  weights_ = np.exp(logits)
  weights_ /= weights_.sum(-1, keepdims=True)
  out = weights_ @ v
  return np.swapaxes(out, 1, 2).reshape(out.shape[0], out.shape[2], -1)


def _heads(x):
  batch, tokens, _ = x.shape
  return x.reshape(batch, tokens, HEADS, -1).transpose(0, 2, 1, 3)


def _patches_nchw(images, kernel):
  """``Conv2d(stride=P)`` on NCHW of our NHWC images: ``[B, N, C*P*P]`` in the weight's ``(C, P, P)`` order."""
  batch, height, width, channels = images.shape
  p = kernel.shape[-1]
  x = images.reshape(batch, height // p, p, width // p, p, channels).transpose(0, 1, 3, 5, 2, 4)
  return x.reshape(batch, -1, channels * p * p)


def timm_forward(a, images, *, act, eps, no_embed_class, pool, pre_logits=False, tokens=False):
  """timm ``VisionTransformer.forward`` (``forward_features`` then ``forward_head``); with ``dist_token``,
  ``VisionTransformerDistilled``'s (``deit.py``: two heads, their logits averaged in evaluation).
  ``tokens``: ``forward_features``' output, every token after the final norm."""
  a = {key: value.astype(np.float64) for key, value in a.items()}
  kernel = a['patch_embed.proj.weight']
  x = _patches_nchw(images.astype(np.float64), kernel) @ kernel.reshape(kernel.shape[0], -1).T
  if 'patch_embed.proj.bias' in a:
    x = x + a['patch_embed.proj.bias']
  prefix = [
    np.broadcast_to(a[n], (x.shape[0], *a[n].shape[1:]))
    for n in ('cls_token', 'dist_token', 'reg_token')
    if n in a
  ]
  if no_embed_class:
    x = np.concatenate([*prefix, x + a['pos_embed']], axis=1)
  else:
    x = np.concatenate([*prefix, x], axis=1) + a['pos_embed']
  if 'norm_pre.weight' in a:
    x = _ln(x, a['norm_pre.weight'], a['norm_pre.bias'], eps)
  for layer in range(DEPTH):
    b = f'blocks.{layer}'
    h = _ln(x, a[f'{b}.norm1.weight'], a[f'{b}.norm1.bias'], eps)
    qkv = _linear(h, a, f'{b}.attn.qkv').reshape(*h.shape[:2], 3, HEADS, -1).transpose(2, 0, 3, 1, 4)
    y = _linear(_sdpa(*qkv), a, f'{b}.attn.proj')
    x = x + (y * a[f'{b}.ls1.gamma'] if f'{b}.ls1.gamma' in a else y)
    h = _ln(x, a[f'{b}.norm2.weight'], a[f'{b}.norm2.bias'], eps)
    y = _linear(_act(_linear(h, a, f'{b}.mlp.fc1'), act), a, f'{b}.mlp.fc2')
    x = x + (y * a[f'{b}.ls2.gamma'] if f'{b}.ls2.gamma' in a else y)
  if 'norm.weight' in a:
    x = _ln(x, a['norm.weight'], a['norm.bias'], eps)
  num_prefix = len(prefix) and sum(p.shape[1] for p in prefix)
  if tokens:
    return x
  if 'dist_token' in a:
    x, x_dist = x[:, 0], x[:, 1]
    return (x + x_dist) / 2 if pre_logits else (_linear(x, a, 'head') + _linear(x_dist, a, 'head_dist')) / 2
  if pool == 'token':
    x = x[:, 0]
  elif pool == 'avg':
    x = x[:, num_prefix:].mean(1)
  else:  # AttentionPoolLatent on the patch tokens
    tokens = x[:, num_prefix:]
    latent = np.broadcast_to(a['attn_pool.latent'], (x.shape[0], *a['attn_pool.latent'].shape[1:]))
    q = _heads(_linear(latent, a, 'attn_pool.q'))
    kv = _linear(tokens, a, 'attn_pool.kv').reshape(*tokens.shape[:2], 2, HEADS, -1).transpose(2, 0, 3, 1, 4)
    y = _linear(_sdpa(q, *kv), a, 'attn_pool.proj')
    y = y + _linear(
      _act(
        _linear(_ln(y, a['attn_pool.norm.weight'], a['attn_pool.norm.bias'], eps), a, 'attn_pool.mlp.fc1'),
        act,
      ),
      a,
      'attn_pool.mlp.fc2',
    )
    x = y[:, 0]
  if 'fc_norm.weight' in a:
    x = _ln(x, a['fc_norm.weight'], a['fc_norm.bias'], eps)
  return x if pre_logits else _linear(x, a, 'head')


def transformers_forward(a, images, *, act, eps, dinov2):
  """transformers ``ViTModel`` / ``Dinov2Model`` (+ ``classifier`` on the class token, ``pooler``):
  returns (logits or None, pooled features)."""
  a = {
    key.split('.', 1)[1] if key.startswith(('vit.', 'deit.', 'dinov2.')) else key: v.astype(np.float64)
    for key, v in a.items()
  }
  kernel = a['embeddings.patch_embeddings.projection.weight']
  x = _patches_nchw(images.astype(np.float64), kernel) @ kernel.reshape(kernel.shape[0], -1).T
  x = x + a['embeddings.patch_embeddings.projection.bias']
  prefix = [a[name] for name in ('embeddings.cls_token', 'embeddings.distillation_token') if name in a]
  prefix = [np.broadcast_to(token, (x.shape[0], 1, x.shape[-1])) for token in prefix]
  x = np.concatenate([*prefix, x], axis=1) + a['embeddings.position_embeddings']
  for layer in range(DEPTH):
    b = f'encoder.layer.{layer}'
    n1, n2 = ('norm1', 'norm2') if dinov2 else ('layernorm_before', 'layernorm_after')
    h = _ln(x, a[f'{b}.{n1}.weight'], a[f'{b}.{n1}.bias'], eps)
    q, k, v = (_heads(_linear(h, a, f'{b}.attention.attention.{n}')) for n in ('query', 'key', 'value'))
    y = _linear(_sdpa(q, k, v), a, f'{b}.attention.output.dense')
    x = x + (y * a[f'{b}.layer_scale1.lambda1'] if dinov2 else y)
    h = _ln(x, a[f'{b}.{n2}.weight'], a[f'{b}.{n2}.bias'], eps)
    if dinov2:
      y = _linear(_act(_linear(h, a, f'{b}.mlp.fc1'), act), a, f'{b}.mlp.fc2')
      x = x + y * a[f'{b}.layer_scale2.lambda1']
    else:
      x = x + _linear(_act(_linear(h, a, f'{b}.intermediate.dense'), act), a, f'{b}.output.dense')
  x = _ln(x, a['layernorm.weight'], a['layernorm.bias'], eps)
  features = np.tanh(_linear(x[:, 0], a, 'pooler.dense')) if 'pooler.dense.weight' in a else x[:, 0]
  logits = _linear(x[:, 0], a, 'classifier') if 'classifier.weight' in a else None
  if 'cls_classifier.weight' in a:  # DeiTForImageClassificationWithTeacher
    logits = (_linear(x[:, 0], a, 'cls_classifier') + _linear(x[:, 1], a, 'distillation_classifier')) / 2
  return logits, features


# Files as each source writes them ------------------------------------------------------------------


def timm_arrays(rng, *, cls=True, dist=False, reg=0, no_embed_class=False, layer_scale=False, norm_pre=False,
                patch_bias=True, fc_norm=False, final_norm=True, attn_pool=False, classes=CLASSES, channels=3):  # fmt: skip
  """The state dict of timm's ``VisionTransformer`` with these options (names and shapes as timm's)."""
  a = {'patch_embed.proj.weight': _draw(rng, WIDTH, channels, PATCH, PATCH)}
  if patch_bias:
    a['patch_embed.proj.bias'] = _draw(rng, WIDTH)
  prefix = int(cls) + int(dist) + reg
  if cls:
    a['cls_token'] = _draw(rng, 1, 1, WIDTH)
  if dist:
    a['dist_token'] = _draw(rng, 1, 1, WIDTH)
  if reg:
    a['reg_token'] = _draw(rng, 1, reg, WIDTH)
  a['pos_embed'] = _draw(rng, 1, GRID * GRID + (0 if no_embed_class else prefix), WIDTH)
  if norm_pre:
    a['norm_pre.weight'], a['norm_pre.bias'] = 1 + _draw(rng, WIDTH), _draw(rng, WIDTH)
  for layer in range(DEPTH):
    b = f'blocks.{layer}'
    for norm in ('norm1', 'norm2'):
      a[f'{b}.{norm}.weight'], a[f'{b}.{norm}.bias'] = 1 + _draw(rng, WIDTH), _draw(rng, WIDTH)
    a[f'{b}.attn.qkv.weight'], a[f'{b}.attn.qkv.bias'] = _draw(rng, 3 * WIDTH, WIDTH), _draw(rng, 3 * WIDTH)
    a[f'{b}.attn.proj.weight'], a[f'{b}.attn.proj.bias'] = _draw(rng, WIDTH, WIDTH), _draw(rng, WIDTH)
    a[f'{b}.mlp.fc1.weight'], a[f'{b}.mlp.fc1.bias'] = _draw(rng, MLP, WIDTH), _draw(rng, MLP)
    a[f'{b}.mlp.fc2.weight'], a[f'{b}.mlp.fc2.bias'] = _draw(rng, WIDTH, MLP), _draw(rng, WIDTH)
    if layer_scale:
      a[f'{b}.ls1.gamma'], a[f'{b}.ls2.gamma'] = 1 + _draw(rng, WIDTH), 1 + _draw(rng, WIDTH)
  if final_norm and not fc_norm:
    a['norm.weight'], a['norm.bias'] = 1 + _draw(rng, WIDTH), _draw(rng, WIDTH)
  if attn_pool:
    a['attn_pool.latent'] = _draw(rng, 1, 1, WIDTH)
    a['attn_pool.q.weight'], a['attn_pool.q.bias'] = _draw(rng, WIDTH, WIDTH), _draw(rng, WIDTH)
    a['attn_pool.kv.weight'], a['attn_pool.kv.bias'] = _draw(rng, 2 * WIDTH, WIDTH), _draw(rng, 2 * WIDTH)
    a['attn_pool.proj.weight'], a['attn_pool.proj.bias'] = _draw(rng, WIDTH, WIDTH), _draw(rng, WIDTH)
    a['attn_pool.norm.weight'], a['attn_pool.norm.bias'] = 1 + _draw(rng, WIDTH), _draw(rng, WIDTH)
    a['attn_pool.mlp.fc1.weight'], a['attn_pool.mlp.fc1.bias'] = _draw(rng, MLP, WIDTH), _draw(rng, MLP)
    a['attn_pool.mlp.fc2.weight'], a['attn_pool.mlp.fc2.bias'] = _draw(rng, WIDTH, MLP), _draw(rng, WIDTH)
  if fc_norm:
    a['fc_norm.weight'], a['fc_norm.bias'] = 1 + _draw(rng, WIDTH), _draw(rng, WIDTH)
  if classes:
    a['head.weight'], a['head.bias'] = _draw(rng, classes, WIDTH), _draw(rng, classes)
  if classes and dist:
    a['head_dist.weight'], a['head_dist.bias'] = _draw(rng, classes, WIDTH), _draw(rng, classes)
  return a


def write_timm_folder(folder, arrays, architecture, *, labels=None, pretrained_cfg=None, model_args=None):
  """``config.json`` as timm's ``save_config_for_hf`` writes it (``model_args`` for the tiny sizes, and
  ``model_args`` given here over them)."""
  folder.mkdir(parents=True, exist_ok=True)
  save_file(arrays, str(folder / 'model.safetensors'))
  classes = arrays['head.weight'].shape[0] if 'head.weight' in arrays else 0
  config = {
    'architecture': architecture,
    'num_classes': classes,
    'num_features': WIDTH,
    'model_args': {'embed_dim': WIDTH, 'num_heads': HEADS, 'depth': DEPTH, 'patch_size': PATCH, 'img_size': IMAGE,
                   **(model_args or {})},
    'pretrained_cfg': pretrained_cfg
    or {'input_size': [3, IMAGE, IMAGE], 'crop_pct': 0.875, 'interpolation': 'bicubic',
        'mean': [0.5, 0.5, 0.5], 'std': [0.5, 0.5, 0.5], 'num_classes': classes},
  }  # fmt: skip
  if labels:
    config['label_names'] = labels
  (folder / 'config.json').write_text(json.dumps(config))
  return folder


# (architecture, options of timm_arrays, timm_forward's act / eps / no_embed_class / pool)
TIMM_CASES = {
  'vit_base_patch16_224': (dict(), 'gelu_exact', 1e-6, False, 'token'),
  'deit_small_patch16_224': (dict(), 'gelu_exact', 1e-6, False, 'token'),
  'deit_small_distilled_patch16_224': (dict(dist=True), 'gelu_exact', 1e-6, False, 'token'),
  'deit3_base_patch16_224': (dict(layer_scale=True, no_embed_class=True), 'gelu_exact', 1e-6, True, 'token'),
  'vit_small_patch14_dinov2': (dict(layer_scale=True), 'gelu_exact', 1e-6, False, 'token'),
  'vit_small_patch14_reg4_dinov2': (dict(layer_scale=True, reg=4, no_embed_class=True), 'gelu_exact', 1e-6, True, 'token'),
  'vit_base_patch16_siglip_224': (dict(cls=False, attn_pool=True), 'gelu_exact', 1e-6, False, 'map'),
  'vit_so400m_patch16_siglip_256': (dict(cls=False, attn_pool=True), 'gelu', 1e-6, False, 'map'),
  'vit_base_patch16_siglip_gap_224': (dict(cls=False), 'gelu_exact', 1e-6, False, 'avg'),
  'vit_base_patch16_clip_224': (dict(norm_pre=True, patch_bias=False), 'gelu_exact', 1e-5, False, 'token'),
  'vit_base_patch16_clip_quickgelu_224': (dict(norm_pre=True, patch_bias=False), 'quick_gelu', 1e-5, False, 'token'),
}  # fmt: skip


def _model_from(source: sources.Weights):
  model = make_vit(
    source.model,
    num_classes=max(source.num_classes, 1),
    image_shape=(*source.image_size, 3),
    rngs=nnx.Rngs(0),
  )
  checkpoint_npz.canonical_to_model(model, source.canonical)
  return model


def _images(rng, batch=2):
  return rng.uniform(-1, 1, (batch, IMAGE, IMAGE, 3)).astype(np.float32)


@pytest.mark.parametrize('architecture', sorted(TIMM_CASES))
def test_timm_folder_computes_what_timm_computes(architecture, tmp_path):
  rng = np.random.default_rng(0)
  options, act, eps, no_embed_class, pool = TIMM_CASES[architecture]
  arrays = timm_arrays(rng, **options)
  source = sources.read_weights(write_timm_folder(tmp_path / 'w', arrays, architecture))
  assert source.model['activation'] == act and source.model['layernorm_epsilon'] == eps
  model, images = _model_from(source), _images(rng)
  logits, intermediates = model(images)
  expected = timm_forward(arrays, images, act=act, eps=eps, no_embed_class=no_embed_class, pool=pool)
  np.testing.assert_allclose(np.asarray(logits), expected, rtol=2e-4, atol=2e-4)
  features = timm_forward(
    arrays, images, act=act, eps=eps, no_embed_class=no_embed_class, pool=pool, pre_logits=True
  )
  if options.get('dist'):
    # our features are the class token's (timm's pre_logits average it with the distillation token's)
    tokens = timm_forward(arrays, images, act=act, eps=eps, no_embed_class=False, pool=pool, tokens=True)
    features = tokens[:, 0]
    for ours, head, token in (('class_logits', 'head', 0), ('distill_logits', 'head_dist', 1)):
      np.testing.assert_allclose(
        np.asarray(intermediates[ours]), _linear(tokens[:, token], arrays, head), rtol=2e-4, atol=2e-4
      )
  np.testing.assert_allclose(np.asarray(intermediates['pre_logits']), features, rtol=2e-4, atol=2e-4)


def test_fc_norm_after_average_pooling(tmp_path):
  """timm's ``fc_norm`` (``global_pool='avg'``: the final norm moves after the pooling); the SigLIP
  architecture's own ``fc_norm=False`` is overridden by the folder's ``model_args``."""
  rng = np.random.default_rng(1)
  arrays = timm_arrays(rng, cls=False, fc_norm=True)
  folder = write_timm_folder(
    tmp_path / 'w', arrays, 'vit_base_patch16_siglip_gap_224', model_args={'fc_norm': True}
  )
  source = sources.read_weights(folder)
  assert source.model['fc_norm'] and source.model['pool'] == 'gap'
  images = _images(rng)
  expected = timm_forward(arrays, images, act='gelu_exact', eps=1e-6, no_embed_class=False, pool='avg')
  np.testing.assert_allclose(np.asarray(_model_from(source)(images)[0]), expected, rtol=2e-4, atol=2e-4)


def test_a_wrong_option_would_change_the_logits(tmp_path):
  """The comparison can fail: the same arrays read as a tanh-GELU or with epsilon 1e-5 give other logits."""
  rng = np.random.default_rng(2)
  arrays = timm_arrays(rng, layer_scale=True)
  source = sources.read_weights(write_timm_folder(tmp_path / 'w', arrays, 'vit_small_patch14_dinov2'))
  images = _images(rng)
  ours = np.asarray(_model_from(source)(images)[0])
  for act, eps in (('gelu', 1e-6), ('gelu_exact', 1e-2)):
    other = timm_forward(arrays, images, act=act, eps=eps, no_embed_class=False, pool='token')
    assert not np.allclose(ours, other, rtol=2e-4, atol=2e-4)


def test_bare_timm_file_needs_its_architecture(tmp_path):
  rng = np.random.default_rng(3)
  arrays = timm_arrays(rng)
  arrays['pos_embed'] = _draw(rng, 1, 14 * 14 + 1, WIDTH)  # the real model's 224 / 16 grid
  file = tmp_path / 'vit.safetensors'
  save_file(arrays, str(file))
  with pytest.raises(CheckpointError, match=r'bare \.safetensors.*init_from\.arch'):
    sources.read_weights(file)
  with pytest.raises(CheckpointError, match='config.json does not match|does not match the arrays'):
    sources.read_weights(file, 'vit_base_patch16_224')  # width 768 and 12 heads by its name; the arrays 24
  with pytest.raises(CheckpointError, match=r"unknown timm architecture 'vit_tiny_patch99' .*no model_args"):
    sources.read_weights(file, 'vit_tiny_patch99')


def test_bare_distilled_deit_file_at_its_real_size(tmp_path, monkeypatch):
  """``deit_tiny_distilled_patch16_224`` as timm's file holds it (width 192, 3 heads, 16x16 patches, a
  14x14 grid and two prefix rows: ``pos_embed`` ``[1, 198, 192]``) and its twelve blocks."""
  import sys  # pylint: disable=g-import-not-at-top

  sizes = dict(WIDTH=192, HEADS=3, DEPTH=12, MLP=768, PATCH=16, IMAGE=224, GRID=14)
  for name, value in sizes.items():
    monkeypatch.setattr(sys.modules[__name__], name, value)
  rng = np.random.default_rng(18)
  arrays = timm_arrays(rng, dist=True, classes=10)
  assert arrays['pos_embed'].shape == (1, 198, 192) and arrays['head_dist.weight'].shape == (10, 192)
  file = tmp_path / 'deit_tiny_distilled.safetensors'
  save_file(arrays, str(file))
  source = sources.read_weights(file, 'deit_tiny_distilled_patch16_224')
  assert source.image_size == (224, 224) and source.num_classes == 10
  assert (source.model['distill_token'], source.model['width'], source.model['depth']) == (True, 192, 12)
  images = rng.uniform(-1, 1, (1, 224, 224, 3)).astype(np.float32)
  expected = timm_forward(arrays, images, act='gelu_exact', eps=1e-6, no_embed_class=False, pool='token')
  # twelve float32 blocks of random weights: logits of about 5 agree to 1e-3
  np.testing.assert_allclose(np.asarray(_model_from(source)(images)[0]), expected, rtol=1e-3, atol=2e-3)


def test_bad_input_is_one_line_before_anything_is_built(tmp_path):
  folder = tmp_path / 'pickled'
  folder.mkdir()
  (folder / 'config.json').write_text(json.dumps({'model_type': 'vit'}))
  (folder / 'pytorch_model.bin').write_bytes(b'not read')
  with pytest.raises(CheckpointError, match=r'pytorch_model\.bin is a pickle.*safetensors\.torch\.save_file'):
    sources.read_weights(folder)
  with pytest.raises(CheckpointError, match=r'\.pth is a pickle'):
    (tmp_path / 'model.pth').write_bytes(b'x')
    sources.read_weights(tmp_path / 'model.pth')
  empty = tmp_path / 'empty'
  empty.mkdir()
  (empty / 'config.json').write_text(json.dumps({'architecture': 'vit_base_patch16_224'}))
  with pytest.raises(MissingFileError, match='has no model.safetensors'):
    sources.read_weights(empty)
  rng = np.random.default_rng(4)
  arrays = timm_arrays(rng)
  folder = write_timm_folder(tmp_path / 'w', arrays, 'vit_base_patch16_224')
  config = json.loads((folder / 'config.json').read_text())
  config['model_args']['num_heads'] = 5  # 24 / 5: not what the arrays were made with
  config['model_args']['embed_dim'] = 32
  (folder / 'config.json').write_text(json.dumps(config))
  with pytest.raises(CheckpointError, match=r'does not match the arrays: width 32 .* 24 in the arrays'):
    sources.read_weights(folder)
  distilled = dict(arrays, dist_token=_draw(rng, 1, 1, WIDTH))
  with pytest.raises(
    CheckpointError, match=r"'deit_small_patch16_224' has no distillation token, the file does"
  ):
    sources.read_weights(write_timm_folder(tmp_path / 'd', distilled, 'deit_small_patch16_224'))
  with pytest.raises(CheckpointError, match=r"'deit_small_distilled_patch16_224' has a distillation token"):
    sources.read_weights(write_timm_folder(tmp_path / 'e', arrays, 'deit_small_distilled_patch16_224'))


def test_timm_preprocessing_and_labels(tmp_path):
  arrays = timm_arrays(np.random.default_rng(5))
  folder = write_timm_folder(
    tmp_path / 'w', arrays, 'vit_base_patch16_224', labels=[f'c{i}' for i in range(CLASSES)]
  )
  source = sources.read_weights(folder)
  assert source.class_names == ['c0', 'c1', 'c2', 'c3', 'c4']
  prep = source.preprocessing
  assert (prep.resize, prep.size, prep.crop, prep.interpolation) == ('shortest', (18,), (16, 16), 'bicubic')
  assert prep.mean == (0.5, 0.5, 0.5)


# transformers --------------------------------------------------------------------------------------


def transformers_arrays(rng, *, dinov2=False, prefix='vit.', classes=CLASSES, pooler=False, teacher=False):
  """The state dict of ``ViTForImageClassification`` (``prefix='vit.'``), ``DeiTForImageClassification``
  (``'deit.'``: a ``distillation_token`` after the class token; ``teacher``:
  ``DeiTForImageClassificationWithTeacher``, two heads), or a base model saved alone (``ViTModel``,
  ``Dinov2Model``: ``prefix=''``)."""
  deit = prefix == 'deit.'
  a = {
    f'{prefix}embeddings.cls_token': _draw(rng, 1, 1, WIDTH),
    f'{prefix}embeddings.position_embeddings': _draw(rng, 1, (2 if deit else 1) + GRID * GRID, WIDTH),
    f'{prefix}embeddings.patch_embeddings.projection.weight': _draw(rng, WIDTH, 3, PATCH, PATCH),
    f'{prefix}embeddings.patch_embeddings.projection.bias': _draw(rng, WIDTH),
  }
  if dinov2:
    a[f'{prefix}embeddings.mask_token'] = _draw(rng, 1, WIDTH)
  if deit:
    a[f'{prefix}embeddings.distillation_token'] = _draw(rng, 1, 1, WIDTH)
  for layer in range(DEPTH):
    b = f'{prefix}encoder.layer.{layer}'
    norms = ('norm1', 'norm2') if dinov2 else ('layernorm_before', 'layernorm_after')
    for norm in norms:
      a[f'{b}.{norm}.weight'], a[f'{b}.{norm}.bias'] = 1 + _draw(rng, WIDTH), _draw(rng, WIDTH)
    for name in ('query', 'key', 'value'):
      a[f'{b}.attention.attention.{name}.weight'] = _draw(rng, WIDTH, WIDTH)
      a[f'{b}.attention.attention.{name}.bias'] = _draw(rng, WIDTH)
    a[f'{b}.attention.output.dense.weight'], a[f'{b}.attention.output.dense.bias'] = (
      _draw(rng, WIDTH, WIDTH),
      _draw(rng, WIDTH),
    )
    fc1, fc2 = ('mlp.fc1', 'mlp.fc2') if dinov2 else ('intermediate.dense', 'output.dense')
    a[f'{b}.{fc1}.weight'], a[f'{b}.{fc1}.bias'] = _draw(rng, MLP, WIDTH), _draw(rng, MLP)
    a[f'{b}.{fc2}.weight'], a[f'{b}.{fc2}.bias'] = _draw(rng, WIDTH, MLP), _draw(rng, WIDTH)
    if dinov2:
      a[f'{b}.layer_scale1.lambda1'], a[f'{b}.layer_scale2.lambda1'] = (
        1 + _draw(rng, WIDTH),
        1 + _draw(rng, WIDTH),
      )
  a[f'{prefix}layernorm.weight'], a[f'{prefix}layernorm.bias'] = 1 + _draw(rng, WIDTH), _draw(rng, WIDTH)
  if pooler:
    a[f'{prefix}pooler.dense.weight'], a[f'{prefix}pooler.dense.bias'] = (
      _draw(rng, WIDTH, WIDTH),
      _draw(rng, WIDTH),
    )
  for head in (
    ('cls_classifier', 'distillation_classifier') if teacher else ('classifier',) if classes else ()
  ):
    a[f'{head}.weight'], a[f'{head}.bias'] = _draw(rng, classes, WIDTH), _draw(rng, classes)
  return a


def transformers_config(model_type, *, act='gelu', eps=1e-12, classes=CLASSES):
  """``config.json`` with ``ViTConfig`` / ``DeiTConfig`` / ``Dinov2Config`` fields at the tiny size."""
  config = {
    'model_type': model_type,
    'hidden_size': WIDTH,
    'num_hidden_layers': DEPTH,
    'num_attention_heads': HEADS,
    'hidden_act': act,
    'layer_norm_eps': eps,
    'image_size': IMAGE,
    'patch_size': PATCH,
    'num_channels': 3,
    'qkv_bias': True,
  }
  if model_type == 'dinov2':
    config.update(mlp_ratio=MLP / WIDTH, layerscale_value=1.0, use_swiglu_ffn=False)
  else:
    config['intermediate_size'] = MLP
  if classes:
    config['id2label'] = {str(i): f'label{i}' for i in range(classes)}
  return config


def write_transformers_folder(folder, arrays, config, processor=None):
  folder.mkdir(parents=True, exist_ok=True)
  save_file(arrays, str(folder / 'model.safetensors'), metadata={'format': 'pt'})
  (folder / 'config.json').write_text(json.dumps(config))
  if processor is not None:
    (folder / 'preprocessor_config.json').write_text(json.dumps(processor))
  return folder


TRANSFORMERS_CASES = {
  'ViTForImageClassification': ('vit', dict(prefix='vit.'), 'gelu', 1e-12),
  'ViTModel with pooler': ('vit', dict(prefix='', classes=0, pooler=True), 'gelu', 1e-12),
  'DeiTForImageClassification': ('deit', dict(prefix='deit.'), 'gelu', 1e-12),
  'DeiTForImageClassificationWithTeacher': ('deit', dict(prefix='deit.', teacher=True), 'gelu', 1e-12),
  'Dinov2Model': ('dinov2', dict(prefix='', dinov2=True, classes=0), 'gelu', 1e-6),
}


@pytest.mark.parametrize('case', sorted(TRANSFORMERS_CASES))
def test_transformers_folder_computes_what_transformers_computes(case, tmp_path):
  rng = np.random.default_rng(6)
  model_type, options, act, eps = TRANSFORMERS_CASES[case]
  arrays = transformers_arrays(rng, **options)
  config = transformers_config(model_type, act=act, eps=eps, classes=options.get('classes', CLASSES))
  source = sources.read_weights(write_transformers_folder(tmp_path / 'w', arrays, config))
  assert source.model['activation'] == 'gelu_exact' and source.model['layernorm_epsilon'] == eps
  model, images = _model_from(source), _images(rng)
  logits, intermediates = model(images)
  expected_logits, expected_features = transformers_forward(
    arrays, images, act='gelu_exact', eps=eps, dinov2=model_type == 'dinov2'
  )
  np.testing.assert_allclose(np.asarray(intermediates['pre_logits']), expected_features, rtol=2e-4, atol=2e-4)
  if expected_logits is not None:
    np.testing.assert_allclose(np.asarray(logits), expected_logits, rtol=2e-4, atol=2e-4)
    assert source.class_names == [f'label{i}' for i in range(CLASSES)]
  else:
    assert source.num_classes == 0


# transformers 5's names in memory (its conversion_mapping.py, hub -> ours, in order), which
# ``state_dict()`` and ``save_pretrained(save_original_format=False)`` write
TRANSFORMERS5_RENAMES = {
  'vit': [(r'encoder\.layer\.', 'layers.'), ('attention.query', 'q_proj'), ('attention.key', 'k_proj'),
          ('attention.value', 'v_proj'), ('attention.output.dense', 'attention.o_proj'),
          ('intermediate.dense', 'mlp.fc1'), ('output.dense', 'mlp.fc2')],
  'dinov2': [('attention.attention.query', 'attention.q_proj'), ('attention.attention.key', 'attention.k_proj'),
             ('attention.attention.value', 'attention.v_proj'), ('attention.output.dense', 'attention.o_proj')],
}  # fmt: skip
TRANSFORMERS5_RENAMES['deit'] = TRANSFORMERS5_RENAMES['vit']  # DeiTModel -> ViTModel in that file


def transformers5_names(arrays, model_type):
  import re  # pylint: disable=g-import-not-at-top

  renamed = {}
  for key, value in arrays.items():
    for pattern, replacement in TRANSFORMERS5_RENAMES[model_type]:
      key = re.sub(pattern, replacement, key)
    renamed[key] = value
  return renamed


@pytest.mark.parametrize('case', sorted(TRANSFORMERS_CASES))
def test_transformers5_names_read_as_the_hub_names(case, tmp_path):
  rng = np.random.default_rng(19)
  model_type, options, act, eps = TRANSFORMERS_CASES[case]
  arrays = transformers_arrays(rng, **options)
  renamed = transformers5_names(arrays, model_type)
  prefix = options['prefix']
  expected_name = {
    'dinov2': f'{prefix}encoder.layer.1.attention.v_proj.bias',
    'vit': f'{prefix}layers.1.mlp.fc2.weight',
    'deit': f'{prefix}layers.1.attention.o_proj.weight',
  }[model_type]
  assert expected_name in renamed and len(renamed) == len(arrays)
  assert f'{prefix}encoder.layer.1.attention.attention.query.weight' not in renamed
  config = transformers_config(model_type, act=act, eps=eps, classes=options.get('classes', CLASSES))
  hub = sources.read_weights(write_transformers_folder(tmp_path / 'hub', arrays, config))
  ours = sources.read_weights(write_transformers_folder(tmp_path / 'v5', renamed, config))
  assert sorted(ours.canonical) == sorted(hub.canonical) and ours.model == hub.model
  for key, value in hub.canonical.items():
    np.testing.assert_array_equal(ours.canonical[key], value)


def test_transformers_processor_config_and_errors(tmp_path):
  rng = np.random.default_rng(7)
  arrays = transformers_arrays(rng, prefix='', dinov2=True, classes=0)
  processor = {
    'image_processor_type': 'BitImageProcessor', 'do_resize': True, 'size': {'shortest_edge': 18},
    'resample': 3, 'do_center_crop': True, 'crop_size': {'height': 16, 'width': 16},
    'do_normalize': True, 'image_mean': [0.485, 0.456, 0.406], 'image_std': [0.229, 0.224, 0.225],
  }  # fmt: skip
  folder = write_transformers_folder(
    tmp_path / 'w', arrays, transformers_config('dinov2', eps=1e-6, classes=0), processor
  )
  prep = sources.read_weights(folder).preprocessing
  assert (prep.resize, prep.size, prep.crop, prep.interpolation) == ('shortest', (18,), (16, 16), 'bicubic')
  assert prep.std == (0.229, 0.224, 0.225)
  # 47 x 61 -> 18 x 23: a margin of 7 rows, of which transformers' center_crop drops 3 above (not 4)
  from PIL import Image  # pylint: disable=g-import-not-at-top

  from vit.weights.predictor import prepare_pixels  # pylint: disable=g-import-not-at-top

  image = rng.integers(0, 256, (61, 47, 3), dtype=np.uint8)
  resized = np.asarray(Image.fromarray(image).resize((18, 23), Image.BICUBIC))
  np.testing.assert_array_equal(prepare_pixels(image, prep), resized[3:19, 1:17])
  bad = transformers_config('dinov2', eps=1e-6, classes=0)
  bad['num_attention_heads'] = 4
  bad['hidden_size'] = 32
  with pytest.raises(CheckpointError, match='does not match the arrays: width 32'):
    sources.read_weights(write_transformers_folder(tmp_path / 'b', arrays, bad))
  teacher = transformers_arrays(rng, prefix='vit.', teacher=True)  # two heads, no distillation token
  with pytest.raises(CheckpointError, match='WithTeacher heads .* but no embeddings.distillation_token'):
    sources.read_weights(write_transformers_folder(tmp_path / 't', teacher, transformers_config('vit')))
  other = dict(bad, model_type='swin')
  with pytest.raises(CheckpointError, match="model_type 'swin'; the ones read: vit, deit, dinov2"):
    sources.read_weights(write_transformers_folder(tmp_path / 's', arrays, other))


# Round trips and fine-tuning ----------------------------------------------------------------------


def _params(model):
  import jax  # pylint: disable=g-import-not-at-top

  return [np.asarray(leaf) for leaf in jax.tree.leaves(nnx.to_pure_dict(nnx.state(model, nnx.Param)))]


ROUND_TRIP = ['deit3_base_patch16_224', 'deit_small_distilled_patch16_224', 'vit_small_patch14_reg4_dinov2', 'vit_base_patch16_siglip_224',
              'vit_base_patch16_clip_quickgelu_224', 'vit_base_patch16_224', 'vit_small_patch14_dinov2']  # fmt: skip


@pytest.mark.parametrize('architecture', ROUND_TRIP)
def test_ours_to_timm_to_ours_is_exact(architecture, tmp_path):
  """A model of ours (read from a timm folder) -> ``export.write_timm`` -> read back: the same
  parameters bit for bit, and a timm folder with the source's names (prefix rows of pos_embed zero)."""
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top

  from vit.weights import export  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(8)
  options, *_ = TIMM_CASES[architecture]
  arrays = timm_arrays(rng, **options)
  model = _model_from(sources.read_weights(write_timm_folder(tmp_path / 'w', arrays, architecture)))
  out = export.write_timm(
    model, tmp_path / 'out', architecture, image_size=(IMAGE, IMAGE), mean=(0.5,) * 3, std=(0.5,) * 3,
    class_names=list('abcde'),
  )  # fmt: skip
  again = sources.read_weights(out)
  assert again.class_names == list('abcde') and again.arch == architecture
  for first, second in zip(_params(model), _params(_model_from(again)), strict=True):
    np.testing.assert_array_equal(first, second)
  written = load_file(str(out / 'model.safetensors'))
  assert set(written) == set(arrays)
  assert all(written[key].shape == arrays[key].shape for key in arrays)
  config = json.loads((out / 'config.json').read_text())
  assert config['architecture'] == architecture and config['model_args']['embed_dim'] == WIDTH


@pytest.mark.parametrize('model_type', ['vit', 'deit'])
def test_ours_to_transformers_to_ours_is_exact(model_type, tmp_path):
  """``ViTForImageClassification``, and a distilled model as ``DeiTForImageClassificationWithTeacher``."""
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top

  from vit.weights import export  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(9)
  deit = model_type == 'deit'
  arrays = transformers_arrays(rng, prefix=f'{model_type}.', teacher=deit)
  folder = write_transformers_folder(tmp_path / 'w', arrays, transformers_config(model_type))
  model = _model_from(sources.read_weights(folder))
  out = export.write_transformers(
    model,
    tmp_path / 'out',
    image_size=(IMAGE, IMAGE),
    mean=(0.5,) * 3,
    std=(0.25,) * 3,
    class_names=list('vwxyz'),
  )
  again = sources.read_weights(out)
  assert again.class_names == list('vwxyz') and again.preprocessing.std == (0.25,) * 3
  assert again.preprocessing.resize == 'exact' and again.preprocessing.size == (IMAGE, IMAGE)
  for first, second in zip(_params(model), _params(_model_from(again)), strict=True):
    np.testing.assert_array_equal(first, second)
  assert set(load_file(str(out / 'model.safetensors'))) == set(arrays)
  config = json.loads((out / 'config.json').read_text())
  assert config['hidden_act'] == 'gelu' and config['layer_norm_eps'] == 1e-12
  assert (config['model_type'], config['architectures']) == (
    ('deit', ['DeiTForImageClassificationWithTeacher']) if deit else ('vit', ['ViTForImageClassification'])
  )


def test_export_refuses_a_model_that_is_not_the_architecture(tmp_path):
  from vit.weights import export  # pylint: disable=g-import-not-at-top

  arrays = timm_arrays(np.random.default_rng(14), layer_scale=True)
  model = _model_from(
    sources.read_weights(write_timm_folder(tmp_path / 'w', arrays, 'vit_small_patch14_dinov2'))
  )
  common = dict(image_size=(IMAGE, IMAGE), mean=(0.5,) * 3, std=(0.5,) * 3)
  with pytest.raises(
    CheckpointError, match=r'not a timm vit_base_patch16_clip_224: .*layernorm_epsilon 1e-06'
  ):
    export.write_timm(model, tmp_path / 'a', 'vit_base_patch16_clip_224', **common)
  with pytest.raises(CheckpointError, match='transformers ViTForImageClassification .* layer_scale'):
    export.write_transformers(model, tmp_path / 'b', **common)


def test_init_from_fills_the_model_config_and_refuses_a_contradiction(tmp_path):
  import ml_collections  # pylint: disable=g-import-not-at-top

  arrays = timm_arrays(np.random.default_rng(10), layer_scale=True, reg=4, no_embed_class=True)
  folder = write_timm_folder(tmp_path / 'w', arrays, 'vit_small_patch14_reg4_dinov2')
  init_from = pretrained.default_init_from_config()
  init_from.path = str(folder)
  from configs.common import unset  # pylint: disable=g-import-not-at-top

  model = ml_collections.ConfigDict(dict(dropout=0.1, width=unset(int), num_heads=unset(int)))
  file_options.complete_model_config(model, init_from)
  assert (model.width, model.num_heads, model.reg_tokens, model.layer_scale, model.depth) == (
    WIDTH,
    HEADS,
    4,
    1e-5,
    DEPTH,
  )
  assert model.dropout == 0.1
  contradicting = ml_collections.ConfigDict(dict(width=32, activation='gelu'))
  with pytest.raises(
    ConfigError, match=r"width 32 \(the file: 24\); activation 'gelu' \(the file: 'gelu_exact'\)"
  ):
    file_options.complete_model_config(contradicting, init_from)
  # another class count and resolution: a zero head and a resampled table, as for .npz
  built = make_vit(model, num_classes=7, image_shape=(24, 24, 3), rngs=nnx.Rngs(0))
  report = pretrained.load_into(built, init_from, pretrained.read_canonical(init_from))
  assert 'head: zero-initialised' in report and 'resampled 4x4 -> 6x6 (torch_bicubic_aa)' in report
  assert not np.any(np.asarray(built.head.kernel[...]))


def test_init_from_a_distilled_deit_keeps_or_drops_its_distillation_token(tmp_path):
  import ml_collections  # pylint: disable=g-import-not-at-top

  arrays = timm_arrays(np.random.default_rng(17), dist=True)
  init_from = pretrained.default_init_from_config()
  init_from.path = str(write_timm_folder(tmp_path / 'w', arrays, 'deit_tiny_distilled_patch16_224'))
  kept = ml_collections.ConfigDict(dict(dropout=0.0))
  file_options.complete_model_config(kept, init_from)
  assert kept.distill_token
  model = make_vit(kept, num_classes=CLASSES, image_shape=(IMAGE, IMAGE, 3), rngs=nnx.Rngs(0))
  pretrained.load_into(model, init_from, pretrained.read_canonical(init_from))
  np.testing.assert_array_equal(np.asarray(model.distill_head.kernel[...]), arrays['head_dist.weight'].T)
  dropped = ml_collections.ConfigDict(dict(distill_token=False))
  file_options.complete_model_config(dropped, init_from)
  model = make_vit(dropped, num_classes=CLASSES, image_shape=(IMAGE, IMAGE, 3), rngs=nnx.Rngs(0))
  report = pretrained.load_into(model, init_from, pretrained.read_canonical(init_from))
  assert model.distill_token is None
  assert 'skipped dist_token (1, 1, 24) (dropped: the model has none)' in report


def _position_table(model) -> np.ndarray:
  return checkpoint_npz.model_to_official(model)[checkpoint_npz.POSEMB_KEY][0]


def test_a_table_of_another_grid_is_resampled_as_the_sources_library_does(tmp_path):
  """timm's resample_abs_pos_embed: PyTorch's bicubic with antialiasing; transformers'
  interpolate_pos_encoding: without; an explicit init_from.resample wins."""
  from attention.resample import resample_grid_table  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(21)
  folders = {
    'torch_bicubic_aa': write_timm_folder(tmp_path / 'timm', timm_arrays(rng), 'vit_base_patch16_224'),
    'torch_bicubic': write_transformers_folder(
      tmp_path / 'hf', transformers_arrays(rng, prefix='vit.'), transformers_config('vit')
    ),
  }
  for method, folder in folders.items():
    for chosen in ('', 'bilinear'):
      init_from = pretrained.default_init_from_config()
      init_from.update(path=str(folder), resample=chosen)
      model_config = ml_collections.ConfigDict()
      file_options.complete_model_config(model_config, init_from)
      model = make_vit(model_config, num_classes=CLASSES, image_shape=(24, 24, 3), rngs=nnx.Rngs(0))
      canonical = pretrained.read_canonical(init_from)
      report = pretrained.load_into(model, init_from, canonical)
      used = chosen or method
      assert f'resampled {GRID}x{GRID} -> 6x6 ({used})' in report
      expected = resample_grid_table(canonical[checkpoint_npz.POSEMB_KEY], (GRID, GRID), (6, 6), 0, used)
      np.testing.assert_allclose(_position_table(model)[-36:], np.asarray(expected), atol=1e-6)


# Prediction without a workdir ---------------------------------------------------------------------


def test_predictor_on_a_timm_folder_classes_features_logits_and_pictures(tmp_path):
  from vit.weights.predictor import load_predictor, prepare_pixels  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(11)
  arrays = timm_arrays(rng, layer_scale=True, reg=4, no_embed_class=True)
  labels = [f'class {i}' for i in range(CLASSES)]
  folder = write_timm_folder(tmp_path / 'w', arrays, 'vit_small_patch14_reg4_dinov2', labels=labels)
  predictor = load_predictor(folder)
  image = rng.integers(
    0, 256, (20, 30, 3), dtype=np.uint8
  )  # resized to 18 x 27 (shortest side), cropped 16 x 16
  pixels = prepare_pixels(image, predictor.task.preparation.preprocessing)
  assert pixels.shape == (16, 16, 3)
  normalised = (pixels[None].astype(np.float64) / 255 - 0.5) / 0.5
  expected = dict(act='gelu_exact', eps=1e-6, no_embed_class=True, pool='token')
  np.testing.assert_allclose(
    predictor.features([image]),
    timm_forward(arrays, normalised, pre_logits=True, **expected),
    rtol=1e-3,
    atol=1e-3,
  )
  logits = predictor.logits([image, image])
  np.testing.assert_allclose(logits[0], timm_forward(arrays, normalised, **expected)[0], rtol=1e-3, atol=1e-3)
  [prediction] = predictor([image])
  assert prediction['classes'][0]['name'] == labels[int(np.argmax(logits[0]))]
  picture = predictor.explain(image, tmp_path / 'attention.png')
  assert picture.stat().st_size > 0 and predictor.prediction.title == 'w (timm weights)'
  from trainer.errors import WorkdirError  # pylint: disable=g-import-not-at-top
  from trainer.predictor import load_predictor as load_any  # pylint: disable=g-import-not-at-top

  # one entry point: the trainer's load_predictor opens the folder through the ViT's path opener
  opened = load_any(folder)
  assert type(opened.prediction) is type(predictor.prediction)
  np.testing.assert_array_equal(opened.logits([image, image]), logits)
  with pytest.raises(CheckpointError, match='pos_embed has 16 rows; a 4x4 grid and 5 prefix tokens'):
    load_any(folder, arch='deit_small_patch16_224')  # options reach the opener
  neither = tmp_path / 'neither'
  neither.mkdir()
  (neither / 'config.json').write_text(json.dumps({'name': 'x'}))
  with pytest.raises(WorkdirError, match='not a workdir written by train.py .*, nor weights'):
    load_any(neither)


def test_predictor_on_a_distilled_deit_averages_its_two_heads(tmp_path):
  from vit.weights.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(20)
  arrays = timm_arrays(rng, dist=True)
  predictor = load_predictor(write_timm_folder(tmp_path / 'w', arrays, 'deit_base_distilled_patch16_224'))
  assert predictor.model.distill_head is not None
  image = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)  # resized to 18 x 18, cropped 16 x 16
  from vit.weights.predictor import prepare_pixels  # pylint: disable=g-import-not-at-top

  pixels = prepare_pixels(image, predictor.task.preparation.preprocessing)
  normalised = (pixels[None].astype(np.float64) / 255 - 0.5) / 0.5
  options = dict(act='gelu_exact', eps=1e-6, no_embed_class=False, pool='token')
  np.testing.assert_allclose(
    predictor.logits([image]), timm_forward(arrays, normalised, **options), rtol=1e-3, atol=1e-3
  )
  np.testing.assert_allclose(
    predictor.features([image]),
    timm_forward(arrays, normalised, tokens=True, **options)[:, 0],
    rtol=1e-3,
    atol=1e-3,
  )
  assert predictor.explain(image, tmp_path / 'a.png').exists()


def test_predictor_on_headless_dinov2_gives_features_and_pictures(tmp_path):
  from vit.weights.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(12)
  arrays = transformers_arrays(rng, prefix='', dinov2=True, classes=0)
  folder = write_transformers_folder(
    tmp_path / 'w', arrays, transformers_config('dinov2', eps=1e-6, classes=0)
  )
  predictor = load_predictor(folder)
  image = rng.integers(
    0, 256, (16, 16, 3), dtype=np.uint8
  )  # no processor config: resized to 16 x 16, mean 0.5
  features = predictor.features([image])
  normalised = (image[None].astype(np.float64) / 255 - 0.5) / 0.5
  _, expected = transformers_forward(arrays, normalised, act='gelu_exact', eps=1e-6, dinov2=True)
  np.testing.assert_allclose(features, expected, rtol=1e-3, atol=1e-3)
  assert predictor([image])[0]['classes'] == []
  assert predictor.explain(image, tmp_path / 'a.png').exists()
  with pytest.raises(Exception, match='no classification head'):
    predictor.logits([image])


def test_predictor_resamples_a_transformers_table_as_transformers_does(tmp_path, capsys):
  from attention.resample import resample_grid_table  # pylint: disable=g-import-not-at-top
  from vit.weights.predictor import load_predictor  # pylint: disable=g-import-not-at-top

  arrays = transformers_arrays(np.random.default_rng(22), prefix='', dinov2=True, classes=0)
  processor = {'do_resize': True, 'size': {'height': 24, 'width': 24}, 'resample': 3}
  folder = write_transformers_folder(
    tmp_path / 'w', arrays, transformers_config('dinov2', eps=1e-6, classes=0), processor
  )
  predictor = load_predictor(folder)
  assert f'resampled {GRID}x{GRID} -> 6x6 (torch_bicubic)' in capsys.readouterr().out
  canonical = sources.read_weights(folder).canonical[checkpoint_npz.POSEMB_KEY]
  expected = resample_grid_table(canonical, (GRID, GRID), (6, 6), 0, 'torch_bicubic')
  np.testing.assert_allclose(_position_table(predictor.model)[-36:], np.asarray(expected), atol=1e-6)


@pytest.mark.slow
def test_predict_py_with_weights_answers_explains_and_writes_features(tmp_path):
  import pathlib  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top

  from PIL import Image  # pylint: disable=g-import-not-at-top

  root = pathlib.Path(__file__).resolve().parents[1]
  rng = np.random.default_rng(13)
  folder = write_timm_folder(tmp_path / 'w', timm_arrays(rng), 'vit_base_patch16_224', labels=list('abcde'))
  Image.fromarray(rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)).save(tmp_path / 'cat.png')
  command = [sys.executable, 'predict.py', f'--weights={folder}', str(tmp_path / 'cat.png')]
  run = subprocess.run([*command, f'--explain={tmp_path / "out"}'], cwd=root, capture_output=True, text=True)
  assert run.returncode == 0, run.stderr
  assert run.stdout.startswith(f'{tmp_path / "cat.png"}: ') and '%' in run.stdout
  assert (tmp_path / 'out' / '001_cat.png').exists()
  run = subprocess.run(
    [*command, f'--features={tmp_path / "f.npy"}'], cwd=root, capture_output=True, text=True
  )
  assert run.returncode == 0, run.stderr
  assert np.load(tmp_path / 'f.npy').shape == (1, WIDTH)
  pickle = tmp_path / 'model.pth'
  pickle.write_bytes(b'x')
  run = subprocess.run(
    [sys.executable, 'predict.py', f'--weights={pickle}', 'x.png'], cwd=root, capture_output=True, text=True
  )
  assert run.returncode == 2 and run.stderr.count('\n') == 1 and 'is a pickle' in run.stderr


@pytest.mark.slow
def test_fine_tune_from_a_timm_folder_then_export_to_timm_and_transformers(tmp_path):
  """``init_from.path`` a timm folder: model options from the file, a new head (5 -> 10 classes) and a
  resampled table (4x4 -> 2x2); then the export command writes folders that read back to the trained model."""
  import pathlib  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top

  import ml_collections  # pylint: disable=g-import-not-at-top

  from tests.vit_test_configs import tiny_vit_config  # pylint: disable=g-import-not-at-top
  from trainer.evaluation import restore_checkpoint  # pylint: disable=g-import-not-at-top
  from trainer.io import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from trainer.loop import train_and_evaluate  # pylint: disable=g-import-not-at-top

  root = pathlib.Path(__file__).resolve().parents[1]
  arrays = timm_arrays(np.random.default_rng(15), channels=1)
  folder = write_timm_folder(tmp_path / 'timm', arrays, 'vit_base_patch16_224')
  config = tiny_vit_config(total_steps=2, eval_every_steps=2, checkpoint_every_steps=2)
  config.model = ml_collections.ConfigDict(dict(dropout=0.0))
  config.init_from = pretrained.default_init_from_config()
  config.init_from.path = str(folder)
  workdir = tmp_path / 'run'
  train_and_evaluate(config, workdir)
  saved = workdir_lib.load_config(workdir)
  assert (saved.model.width, saved.model.num_heads, saved.model.activation) == (WIDTH, HEADS, 'gelu_exact')
  _, parts, params, _ = restore_checkpoint(workdir, 'latest', read_data=False)
  trained = _params(parts.merge(params))
  for to in ('timm', 'transformers'):
    out = tmp_path / to
    command = [sys.executable, '-m', 'vit.weights.export', f'--workdir={workdir}', f'--to={to}', str(out)]
    run = subprocess.run(command, cwd=root, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    source = sources.read_weights(out)
    assert source.num_classes == 10 and source.image_size == (8, 8)
    model = make_vit(source.model, num_classes=10, image_shape=(8, 8, 1), rngs=nnx.Rngs(1))
    checkpoint_npz.canonical_to_model(model, source.canonical)
    for first, second in zip(trained, _params(model), strict=True):
      np.testing.assert_array_equal(first, second)


def test_video_inflation_from_timm_weights_folds_layer_scale_exactly(tmp_path):
  """DeiT III weights inflate into a divided video model: with the video's tanh GELU on both sides, a
  one-frame clip gives the image model's logits (layer scale folded into the projections it scales)."""
  from video.inflate import image_vit_from_weights, init_from_image_vit  # pylint: disable=g-import-not-at-top
  from video.model import make_video_model  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(16)
  arrays = timm_arrays(rng, layer_scale=True, no_embed_class=True)
  folder = write_timm_folder(tmp_path / 'w', arrays, 'deit3_base_patch16_224')
  section = dict(width=WIDTH, depth=DEPTH, num_heads=HEADS, mlp_dim=MLP, tubelet=(1, PATCH, PATCH))
  section.update(attention='divided', temporal_posemb='none', pool='cls')
  video = make_video_model(section, num_classes=CLASSES, clip_shape=(1, IMAGE, IMAGE, 3), rngs=nnx.Rngs(0))
  notes = init_from_image_vit(video, image_vit_from_weights(folder))
  assert notes == ["activation 'gelu_exact' (the video model's: 'gelu', tanh)"]
  source = sources.read_weights(folder)
  tanh_image = make_vit(
    dict(source.model, activation='gelu'),
    num_classes=CLASSES,
    image_shape=(IMAGE, IMAGE, 3),
    rngs=nnx.Rngs(0),
  )
  checkpoint_npz.canonical_to_model(tanh_image, source.canonical)
  images = _images(rng)
  np.testing.assert_allclose(
    np.asarray(video(images[:, None])[0]), np.asarray(tanh_image(images)[0]), rtol=1e-4, atol=1e-4
  )
  registers = write_timm_folder(
    tmp_path / 'r',
    timm_arrays(rng, layer_scale=True, reg=4, no_embed_class=True),
    'vit_small_patch14_reg4_dinov2',
  )
  with pytest.raises(ConfigError, match='register_tokens, which the video model has no place for'):
    init_from_image_vit(video, image_vit_from_weights(registers))
  distilled = write_timm_folder(
    tmp_path / 'd', timm_arrays(rng, dist=True), 'deit_small_distilled_patch16_224'
  )
  with pytest.raises(ConfigError, match='distill_token, which the video model has no place for'):
    init_from_image_vit(video, image_vit_from_weights(distilled))


@pytest.mark.parametrize('kind', ['timm', 'transformers'])
def test_a_header_read_gives_what_a_full_read_gives_but_the_weights(kind, tmp_path):
  rng = np.random.default_rng(31)
  if kind == 'timm':
    folder = write_timm_folder(
      tmp_path / 'w',
      timm_arrays(rng, layer_scale=True, reg=4, no_embed_class=True),
      'vit_small_patch14_reg4_dinov2',
    )
  else:
    folder = write_transformers_folder(tmp_path / 'w', transformers_arrays(rng), transformers_config('vit'))
  full, header = sources.read_weights(folder), sources.read_weights(folder, header_only=True)
  assert (header.model, header.image_size, header.num_classes, header.class_names, header.preprocessing) == (
    full.model,
    full.image_size,
    full.num_classes,
    full.class_names,
    full.preprocessing,
  )
  assert {k: v.shape for k, v in header.canonical.items()} == {k: v.shape for k, v in full.canonical.items()}
  assert not any(np.any(value) for value in header.canonical.values())


def test_completing_a_config_reads_the_weights_header_once_and_no_arrays(tmp_path, monkeypatch):
  """The ViT's model reader fills the fields a timm ``init_from`` decides from the JSON and the
  safetensors header, once, and keeps nothing between calls."""
  import ml_collections  # pylint: disable=g-import-not-at-top

  from tests.vit_test_configs import tiny_vit_config  # pylint: disable=g-import-not-at-top
  from trainer.task import load_task  # pylint: disable=g-import-not-at-top

  folder = write_timm_folder(
    tmp_path / 'w', timm_arrays(np.random.default_rng(32), channels=1), 'vit_base_patch16_224'
  )
  headers = []
  read_header = sources._shapes  # pylint: disable=protected-access

  def counted(path):
    headers.append(path)
    return read_header(path)

  def refused(path):
    raise AssertionError(f'the arrays of {path} were read while completing a config')

  monkeypatch.setattr(sources, '_shapes', counted)
  monkeypatch.setattr(sources, '_load', refused)
  for _ in range(2):
    config = tiny_vit_config()
    config.model = ml_collections.ConfigDict(dict(dropout=0.0))
    config.init_from = pretrained.default_init_from_config()
    config.init_from.path = str(folder)
    task = load_task(config)
    assert (config.model.width, config.model.num_heads, config.model.activation) == (
      WIDTH,
      HEADS,
      'gelu_exact',
    )
    assert task.sizes.num_classes == 10
  assert len(headers) == 2  # once per config completed, never from a cache
