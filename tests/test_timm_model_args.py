"""timm ViTs read from what their folder says (``architecture``, ``model_args``, ``pretrained_cfg``) and
written with ``model_args`` that rebuild them, checked against the NumPy forward of timm's maths in
``tests/test_vit_weights.py``. No PyTorch."""

import json

import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from tests import test_vit_weights as tw
from trainer.errors import CheckpointError
from vit.model import make_vit
from vit.weights import export, sources


def _logits(source: sources.Weights, images):
  return np.asarray(tw._model_from(source)(images)[0])


def test_vit_medium_gap_is_built_from_its_architectures_model_args(tmp_path):
  """``vit_medium_patch16_gap_256``: no class token, average pooling with the final norm before it,
  no qkv bias, layer scale: what timm's function for the name says, the sizes from the folder."""
  rng = np.random.default_rng(30)
  arrays = tw.timm_arrays(rng, cls=False, layer_scale=True)
  for layer in range(tw.DEPTH):
    del arrays[f'blocks.{layer}.attn.qkv.bias']
  source = sources.read_weights(tw.write_timm_folder(tmp_path / 'w', arrays, 'vit_medium_patch16_gap_256'))
  assert (source.model['pool'], source.model['fc_norm'], source.model['layer_scale']) == ('gap', False, 1e-6)
  images = tw._images(rng)
  expected = tw.timm_forward(arrays, images, act='gelu_exact', eps=1e-6, no_embed_class=False, pool='avg')
  np.testing.assert_allclose(_logits(source, images), expected, rtol=2e-4, atol=2e-4)


def test_a_class_token_that_is_not_pooled_is_a_register(tmp_path):
  """``class_token=True`` with ``global_pool='avg'``: the class token attends but is not pooled."""
  rng = np.random.default_rng(31)
  arrays = tw.timm_arrays(rng, reg=2)
  args = dict(class_token=True, global_pool='avg', fc_norm=False, reg_tokens=2)
  folder = tw.write_timm_folder(tmp_path / 'w', arrays, 'vit_base_patch16_224', model_args=args)
  source = sources.read_weights(folder)
  assert (source.model['pool'], source.model['reg_tokens']) == ('gap', 3)
  images = tw._images(rng)
  expected = tw.timm_forward(arrays, images, act='gelu_exact', eps=1e-6, no_embed_class=False, pool='avg')
  np.testing.assert_allclose(_logits(source, images), expected, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize(
  'architecture, model_args, message',
  [
    (
      'vit_giant_patch14_dinov2',
      {},
      r'act_layer=nn.SiLU, mlp_layer=SwiGLUPacked, which our ViT does not have',
    ),
    (
      'vit_base_patch16_xp_224',
      {},
      r'norm_layer=RmsNorm, block_fn=ParallelScalingBlock, query/key norms \(qk_norm\)',
    ),
    ('vit_base_patch16_rope_reg1_gap_256', {}, r'rotary position embeddings \(RoPE\)'),
    ('vit_base_patch16_224', {'pos_embed': 'none'}, r"pos_embed='none'; only a learned table"),
    ('vit_base_patch16_224', {'act_layer': 'silu'}, r"act_layer='silu'; the ones read"),
    ('vit_base_patch16_224', {'global_pool': 'avgmax'}, r"global_pool='avgmax'"),
    ('my_own_vit', {'embed_dim': 24}, r"unknown timm architecture 'my_own_vit' .*num_heads"),
  ],
)
def test_what_our_vit_has_not_is_one_line_naming_it(architecture, model_args, message, tmp_path):
  arrays = tw.timm_arrays(np.random.default_rng(32))
  folder = tw.write_timm_folder(tmp_path / 'w', arrays, architecture, model_args=model_args)
  config = json.loads((folder / 'config.json').read_text())
  if architecture == 'my_own_vit':
    del config['model_args']['num_heads']
    (folder / 'config.json').write_text(json.dumps(config))
  with pytest.raises(CheckpointError, match=message) as error:
    sources.read_weights(folder)
  assert '\n' not in str(error.value)


@pytest.fixture
def tiny_at_real_size(monkeypatch):
  """timm's ``vit_tiny_patch16_224`` / ``deit_tiny_patch16_224`` sizes (192 wide, 3 heads, 12 blocks)."""
  sizes = dict(WIDTH=192, HEADS=3, DEPTH=12, MLP=768, PATCH=16, IMAGE=224, GRID=14)
  for name, value in sizes.items():
    monkeypatch.setattr(tw, name, value)
  return tw.timm_arrays(np.random.default_rng(33), classes=4)


def test_a_bare_file_is_prepared_as_timm_prepares_its_architecture(tiny_at_real_size, tmp_path):
  """No ``pretrained_cfg``: the tag's (default: the architecture's default tag's) mean, std and crop,
  from timm's ``default_cfgs``: AugReg mean = std = 0.5, DeiT ImageNet's, both ``crop_pct`` 0.9."""
  file = tmp_path / 'tiny.safetensors'
  save_file(tiny_at_real_size, str(file))
  augreg = sources.read_weights(file, 'vit_tiny_patch16_224').preprocessing
  assert (augreg.mean, augreg.std) == ((0.5,) * 3, (0.5,) * 3)
  assert (augreg.resize, augreg.size, augreg.crop) == ('shortest', (248,), (224, 224))  # floor(224 / 0.9)
  deit = sources.read_weights(file, 'deit_tiny_patch16_224').preprocessing
  assert (deit.mean, deit.std) == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)) and deit.size == (248,)
  assert sources.read_weights(file, 'vit_tiny_patch16_224.augreg_in21k').preprocessing.mean == (0.5,) * 3
  with pytest.raises(
    CheckpointError, match=r"timm has none for 'vit_tiny_patch16_224.nope' \(its tags: augreg"
  ):
    sources.read_weights(file, 'vit_tiny_patch16_224.nope')
  with pytest.raises(CheckpointError, match=r'bare \.safetensors file: name its timm architecture'):
    sources.read_weights(file)


# Export with no architecture named --------------------------------------------------------------


EXPORTS = {
  # our model section -> (architecture chosen, timm_forward's act / eps / pool)
  'digits-like: tanh GELU, class token': (dict(), 'vit_base_patch16_224', 'gelu', 1e-6, 'token'),
  'registers, layer scale, fc_norm, average pooling': (
    dict(pool='gap', reg_tokens=2, layer_scale=0.1, fc_norm=True, activation='gelu_exact'),
    'vit_base_patch16_224', 'gelu_exact', 1e-6, 'avg',
  ),
  'CLIP-like: epsilon 1e-5, quick GELU, norm_pre': (
    dict(layernorm_epsilon=1e-5, activation='quick_gelu', norm_pre=True, patch_bias=False),
    'vit_base_patch16_clip_224', 'quick_gelu', 1e-5, 'token',
  ),
  'attention pooling': (dict(pool='map'), 'vit_base_patch16_224', 'gelu', 1e-6, 'map'),
  'distillation token': (dict(distill_token=True), 'deit_base_distilled_patch16_224', 'gelu', 1e-6, 'token'),
}  # fmt: skip


def _our_model(section: dict):
  section = dict(width=tw.WIDTH, depth=tw.DEPTH, num_heads=tw.HEADS, mlp_dim=tw.MLP, patch_size=tw.PATCH,
                 head_zero_init=False, **section)  # fmt: skip
  return make_vit(section, num_classes=tw.CLASSES, image_shape=(tw.IMAGE, tw.IMAGE, 3), rngs=nnx.Rngs(3))


@pytest.mark.parametrize('case', sorted(EXPORTS))
def test_export_chooses_the_architecture_and_states_the_model_in_model_args(case, tmp_path):
  section, architecture, act, eps, pool = EXPORTS[case]
  model = _our_model(section)
  out = export.write_timm(
    model, tmp_path / 'out', image_size=(tw.IMAGE, tw.IMAGE), mean=(0.5,) * 3, std=(0.5,) * 3
  )
  config = json.loads((out / 'config.json').read_text())
  assert config['architecture'] == architecture
  assert config['model_args']['act_layer'] == {'gelu': 'gelu_tanh', 'gelu_exact': 'gelu'}.get(act, act)
  again = tw._model_from(sources.read_weights(out))
  for first, second in zip(tw._params(model), tw._params(again), strict=True):
    np.testing.assert_array_equal(first, second)
  images = tw._images(np.random.default_rng(34))
  written = load_file(str(out / 'model.safetensors'))
  expected = tw.timm_forward(written, images, act=act, eps=eps, no_embed_class=False, pool=pool)
  np.testing.assert_allclose(np.asarray(model(images)[0]), expected, rtol=2e-4, atol=2e-4)


def test_export_refuses_in_one_line_what_timm_has_not(tmp_path):
  common = dict(image_size=(tw.IMAGE, tw.IMAGE), mean=(0.5,) * 3, std=(0.5,) * 3)
  with pytest.raises(CheckpointError, match=r'timm has no ViT with pre_logits'):
    export.write_timm(_our_model(dict(pre_logits=8)), tmp_path / 'a', **common)
  with pytest.raises(CheckpointError, match=r'not a timm vit_base_patch16_224: .*layernorm_epsilon 1e-05'):
    export.write_timm(
      _our_model(dict(layernorm_epsilon=1e-5)), tmp_path / 'b', 'vit_base_patch16_224', **common
    )
  assert not (tmp_path / 'a').exists() and not (tmp_path / 'b').exists()
