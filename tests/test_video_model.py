"""The video Transformer: each attention layout against a plain NumPy reference, the image ViT as its
one-frame case, inflated initialisation, frame-order (in)variance and the errors for bad options."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention import BlockOptions
from trainer.errors import ConfigError
from video.inflate import init_from_image_vit
from video.layouts import LAYOUTS
from video.model import inflate_kernel, make_video_model
from vit.model import make_vit

CLIP = (4, 8, 8, 2)  # T, H, W, C


def tiny_video(clip_shape=CLIP, **overrides):
  section = dict(
    tubelet=(1, 4, 4),
    width=16,
    depth=2,
    temporal_depth=2,
    num_heads=4,
    mlp_dim=32,
    spatial_posemb='learn1d',
    temporal_posemb='learn1d',
    pool='cls',
  )
  return make_video_model({**section, **overrides}, num_classes=5, clip_shape=clip_shape, rngs=nnx.Rngs(0))


def randomise(model, seed=1, scale=0.3):
  """Every parameter random (zero-initialised heads, biases and class tokens too)."""
  state = nnx.state(model, nnx.Param)
  leaves, treedef = jax.tree.flatten(state)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  nnx.update(
    model, jax.tree.unflatten(treedef, [scale * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])
  )
  return model


def clips(batch=2, shape=CLIP, seed=2):
  return jax.random.normal(jax.random.key(seed), (batch, *shape))


# ----------------------------------------------------------------------------- NumPy reference


def _np(x):
  return np.asarray(x, np.float64)


def layer_norm(norm, x):
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-6) * _np(norm.scale[...]) + _np(norm.bias[...])


def linear(layer, x):
  """A dense layer on the last axis of ``x``, whatever the kernel's stored shape (``[in..., out...]``)."""
  return x @ _np(layer.kernel[...]).reshape(x.shape[-1], -1) + _np(layer.bias[...]).reshape(-1)


def attention(mha, x, bias=None):
  """Self-attention of one sequence ``x`` ``[L, D]``; ``bias`` ``[heads, L, L]``."""
  heads = mha.num_heads
  packed = linear(mha.qkv, x).reshape(len(x), 3, heads, -1)  # [D, 3, H, Dh] kernel
  q, k, v = packed[:, 0], packed[:, 1], packed[:, 2]
  logits = np.einsum('qhd,khd->hqk', q, k) / np.sqrt(q.shape[-1])
  if bias is not None:
    logits = logits + bias
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  return linear(mha.out, np.einsum('hqk,khd->qhd', weights, v).reshape(len(x), -1))


def gelu(x):
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def encoder_block(block, x, bias=None):
  x = x + attention(block.attention, layer_norm(block.norm1, x), bias)
  return x + linear(block.mlp.fc2, gelu(linear(block.mlp.fc1, layer_norm(block.norm2, x))))


def relative_bias(bias_module, frames_of_query, frames_of_key):
  """``[heads, Q, K]`` with the learned bias of offset key frame - query frame; None frames get 0."""
  table, distance = _np(bias_module.table[...]), bias_module.max_distance
  bias = np.zeros((table.shape[1], len(frames_of_query), len(frames_of_key)))
  for i, t_q in enumerate(frames_of_query):
    for j, t_k in enumerate(frames_of_key):
      if t_q is not None and t_k is not None:
        bias[:, i, j] = table[np.clip(t_k - t_q, -distance, distance) + distance]
  return bias


def tubelet_tokens(model, clip):
  """``[steps, patches, D]``: a loop over tubelets, each flattened and projected, plus positions."""
  (t, p_h, p_w), kernel = model.tubelet_embedding.tubelet, _np(model.tubelet_embedding.kernel[...])
  steps, rows, cols = model.grid
  tokens = np.zeros((steps, rows * cols, kernel.shape[-1]))
  for step in range(steps):
    for row in range(rows):
      for col in range(cols):
        tube = clip[step * t : (step + 1) * t, row * p_h : (row + 1) * p_h, col * p_w : (col + 1) * p_w]
        tokens[step, row * cols + col] = tube.reshape(-1) @ kernel.reshape(-1, kernel.shape[-1])
  tokens += _np(model.tubelet_embedding.bias[...])
  if model.spatial_posemb != 'none':
    tokens += _np(model.spatial_table())[None]
  if model.temporal_posemb in ('learn1d', 'sincos1d') and model.attention != 'factorised_encoder':
    tokens += _np(model.temporal_table())[:, None]
  return tokens


def reference_logits(model, clip):
  layout, x = model.layout, tubelet_tokens(model, _np(clip))
  steps, patches, _ = x.shape
  cls = _np(model.class_token[...])[0] if model.pool == 'cls' else None
  relative = model.temporal_posemb == 'relative'
  if model.attention == 'spacetime':
    seq = x.reshape(steps * patches, -1)
    frames = [t for t in range(steps) for _ in range(patches)]
    if cls is not None:
      seq, frames = np.concatenate([cls, seq]), [None] + frames
    for layer, block in enumerate(layout.blocks):
      seq = encoder_block(
        block, seq, relative_bias(layout.time_biases[layer], frames, frames) if relative else None
      )
    seq = layer_norm(layout.norm, seq)
    features = seq[0] if cls is not None else seq.mean(0)
  elif model.attention == 'factorised_encoder':
    frame_features = []
    for step in range(steps):
      seq = x[step] if cls is None else np.concatenate([cls, x[step]])
      for block in layout.blocks:
        seq = encoder_block(block, seq)
      seq = layer_norm(layout.norm, seq)
      frame_features.append(seq[0] if cls is not None else seq.mean(0))
    seq = np.stack(frame_features)
    if model.temporal_posemb in ('learn1d', 'sincos1d'):
      seq = seq + _np(model.temporal_table())
    frames = list(range(steps))
    if cls is not None:
      seq, frames = np.concatenate([_np(layout.temporal_class_token[...])[0], seq]), [None] + frames
    for layer, block in enumerate(layout.temporal_blocks):
      seq = encoder_block(
        block, seq, relative_bias(layout.time_biases[layer], frames, frames) if relative else None
      )
    seq = layer_norm(layout.temporal_norm, seq)
    features = seq[0] if cls is not None else seq.mean(0)
  else:
    if cls is not None:
      x = np.concatenate([np.repeat(cls[None], steps, axis=0), x], axis=1)
    frames = list(range(steps))
    for layer in range(len(layout.blocks)):
      bias = relative_bias(layout.time_biases[layer], frames, frames) if relative else None
      if model.attention == 'divided':
        temporal = layout.temporal[layer]
        for position in range(x.shape[1]):
          x[:, position] += attention(temporal.attention, layer_norm(temporal.norm, x[:, position]), bias)
        for step in range(steps):
          x[step] = encoder_block(layout.blocks[layer], x[step])
      else:
        block, normed = layout.blocks[layer], layer_norm(layout.blocks[layer].norm1, x)
        update = np.zeros_like(x)
        for step in range(steps):
          update[step] += attention(block.space_attention, normed[step])
        for position in range(x.shape[1]):
          update[:, position] += attention(block.time_attention, normed[:, position], bias)
        x = x + update
        x = x + linear(block.mlp.fc2, gelu(linear(block.mlp.fc1, layer_norm(block.norm2, x))))
    x = layer_norm(layout.norm, x)
    features = x[:, 0].mean(0) if cls is not None else x.mean((0, 1))
  return linear(model.head, features)


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize(  # the fast tier checks each layout once; the full suite with the second options too
  'pool, temporal_posemb, tubelet',
  [('cls', 'learn1d', (1, 4, 4)), pytest.param('gap', 'relative', (2, 4, 2), marks=pytest.mark.slow)],
)
def test_layout_equals_numpy_reference(layout, pool, temporal_posemb, tubelet):
  model = randomise(tiny_video(attention=layout, pool=pool, temporal_posemb=temporal_posemb, tubelet=tubelet))
  inputs = clips()
  logits, _ = model(inputs)
  expected = np.stack([reference_logits(model, clip) for clip in inputs])
  np.testing.assert_allclose(logits, expected, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize('layout', LAYOUTS)
def test_attention_weights_have_named_axes_and_sum_to_one(layout):
  model = tiny_video(attention=layout)
  _, intermediates = model(clips(), return_weights=True)
  steps, rows, cols = model.grid
  weights = intermediates['attention_weights']
  assert len(weights) == (4 if layout == 'factorised_encoder' else 2)
  for layer in weights:
    for axes, array in layer.items():
      np.testing.assert_allclose(array.sum(-1), 1.0, rtol=1e-5)
      if axes == 'time':
        assert array.shape[0] == 2 and array.shape[-1] == steps
      if axes == 'space':
        assert array.shape[:2] == (2, steps) and array.shape[-1] == 1 + rows * cols


def image_vit(**overrides):
  section = dict(patch_size=4, width=16, depth=2, num_heads=4, mlp_dim=32, pool='cls')
  model = make_vit({**section, **overrides}, num_classes=5, image_shape=(8, 8, 2), rngs=nnx.Rngs(3))
  return randomise(model, seed=4)


@pytest.mark.parametrize('pool', ['cls', pytest.param('gap', marks=pytest.mark.slow)])
def test_divided_with_one_frame_equals_the_image_vit(pool):
  image = image_vit(pool=pool)
  video = tiny_video(attention='divided', clip_shape=(1, 8, 8, 2), temporal_posemb='none', pool=pool)
  init_from_image_vit(video, image)
  images = clips(shape=(8, 8, 2))
  np.testing.assert_allclose(video(images[:, None])[0], image(images)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('method', ['average', 'central'])
@pytest.mark.parametrize('layout', ['divided', 'spacetime'])
def test_inflated_initialisation_of_a_one_frame_clip_gives_the_image_output(method, layout):
  image = image_vit()
  video = tiny_video(attention=layout, clip_shape=(3, 8, 8, 2), tubelet=(3, 4, 4), temporal_posemb='none')
  init_from_image_vit(video, image, method)
  images = clips(shape=(8, 8, 2))
  if method == 'average':  # a still clip: the image in every frame
    clip = jnp.repeat(images[:, None], 3, axis=1)
  else:  # the image in the central frame, anything in the others
    clip = clips(shape=(3, 8, 8, 2), seed=5).at[:, 1].set(images)
  np.testing.assert_allclose(video(clip)[0], image(images)[0], rtol=1e-5, atol=1e-5)


def test_inflate_kernel():
  kernel = jax.random.normal(jax.random.key(0), (2, 2, 1, 3))
  np.testing.assert_allclose(inflate_kernel(kernel, 4, 'average').sum(0), kernel, rtol=1e-6)
  central = inflate_kernel(kernel, 3, 'central')
  np.testing.assert_array_equal(central[1], kernel)
  assert not np.any(central[0]) and not np.any(central[2])


@pytest.mark.parametrize('layout', LAYOUTS)
def test_frame_order_matters_only_with_temporal_positions(layout):
  inputs, order = clips(), jnp.array([2, 0, 3, 1])
  for temporal_posemb, invariant in (('none', True), ('learn1d', False)):
    model = randomise(tiny_video(attention=layout, temporal_posemb=temporal_posemb))
    original, shuffled = model(inputs)[0], model(inputs[:, order])[0]
    if invariant:
      np.testing.assert_allclose(shuffled, original, rtol=1e-4, atol=1e-5)
    else:
      assert np.max(np.abs(shuffled - original)) > 1e-3, temporal_posemb


def test_unknown_layout_names_the_allowed_values():
  with pytest.raises(ConfigError, match='spacetime, factorised_encoder, divided, factorised_dot_product'):
    tiny_video(attention='joint')


def test_indivisible_clip_names_the_shapes():
  with pytest.raises(
    ConfigError, match=r'\(T, H, W\) = \(4, 8, 8\) is not divisible by the tubelet \(t, p, p\) = \(3, 4, 4\)'
  ):
    tiny_video(tubelet=(3, 4, 4))


def test_learn3d_excludes_a_temporal_posemb():
  with pytest.raises(ConfigError, match="temporal_posemb must be 'none'"):
    tiny_video(spatial_posemb='learn3d')
  model = randomise(tiny_video(spatial_posemb='learn3d', temporal_posemb='none'))
  assert model(clips())[0].shape == (2, 5)


def test_factorised_dot_product_refuses_a_norm_placement_it_cannot_honour():
  from video.layouts import FactorisedDotProductBlock  # pylint: disable=g-import-not-at-top

  FactorisedDotProductBlock(
    16, 4, 32, BlockOptions(norm_placement='pre'), drop_path_rate=0.0, rngs=nnx.Rngs(0)
  )
  with pytest.raises(ValueError, match="norm_placement must be 'pre', got 'post'"):
    FactorisedDotProductBlock(
      16, 4, 32, BlockOptions(norm_placement='post'), drop_path_rate=0.0, rngs=nnx.Rngs(0)
    )


def test_both_encoders_of_the_factorised_encoder_ramp_their_drop_path():
  model = tiny_video(attention='factorised_encoder', depth=3, temporal_depth=3, drop_path=0.2)
  rates = lambda blocks: [block.drop_path.rate for block in blocks]  # noqa: E731
  np.testing.assert_allclose(rates(model.layout.blocks), [0.0, 0.1, 0.2])
  np.testing.assert_allclose(rates(model.layout.temporal_blocks), [0.0, 0.1, 0.2])


def test_a_part_the_options_leave_out_is_none():
  model = tiny_video(pool='gap', spatial_posemb='none', temporal_posemb='relative')
  assert (model.class_token, model.spatial_table, model.temporal_table, model.spacetime_table) == (None,) * 4
  model = tiny_video(spatial_posemb='learn3d', temporal_posemb='none')
  assert model.spacetime_table is not None and model.spatial_table is None
