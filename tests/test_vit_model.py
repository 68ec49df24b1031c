"""The ViT model on its own: variants, heads, intermediates and the patch embedding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention.layers import layer_of
from vit.model import decode_variant, make_vit


def tiny_vit(**overrides):
  section = dict(patch_size=4, width=16, depth=2, num_heads=2, mlp_dim=32, head_zero_init=False)
  return make_vit({**section, **overrides}, num_classes=5, image_shape=(12, 8, 3), rngs=nnx.Rngs(params=0))


def _strided_convolution(model, images):
  """The reference: the patch embedding's parameters as a convolution with stride = window."""
  embedding = model.patch_embedding
  tokens = jax.lax.conv_general_dilated(
    images, embedding.kernel[...], embedding.patch, 'VALID', dimension_numbers=('NHWC', 'HWIO', 'NHWC')
  )
  return tokens + embedding.bias[...]


@pytest.mark.parametrize('patch_size', [4, (3, 2), 1])
def test_patch_embedding_matmul_equals_the_strided_convolution(patch_size):
  model = tiny_vit(patch_size=patch_size)
  model.patch_embedding.bias[...] = jax.random.normal(jax.random.key(1), model.patch_embedding.bias.shape)
  images = jax.random.normal(jax.random.key(2), (3, 12, 8, 3))
  by_conv = _strided_convolution(model, images)
  assert by_conv.shape[1:3] == model.grid
  np.testing.assert_allclose(model.patch_embedding(images), by_conv.reshape(3, -1, 16), rtol=1e-5, atol=1e-5)


def test_patch_embedding_gradient_equals_the_convolution_gradient():
  graphdef, params = nnx.split(tiny_vit(), nnx.Param)
  images = jax.random.normal(jax.random.key(2), (2, 12, 8, 3))
  target = jax.random.normal(jax.random.key(3), (2, 6, 16))

  def loss(params, by_conv):
    model = nnx.merge(graphdef, params)
    tokens = _strided_convolution(model, images) if by_conv else model.patch_embedding(images)
    return jnp.sum((tokens.reshape(target.shape) - target) ** 2)

  by_conv = jax.grad(loss)(params, True)['patch_embedding']
  by_matmul = jax.grad(loss)(params, False)['patch_embedding']
  for name in ('kernel', 'bias'):
    np.testing.assert_allclose(by_matmul[name][...], by_conv[name][...], rtol=1e-4, atol=1e-4)


def test_patch_embedding_parameters_are_the_convolutions_and_nothing_else():
  """Checkpoints written when the embedding was an ``nnx.Conv`` load unchanged: the same names,
  shapes and initial values."""
  state = nnx.state(tiny_vit(patch_size=(3, 2)), nnx.Param)
  embedding = {
    '/'.join(map(str, path[1:])): leaf
    for path, leaf in nnx.to_flat_state(state)
    if path[0] == 'patch_embedding'
  }
  conv = nnx.Conv(3, 16, kernel_size=(3, 2), strides=(3, 2), padding='VALID', rngs=nnx.Rngs(params=0))
  assert sorted(embedding) == ['bias', 'kernel']
  assert embedding['kernel'].shape == (3, 2, 3, 16) and embedding['bias'].shape == (16,)
  np.testing.assert_array_equal(embedding['kernel'][...], conv.kernel[...])
  np.testing.assert_array_equal(embedding['bias'][...], conv.bias[...])


@pytest.mark.parametrize('pool', ['cls', 'gap', 'map'])
def test_forward_returns_logits_and_intermediates(pool):
  model = tiny_vit(pool=pool)
  logits, intermediates = model(jnp.ones((2, 12, 8, 3)), return_weights=True)
  assert logits.shape == (2, 5) and logits.dtype == jnp.float32
  assert intermediates['pre_logits'].shape == (2, 16)
  assert intermediates['grid'] == (3, 2)
  tokens = 6 + (pool == 'cls')
  weights = intermediates['attention_weights']
  assert len(weights) == 2 and weights[0].shape == (2, 2, tokens, tokens)
  np.testing.assert_allclose(jnp.sum(weights[0], axis=-1), 1.0, rtol=1e-5)
  if pool == 'map':
    assert intermediates['pool_attention_weights'].shape == (2, 2, 1, tokens)


def test_the_optional_parts_a_model_leaves_out_are_none_and_hold_no_parameters():
  plain = tiny_vit(pool='gap')
  parts = lambda model: (  # noqa: E731
    model.class_token, model.distill_token, model.register_tokens, model.fc_norm, model.pre_logits,
    model.distill_head, model.encoder.norm_pre, layer_of(model.encoder.blocks, 0).ls1, layer_of(model.encoder.blocks, 0).ls2,
  )  # fmt: skip
  assert all(part is None for part in parts(plain))
  full = tiny_vit(
    pool='cls', distill_token=True, reg_tokens=2, fc_norm=True, pre_logits=8, norm_pre=True, layer_scale=0.1
  )
  assert all(part is not None for part in parts(full))
  names = {'/'.join(map(str, path)) for path, _ in nnx.to_flat_state(nnx.state(plain, nnx.Param))}
  assert not any(
    part in name for name in names for part in ('token', 'fc_norm', 'pre_logits', 'ls1', 'norm_pre')
  )


def test_variants_decode_and_unknown_ones_are_refused():
  assert decode_variant('S/16') == dict(width=384, depth=12, mlp_dim=1536, num_heads=6, patch_size=16)
  assert decode_variant('Ti/4')['patch_size'] == 4
  for bad in ('X/16', 'S', 'S/0', 'S/a'):
    with pytest.raises(ValueError, match='Unknown ViT variant'):
      decode_variant(bad)


def test_image_not_divisible_by_the_patch_is_refused():
  with pytest.raises(ValueError, match='not divisible by the patch size'):
    tiny_vit(patch_size=5)
