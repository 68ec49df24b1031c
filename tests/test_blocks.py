"""Transformer blocks and stacks against NumPy: norm placement, activations, the stem's dropout."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention import BlockOptions, Decoder, DecoderBlock, Encoder, EncoderBlock, causal_mask, sincos_1d_table
from attention.blocks import DropPath
from attention.stacks import StackOptions

FEATURES, HEADS, LENGTH = 8, 2, 5


def _tokens(length=LENGTH, seed=0):
  return jnp.asarray(np.random.default_rng(seed).normal(size=(2, length, FEATURES)).astype(np.float32))


def _randomise(module, seed=1):
  """Non-trivial LayerNorm scales and biases everywhere (their initial 1 and 0 would hide mistakes)."""
  rng = np.random.default_rng(seed)
  for _, variable in nnx.iter_graph(module):
    if isinstance(variable, nnx.Param) and variable.shape[-1] == FEATURES and len(variable.shape) == 1:
      variable[...] = jnp.asarray(rng.normal(size=variable.shape).astype(np.float32))


def _np(variable):
  return np.asarray(variable[...], np.float64)


def _layer_norm(norm, x):
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + 1e-6) * _np(norm.scale) + _np(norm.bias)


def _linear(layer, x):
  """A dense layer on the last axis of ``x``, whatever the kernel's stored shape (``[in..., out...]``)."""
  return x @ _np(layer.kernel).reshape(x.shape[-1], -1) + _np(layer.bias).reshape(-1)


def _attention(mha, x):
  split = lambda y: y.reshape(*y.shape[:2], HEADS, -1).transpose(0, 2, 1, 3)
  packed = _linear(mha.qkv, x).reshape(*x.shape[:2], 3, -1)  # [D, 3, H, Dh] kernel: q, k, v side by side
  q, k, v = (split(packed[:, :, i]) for i in range(3))
  logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  context = (weights @ v).transpose(0, 2, 1, 3).reshape(x.shape)
  return _linear(mha.out, context)


def _mlp(mlp, x, activation):
  hidden = _linear(mlp.fc1, x)
  if activation == 'relu':
    hidden = np.maximum(hidden, 0.0)
  else:  # the tanh approximation, as nnx.gelu
    hidden = 0.5 * hidden * (1 + np.tanh(np.sqrt(2 / np.pi) * (hidden + 0.044715 * hidden**3)))
  return _linear(mlp.fc2, hidden)


def _numpy_encoder_block(block, x, norm_placement, activation):
  if norm_placement == 'pre':
    x = x + _attention(block.attention, _layer_norm(block.norm1, x))
    return x + _mlp(block.mlp, _layer_norm(block.norm2, x), activation)
  x = _layer_norm(block.norm1, x + _attention(block.attention, x))
  return _layer_norm(block.norm2, x + _mlp(block.mlp, x, activation))


@pytest.mark.parametrize('norm_placement', ['pre', 'post'])
@pytest.mark.parametrize('activation', ['gelu', 'relu'])
def test_encoder_block_matches_numpy(norm_placement, activation):
  options = BlockOptions(norm_placement=norm_placement, activation=activation)
  block = EncoderBlock(FEATURES, HEADS, 16, options, rngs=nnx.Rngs(0))
  _randomise(block)
  x = _tokens()
  out, _ = block(x)
  expected = _numpy_encoder_block(block, np.asarray(x, np.float64), norm_placement, activation)
  np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_relu_and_gelu_differ_only_in_the_activation():
  x = _tokens()
  relu = EncoderBlock(FEATURES, HEADS, 16, BlockOptions(activation='relu'), rngs=nnx.Rngs(0))
  gelu = EncoderBlock(FEATURES, HEADS, 16, BlockOptions(activation='gelu'), rngs=nnx.Rngs(0))
  assert not np.allclose(relu(x)[0], gelu(x)[0])
  hidden = relu.mlp.fc1(x)
  np.testing.assert_allclose(relu.mlp(x), relu.mlp.fc2(jnp.maximum(hidden, 0.0)), atol=1e-6)


def _stack(kind, **options):
  """A small stack; the options that are ``BlockOptions`` fields go into its ``block``."""
  block = {name: options.pop(name) for name in list(options) if name in _BLOCK_FIELDS}
  sizes = dict(features=FEATURES, depth=2, num_heads=HEADS, mlp_features=16)
  stack = StackOptions(**{**sizes, **options}, block=BlockOptions(**block))
  return (Encoder if kind == 'encoder' else Decoder)(stack, max_length=8, rngs=nnx.Rngs(0))


_BLOCK_FIELDS = {field.name for field in dataclasses.fields(BlockOptions)}


@pytest.mark.parametrize('kind', ['encoder', 'decoder'])
def test_post_norm_stack_has_no_final_norm_and_ends_with_its_last_block(kind):
  stack = _stack(kind, norm_placement='post')
  names = {path[0] for path, _ in nnx.to_flat_state(nnx.state(stack, nnx.Param))}
  assert 'norm' not in names and 'norm' in {
    path[0] for path, _ in nnx.to_flat_state(nnx.state(_stack(kind), nnx.Param))
  }
  x, encoded = _tokens(), _tokens(seed=1)
  if kind == 'encoder':
    out, intermediates = stack(x)
    np.testing.assert_array_equal(out, intermediates['pre_norm'])
    expected = stack.positional.add_table(x, stack.positional.table_before(0))
    for block in stack.blocks:
      expected, _ = block(expected)
  else:
    out, _ = stack(x, encoded)
    expected = stack.positional.add_table(x, stack.positional.table_before(0))
    for block in stack.blocks:
      expected, _ = block(expected, encoded, self_mask=causal_mask(LENGTH))
  np.testing.assert_allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize('norm_placement', ['pre', 'post'])
@pytest.mark.parametrize('posemb', ['learn1d', 'rope'])
def test_cached_post_norm_decoder_equals_the_full_pass(norm_placement, posemb):
  decoder = _stack('decoder', norm_placement=norm_placement, activation='relu', posemb=posemb, use_bias=False)
  _randomise(decoder)
  x, encoded = _tokens(), _tokens(7, seed=1)
  full, _ = decoder(x, encoded)
  cache = decoder.init_cache(encoded, 8)
  steps = []
  for t in range(LENGTH):
    out, cache = decoder.decode_step(x[:, t : t + 1], cache)
    steps.append(out)
  np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=1e-5)


def test_decoder_block_post_norm_is_the_residual_sum_normalised():
  block = DecoderBlock(
    FEATURES, HEADS, 16, BlockOptions(norm_placement='post', activation='relu'), rngs=nnx.Rngs(0)
  )
  _randomise(block)
  x, encoded = _tokens(), _tokens(seed=1)
  out, _ = block(x, encoded, self_mask=causal_mask(LENGTH))
  y = block.norm1(x + block.self_attention(x, mask=causal_mask(LENGTH))[0])
  y = block.norm2(y + block.cross_attention(y, encoded)[0])
  np.testing.assert_allclose(out, block.norm3(y + block.mlp(y)), atol=1e-6)


@pytest.mark.parametrize(
  'option, value, message',
  [
    (
      'activation',
      'swish',
      "^Unknown activation 'swish'; allowed values: gelu, gelu_exact, quick_gelu, relu.$",
    ),
    ('norm_placement', 'sandwich', "^Unknown norm_placement 'sandwich'; allowed values: pre, post.$"),
    ('score', 'bilinear', "^Unknown score 'bilinear'; allowed values: dot, scaled_dot, cosine, additive.$"),
    ('dropout', 1.0, r'^dropout must be in \[0, 1\), got 1.0.$'),
    ('attention_dropout', -0.1, r'^attention_dropout must be in \[0, 1\), got -0.1.$'),
    ('layernorm_epsilon', 0.0, '^layernorm_epsilon must be positive, got 0.0.$'),
    (
      'attention_kernel',
      'flash',
      "^Unknown attention_kernel 'flash'; allowed values: auto, fused, explicit.$",
    ),
    ('param_dtype', jnp.int32, '^param_dtype must be a floating-point dtype'),
  ],
)
def test_bad_block_options_are_one_line_naming_the_field(option, value, message):
  with pytest.raises(ValueError, match=message):
    BlockOptions(**{option: value})


@pytest.mark.parametrize('kind', ['encoder', 'decoder'])
def test_every_block_of_a_stack_is_built_with_the_stack_options(kind):
  options = dict(
    norm_placement='post', activation='relu', layernorm_epsilon=1e-3, dropout=0.2, use_bias=False
  )
  stack = _stack(kind, **options)
  for block in stack.blocks:
    assert block.norm_placement == 'post' and block.mlp.activation == 'relu'
    assert block.mlp.dropout.rate == block.dropout.rate == 0.2
    norms = [module for _, module in nnx.iter_graph(block) if isinstance(module, nnx.LayerNorm)]
    assert len(norms) == (2 if kind == 'encoder' else 3) and all(norm.epsilon == 1e-3 for norm in norms)
    attentions = [block.attention] if kind == 'encoder' else [block.self_attention, block.cross_attention]
    assert all(not hasattr(attention.out, 'bias') or attention.out.bias is None for attention in attentions)
  assert stack.dropout.rate == 0.2


_seen = {}


class _Recorder(nnx.Module):
  """Stands in for the first block and keeps what the stem gave it."""

  def __call__(self, x, *args, **kwargs):
    _seen['x'] = x
    return x, {'self': None, 'cross': None}


@pytest.mark.parametrize('kind', ['encoder', 'decoder'])
def test_stem_dropout_drops_the_positional_encoding_too(kind):
  stack = _stack(kind, depth=1, posemb='sincos1d', dropout=0.5)
  stack.blocks[0] = _Recorder()
  zeros = jnp.zeros((4, LENGTH, FEATURES))
  args = (zeros,) if kind == 'encoder' else (zeros, _tokens(seed=1))
  stack(*args, deterministic=False, rngs=nnx.Rngs(dropout=0))
  table = sincos_1d_table(LENGTH, FEATURES)[None]
  stem = np.asarray(_seen['x'])
  dropped = stem == 0.0
  assert np.any(dropped & (table != 0.0))  # whole elements of tokens + positions are zeroed
  np.testing.assert_allclose(np.where(dropped, 0.0, stem), np.where(dropped, 0.0, 2.0 * table), atol=1e-6)
  stack(*args)  # and in evaluation the sum is untouched
  np.testing.assert_allclose(_seen['x'], np.broadcast_to(table, zeros.shape), atol=1e-6)


def test_drop_path_keeps_or_drops_each_example_whole_and_rescales_the_kept():
  x = jnp.asarray(np.random.default_rng(0).normal(size=(400, 3, 4)).astype(np.float32))
  drop_path = DropPath(0.25)
  np.testing.assert_array_equal(drop_path(x), x)  # deterministic: the identity
  y = np.asarray(drop_path(x, deterministic=False, rngs=nnx.Rngs(dropout=0)))
  kept = np.all(np.isclose(y, np.asarray(x) / 0.75, rtol=1e-6), axis=(1, 2))
  dropped = np.all(y == 0.0, axis=(1, 2))
  assert np.all(kept ^ dropped)  # each example is either all kept or all dropped
  assert 0.65 < kept.mean() < 0.85  # about 1 - rate of them kept (400 draws: 0.75 +- 0.022)
  with pytest.raises(ValueError, match='rate must be in'):
    DropPath(1.0)


def test_block_options_of_a_models_options_take_the_fields_of_the_same_name():
  """``BlockOptions.of``: the fields a model's options share with ``BlockOptions``, the dtype by its name;
  the others keep their defaults, and a model's own fields stay out."""
  from seq2seq.model import TransformerOptions
  from video.model import VideoOptions
  from vit.model import ViTOptions

  vit = BlockOptions.of(ViTOptions(activation='relu', layer_scale=0.1, dtype='bfloat16', depth=3))
  assert vit == BlockOptions(activation='relu', layer_scale=0.1, dtype=jnp.bfloat16)
  translator = BlockOptions.of(TransformerOptions(norm_placement='post', use_bias=False, dropout=0.1))
  assert translator == BlockOptions(norm_placement='post', use_bias=False, dropout=0.1, dtype=jnp.float32)
  assert BlockOptions.of(VideoOptions(score='cosine')).score == 'cosine'


@pytest.mark.parametrize(
  ('attention_kernel', 'fused_kernel'), [('auto', None), ('fused', True), ('explicit', False)]
)
def test_the_attention_kernel_option_reaches_every_attention_layer(attention_kernel, fused_kernel):
  from seq2seq.model import model_options

  decoder = _stack('decoder', attention_kernel=attention_kernel)
  assert {block.self_attention.fused_kernel for block in decoder.blocks} == {fused_kernel}
  assert {block.cross_attention.fused_kernel for block in decoder.blocks} == {fused_kernel}
  assert model_options({'attention_kernel': attention_kernel}).block().attention_kernel == attention_kernel
