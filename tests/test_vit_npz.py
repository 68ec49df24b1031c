"""Loading ViT ``.npz`` checkpoints: our model computes what a plain NumPy forward pass of each layout computes."""

import math

import numpy as np
import pytest
from flax import nnx

from attention.positional import big_vision_sincos_2d
from trainer.errors import CheckpointError, MissingFileError
from vit import pretrained
from vit.model import make_vit
from vit.weights import checkpoint_npz

WIDTH, DEPTH, HEADS, MLP, PATCH, CLASSES = 8, 2, 2, 16, 4, 3


def _official_arrays(rng, *, pool='cls', pre_logits=0, grid=(2, 2), classes=CLASSES):
  """Random arrays in the official layout; every value differs, so any wrong mapping shows."""

  def draw(*shape):
    return rng.normal(0.0, 0.5, shape).astype(np.float32)

  head_dim = WIDTH // HEADS
  arrays = {'embedding/kernel': draw(PATCH, PATCH, 1, WIDTH), 'embedding/bias': draw(WIDTH)}
  rows = grid[0] * grid[1] + (1 if pool == 'cls' else 0)
  arrays['Transformer/posembed_input/pos_embedding'] = draw(1, rows, WIDTH)
  if pool == 'cls':
    arrays['cls'] = draw(1, 1, WIDTH)
  for layer in range(DEPTH):
    block = f'Transformer/encoderblock_{layer}'
    for norm in ('LayerNorm_0', 'LayerNorm_2'):
      arrays[f'{block}/{norm}/scale'] = 1.0 + draw(WIDTH)
      arrays[f'{block}/{norm}/bias'] = draw(WIDTH)
    for name in ('query', 'key', 'value'):
      arrays[f'{block}/MultiHeadDotProductAttention_1/{name}/kernel'] = draw(WIDTH, HEADS, head_dim)
      arrays[f'{block}/MultiHeadDotProductAttention_1/{name}/bias'] = draw(HEADS, head_dim)
    arrays[f'{block}/MultiHeadDotProductAttention_1/out/kernel'] = draw(HEADS, head_dim, WIDTH)
    arrays[f'{block}/MultiHeadDotProductAttention_1/out/bias'] = draw(WIDTH)
    arrays[f'{block}/MlpBlock_3/Dense_0/kernel'] = draw(WIDTH, MLP)
    arrays[f'{block}/MlpBlock_3/Dense_0/bias'] = draw(MLP)
    arrays[f'{block}/MlpBlock_3/Dense_1/kernel'] = draw(MLP, WIDTH)
    arrays[f'{block}/MlpBlock_3/Dense_1/bias'] = draw(WIDTH)
  arrays['Transformer/encoder_norm/scale'] = 1.0 + draw(WIDTH)
  arrays['Transformer/encoder_norm/bias'] = draw(WIDTH)
  if pre_logits:
    arrays['pre_logits/kernel'], arrays['pre_logits/bias'] = draw(WIDTH, pre_logits), draw(pre_logits)
  arrays['head/kernel'], arrays['head/bias'] = draw(pre_logits or WIDTH, classes), draw(classes)
  return arrays


def _to_big_vision(arrays, *, scanned, prefix='params/'):
  """The same parameters in big_vision's names (the class-token row must be absent already)."""
  names = {
    'LayerNorm_0': 'LayerNorm_0',
    'LayerNorm_2': 'LayerNorm_1',
    'MultiHeadDotProductAttention_1': 'MultiHeadDotProductAttention_0',
    'MlpBlock_3': 'MlpBlock_0',
  }
  out, stacked = {}, {}
  for key, value in arrays.items():
    if key == 'Transformer/posembed_input/pos_embedding':
      out[prefix + 'pos_embedding'] = value
    elif key.startswith('Transformer/encoderblock_'):
      _, block, module, rest = key.split('/', 3)
      new = f'{names[module]}/{rest}'
      if scanned:
        stacked.setdefault(new, {})[int(block.rpartition('_')[2])] = value
      else:
        out[f'{prefix}Transformer/{block}/{new}'] = value
    else:
      out[prefix + key] = value
  for key, layers in stacked.items():
    out[f'{prefix}Transformer/encoderblock/{key}'] = np.stack([layers[i] for i in sorted(layers)])
  return out


# A plain NumPy forward pass that reads the official names directly.


def _gelu(x, exact):
  if exact:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / np.sqrt(2.0)))
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _layer_norm(x, p, key, eps):
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * p[f'{key}/scale'] + p[f'{key}/bias']


def _attention(x_q, x_kv, p, key):
  q = np.einsum('btd,dhk->bthk', x_q, p[f'{key}/query/kernel']) + p[f'{key}/query/bias']
  k = np.einsum('btd,dhk->bthk', x_kv, p[f'{key}/key/kernel']) + p[f'{key}/key/bias']
  v = np.einsum('btd,dhk->bthk', x_kv, p[f'{key}/value/kernel']) + p[f'{key}/value/bias']
  logits = np.einsum('bqhk,bshk->bhqs', q, k) / np.sqrt(q.shape[-1])
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  mixed = np.einsum('bhqs,bshk->bqhk', weights, v)
  return np.einsum('bqhk,hkd->bqd', mixed, p[f'{key}/out/kernel']) + p[f'{key}/out/bias']


def _mlp(x, p, key, exact):
  hidden = _gelu(x @ p[f'{key}/Dense_0/kernel'] + p[f'{key}/Dense_0/bias'], exact)
  return hidden @ p[f'{key}/Dense_1/kernel'] + p[f'{key}/Dense_1/bias']


def reference_logits(p, images, *, pool='cls', exact_gelu=False, eps=1e-6, posemb=None):
  """Official layout: the position table (with the class row when pooling by class token) is
  added after the class token is prepended; ``posemb`` replaces it (a fixed table)."""
  batch, height, width, channels = images.shape
  gh, gw = height // PATCH, width // PATCH
  patches = images.reshape(batch, gh, PATCH, gw, PATCH, channels).transpose(0, 1, 3, 2, 4, 5)
  x = np.einsum('bhwijc,ijcd->bhwd', patches, p['embedding/kernel']).reshape(batch, gh * gw, -1)
  x = x + p['embedding/bias']
  if pool == 'cls':
    x = np.concatenate([np.broadcast_to(p['cls'], (batch, 1, x.shape[-1])), x], axis=1)
  if posemb is None:
    x = x + p['Transformer/posembed_input/pos_embedding']
  else:
    x[:, -gh * gw :] += posemb
  for layer in range(DEPTH):
    block = f'Transformer/encoderblock_{layer}'
    y = _layer_norm(x, p, f'{block}/LayerNorm_0', eps)
    x = x + _attention(y, y, p, f'{block}/MultiHeadDotProductAttention_1')
    x = x + _mlp(_layer_norm(x, p, f'{block}/LayerNorm_2', eps), p, f'{block}/MlpBlock_3', exact_gelu)
  x = _layer_norm(x, p, 'Transformer/encoder_norm', eps)
  if pool == 'cls':
    features = x[:, 0]
  elif pool == 'gap':
    features = x.mean(1)
  else:
    probe = np.broadcast_to(p['MAPHead_0/probe'], (batch, 1, x.shape[-1]))
    pooled = _attention(probe, x, p, 'MAPHead_0/MultiHeadDotProductAttention_0')
    pooled = pooled + _mlp(
      _layer_norm(pooled, p, 'MAPHead_0/LayerNorm_0', 1e-6), p, 'MAPHead_0/MlpBlock_0', exact_gelu
    )
    features = pooled[:, 0]
  if 'pre_logits/kernel' in p:
    features = np.tanh(features @ p['pre_logits/kernel'] + p['pre_logits/bias'])
  return features @ p['head/kernel'] + p['head/bias']


def _model(*, image=8, classes=CLASSES, **options):
  shape = dict(patch_size=PATCH, width=WIDTH, depth=DEPTH, num_heads=HEADS, mlp_dim=MLP) | options
  return make_vit(shape, num_classes=classes, image_shape=(image, image, 1), rngs=nnx.Rngs(0))


def _images(rng, size=8):
  return rng.normal(size=(2, size, size, 1)).astype(np.float32)


def _loaded(model, arrays, **options):
  checkpoint_npz.canonical_to_model(model, checkpoint_npz.to_canonical(arrays), **options)
  return model


@pytest.mark.parametrize('exact_gelu', [False, True])
def test_official_layout_computes_the_reference_forward_pass(exact_gelu):
  rng = np.random.default_rng(0)
  arrays = _official_arrays(rng, pre_logits=6)
  model = _loaded(_model(pre_logits=6, activation='gelu_exact' if exact_gelu else 'gelu'), arrays)
  images = _images(rng)
  ours = np.asarray(model(images)[0])
  # tight: the two GELUs differ by about 6e-5 in these logits, float32 rounding by about 2e-7
  np.testing.assert_allclose(ours, reference_logits(arrays, images, exact_gelu=exact_gelu), atol=1e-5, rtol=0)
  other = reference_logits(arrays, images, exact_gelu=not exact_gelu)
  assert np.abs(ours - other).max() > 2e-5


def test_layernorm_epsilon_is_the_one_asked_for():
  rng = np.random.default_rng(1)
  arrays = _official_arrays(rng)
  images = _images(rng) * 1e-3  # tiny activations, so epsilon matters
  arrays['embedding/bias'] *= 1e-3
  arrays['Transformer/posembed_input/pos_embedding'] *= 1e-3
  arrays['cls'] *= 1e-3
  model = _loaded(_model(layernorm_epsilon=1e-5), arrays)
  expected = reference_logits(arrays, images, eps=1e-5)
  np.testing.assert_allclose(np.asarray(model(images)[0]), expected, atol=2e-4, rtol=1e-4)
  assert not np.allclose(expected, reference_logits(arrays, images, eps=1e-6), atol=1e-3)


def test_a_wrong_mapping_would_change_the_logits():
  """The values are such that swapping q and k, or the class-token row, shows in the logits."""
  rng = np.random.default_rng(2)
  arrays = _official_arrays(rng)
  images = _images(rng)
  expected = reference_logits(arrays, images)
  swapped = dict(arrays)
  block = 'Transformer/encoderblock_0/MultiHeadDotProductAttention_1'
  swapped[f'{block}/query/kernel'], swapped[f'{block}/key/kernel'] = (
    arrays[f'{block}/key/kernel'],
    arrays[f'{block}/query/kernel'],
  )
  assert not np.allclose(np.asarray(_loaded(_model(), swapped)(images)[0]), expected, atol=1e-2)
  heads_swapped = dict(arrays)
  heads_swapped[f'{block}/value/kernel'] = arrays[f'{block}/value/kernel'][:, ::-1]
  assert not np.allclose(np.asarray(_loaded(_model(), heads_swapped)(images)[0]), expected, atol=1e-2)
  no_fold = dict(arrays)
  table = arrays['Transformer/posembed_input/pos_embedding']
  no_fold['Transformer/posembed_input/pos_embedding'] = np.concatenate([table[:, 1:], table[:, :1]], axis=1)
  assert not np.allclose(np.asarray(_loaded(_model(), no_fold)(images)[0]), expected, atol=1e-2)


@pytest.mark.parametrize('scanned', [False, True])
@pytest.mark.parametrize('prefix', ['params/', 'params/img/'])
def test_big_vision_layout_gap_and_map_heads(scanned, prefix):
  rng = np.random.default_rng(3)
  pool = 'map' if scanned else 'gap'
  arrays = _official_arrays(rng, pool=pool)
  if pool == 'map':
    head_dim = WIDTH // HEADS
    arrays['MAPHead_0/probe'] = rng.normal(size=(1, 1, WIDTH)).astype(np.float32)
    for name in ('query', 'key', 'value'):
      arrays[f'MAPHead_0/MultiHeadDotProductAttention_0/{name}/kernel'] = rng.normal(
        size=(WIDTH, HEADS, head_dim)
      ).astype(np.float32)
      arrays[f'MAPHead_0/MultiHeadDotProductAttention_0/{name}/bias'] = rng.normal(
        size=(HEADS, head_dim)
      ).astype(np.float32)
    arrays['MAPHead_0/MultiHeadDotProductAttention_0/out/kernel'] = rng.normal(
      size=(HEADS, head_dim, WIDTH)
    ).astype(np.float32)
    arrays['MAPHead_0/MultiHeadDotProductAttention_0/out/bias'] = rng.normal(size=WIDTH).astype(np.float32)
    arrays['MAPHead_0/LayerNorm_0/scale'] = rng.normal(size=WIDTH).astype(np.float32)
    arrays['MAPHead_0/LayerNorm_0/bias'] = rng.normal(size=WIDTH).astype(np.float32)
    for dense, shape in (('Dense_0', (WIDTH, MLP)), ('Dense_1', (MLP, WIDTH))):
      arrays[f'MAPHead_0/MlpBlock_0/{dense}/kernel'] = rng.normal(size=shape).astype(np.float32) * 0.3
      arrays[f'MAPHead_0/MlpBlock_0/{dense}/bias'] = rng.normal(size=shape[1]).astype(np.float32)
  big_vision = _to_big_vision(arrays, scanned=scanned, prefix=prefix)
  assert checkpoint_npz.detect_layout(big_vision) == 'big_vision'
  model = _loaded(_model(pool=pool), big_vision)
  images = _images(rng)
  np.testing.assert_allclose(
    np.asarray(model(images)[0]), reference_logits(arrays, images, pool=pool), atol=2e-4, rtol=1e-4
  )


def test_big_vision_sincos2d_table_layout_and_frequencies():
  table = big_vision_sincos_2d(2, 3, 8)
  # token (row 1, column 2): x = 2, y = 1; w = [1, 10000^-1]
  w = np.array([1.0, 1e-4])
  expected = np.concatenate([np.sin(2 * w), np.cos(2 * w), np.sin(1 * w), np.cos(1 * w)])
  np.testing.assert_allclose(table[1 * 3 + 2], expected, rtol=1e-6)
  rng = np.random.default_rng(4)
  arrays = _official_arrays(rng, pool='gap')
  del arrays['Transformer/posembed_input/pos_embedding']
  model = _loaded(
    _model(pool='gap', posemb='sincos2d', sincos2d_layout='big_vision'), _to_big_vision(arrays, scanned=False)
  )
  images = _images(rng)
  expected_logits = reference_logits(arrays, images, pool='gap', posemb=big_vision_sincos_2d(2, 2, WIDTH))
  np.testing.assert_allclose(np.asarray(model(images)[0]), expected_logits, atol=2e-4, rtol=1e-4)


def test_export_writes_the_official_layout_and_reads_back_identically(tmp_path):
  rng = np.random.default_rng(5)
  arrays = _official_arrays(rng, pre_logits=6)
  model = _loaded(_model(pre_logits=6), arrays)
  path = tmp_path / 'model.npz'
  checkpoint_npz.write_official_npz(model, path)
  written = checkpoint_npz.read_npz(path)
  assert set(written) == set(arrays)
  assert all(written[key].shape == arrays[key].shape for key in arrays)
  again = _loaded(_model(pre_logits=6), written)
  images = _images(rng)
  np.testing.assert_array_equal(np.asarray(again(images)[0]), np.asarray(model(images)[0]))
  np.testing.assert_allclose(
    np.asarray(again(images)[0]), reference_logits(written, images), atol=2e-4, rtol=1e-4
  )


def test_new_head_is_zero_and_pre_logits_can_be_dropped():
  rng = np.random.default_rng(6)
  arrays = _official_arrays(rng, pre_logits=6)
  model = _model(classes=5)
  report = checkpoint_npz.canonical_to_model(model, checkpoint_npz.to_canonical(arrays))
  assert np.all(np.asarray(model.head.kernel[...]) == 0) and np.all(np.asarray(model.head.bias[...]) == 0)
  assert any('pre_logits/kernel' in item for item in report.skipped)
  same_classes = _loaded(_model(), _official_arrays(rng), init_head=False)
  assert np.all(np.asarray(same_classes.head.kernel[...]) == 0)


def test_a_head_that_does_not_fit_is_zero_initialised_whole():
  rng = np.random.default_rng(10)
  images = _images(rng)
  # the head reads a 6-wide pre_logits the model drops: its kernel does not fit, its bias would
  report = checkpoint_npz.canonical_to_model(
    _model(), checkpoint_npz.to_canonical(_official_arrays(rng, pre_logits=6))
  )
  assert (
    "head: zero-initialised (the checkpoint's head/kernel is (6, 3), the model's (8, 3))" in report.adapted
  )
  # a pre_logits as wide as the model: both arrays fit, but the head was trained on the dropped layer
  arrays = _official_arrays(rng, pre_logits=WIDTH)
  model = _model()
  report = checkpoint_npz.canonical_to_model(model, checkpoint_npz.to_canonical(arrays))
  assert any('reads the pre_logits layer' in item for item in report.adapted)
  for model_head in (model.head.kernel, model.head.bias):
    np.testing.assert_array_equal(np.asarray(model_head[...]), 0.0)
  np.testing.assert_array_equal(np.asarray(model(images)[0]), 0.0)
  fitting = _official_arrays(rng)
  model = _loaded(_model(), fitting)
  np.testing.assert_array_equal(np.asarray(model.head.bias[...]), fitting['head/bias'])
  np.testing.assert_array_equal(np.asarray(model.head.kernel[...]), fitting['head/kernel'])


def _optimizer_and_text_tower(tower, kind, rng):
  """What big_vision's files hold beside the image tower, by kind of file."""
  if kind == 'trainer_checkpoint':
    return {
      'opt/1/0/mu/embedding/kernel': np.zeros_like(tower['params/embedding/kernel']),
      'opt/1/0/nu/embedding/kernel': np.zeros_like(tower['params/embedding/kernel']),
      'opt/1/0/count': np.zeros((), np.int32),
      'chrono/accum_train_time': np.zeros(()),
      'chrono/accum_examples_seen': np.zeros(()),
    }
  if kind == 'two_tower':
    return {
      'params/txt/Embed_0/embedding': rng.normal(size=(11, WIDTH)).astype(np.float32),
      'params/txt/head/kernel': rng.normal(size=(WIDTH, WIDTH)).astype(np.float32),
      'params/t': np.ones((1,), np.float32),
      'params/b': np.zeros((1,), np.float32),
    }
  return {}


@pytest.mark.parametrize(
  'kind, prefix, ignored',
  [
    ('trainer_checkpoint', 'params/', 'ignored 5 arrays outside the image tower params/: chrono/ 2, opt/ 3'),
    (
      'two_tower',
      'params/img/',
      'ignored 4 arrays outside the image tower params/img/: params/b 1, params/t 1, params/txt/ 2',
    ),
    ('bare_tree', '', None),
    ('bare_scanned_tree', '', None),
  ],
)
def test_big_vision_files_as_they_come(kind, prefix, ignored, tmp_path, capsys):
  rng = np.random.default_rng(11)
  arrays = _official_arrays(rng, pool='gap')
  tower = _to_big_vision(arrays, scanned=kind == 'bare_scanned_tree', prefix=prefix)
  path = tmp_path / f'{kind}.npz'
  np.savez(path, **tower, **_optimizer_and_text_tower(tower, kind, rng))
  config = pretrained.default_init_from_config()
  config.path = str(path)
  model = _model(pool='gap')
  summary = pretrained.load_into(model, config, pretrained.read_canonical(config))
  printed = capsys.readouterr().out
  if ignored:
    assert f'init_from {path}: {ignored}\n' in printed
  else:
    assert 'ignored' not in printed
  assert 'skipped' not in summary and 'zero-initialised' not in summary
  images = _images(rng)
  np.testing.assert_allclose(
    np.asarray(model(images)[0]), reference_logits(arrays, images, pool='gap'), atol=2e-4, rtol=1e-4
  )


@pytest.mark.parametrize('method', ['bilinear', 'bicubic', 'scipy_zoom'])
def test_position_table_is_resampled_to_a_new_grid_with_the_class_row_apart(method):
  from attention.resample import resample_grid_table

  rng = np.random.default_rng(7)
  arrays = _official_arrays(rng)
  model = _model(image=12)  # 3x3 grid from a 2x2 one
  report = checkpoint_npz.canonical_to_model(
    model, checkpoint_npz.to_canonical(arrays), resample_method=method
  )
  table = arrays['Transformer/posembed_input/pos_embedding'][0]
  expected = np.asarray(resample_grid_table(table[1:], (2, 2), (3, 3), 0, method))
  np.testing.assert_allclose(np.asarray(model.encoder.positional.tables[0].table[...]), expected, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(model.class_token[...]), arrays['cls'] + table[:1][None], rtol=1e-6)
  assert any('resampled 2x2 -> 3x3' in item for item in report.adapted)


def test_not_an_npz_is_one_line(tmp_path):
  path = tmp_path / 'weights.npz'
  path.write_text('not an archive')
  with pytest.raises(CheckpointError, match='is not an .npz file'):
    checkpoint_npz.read_npz(path)
  with pytest.raises(MissingFileError, match='does not exist'):
    checkpoint_npz.read_npz(tmp_path / 'absent.npz')


def test_another_architecture_names_the_key_and_both_shapes():
  rng = np.random.default_rng(8)
  arrays = checkpoint_npz.to_canonical(_official_arrays(rng))
  wide = _model(width=16)
  with pytest.raises(
    CheckpointError, match=r"'embedding/kernel' has shape \(4, 4, 1, 8\); the model needs \(4, 4, 1, 16\)"
  ):
    checkpoint_npz.canonical_to_model(wide, arrays)
  four_heads = _model(num_heads=4)
  with pytest.raises(
    CheckpointError, match=r'query/kernel.* has shape \(8, 2, 4\); the model needs \(8, 4, 2\)'
  ):
    checkpoint_npz.canonical_to_model(four_heads, arrays)
  shallow = _model(depth=1)
  with pytest.raises(CheckpointError, match=r"key 'Transformer/encoderblock_1/.*has no place in the model"):
    checkpoint_npz.canonical_to_model(shallow, arrays)
  report = checkpoint_npz.canonical_to_model(shallow, arrays, strict=False)
  assert any('encoderblock_1' in item for item in report.skipped)
  deep = _model(depth=3)
  with pytest.raises(
    CheckpointError,
    match=r"checkpoint has no 'Transformer/encoderblock_2/LayerNorm_0/scale'; the model needs \(8,\)",
  ):
    checkpoint_npz.canonical_to_model(deep, arrays)


def test_patch_kernel_resize_keeps_the_response_to_upsampled_patches():
  import jax

  rng = np.random.default_rng(9)
  kernel = rng.normal(size=(4, 4, 1, WIDTH)).astype(np.float32)
  resized = checkpoint_npz.resize_patch_kernel(kernel, (8, 8))
  patch = rng.normal(size=(4, 4)).astype(np.float32)
  upsampled = np.asarray(jax.image.resize(patch, (8, 8), method='bilinear', antialias=False))
  np.testing.assert_allclose(
    np.einsum('ij,ijd->d', upsampled, resized[:, :, 0]),
    np.einsum('ij,ijd->d', patch, kernel[:, :, 0]),
    atol=1e-4,
  )
  arrays = _official_arrays(rng)
  model = _model(image=16, patch_size=8)  # the same 2x2 grid with 8x8 patches
  report = checkpoint_npz.canonical_to_model(model, checkpoint_npz.to_canonical(arrays))
  assert any('pseudo-inverse' in item for item in report.adapted)
