"""Attention scores, masks and multi-head attention against plain NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention import (
  MIN_COSINE_TEMPERATURE,
  SCORES,
  AttentionScore,
  Mask,
  MultiHeadAttention,
  Rotary,
  causal_mask,
  combine_masks,
  masked_softmax,
  padding_mask,
)

B, TQ, TK, H, D = 2, 5, 7, 3, 4


def _qk(seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(B, TQ, H, D)).astype(np.float32), rng.normal(size=(B, TK, H, D)).astype(np.float32)


def _numpy_logits(kind, q, k, score):
  if kind == 'dot':
    return np.einsum('bqhd,bkhd->bhqk', q, k)
  if kind == 'scaled_dot':
    return np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(D)
  if kind == 'cosine':
    qn = q / np.linalg.norm(q, axis=-1, keepdims=True)
    kn = k / np.linalg.norm(k, axis=-1, keepdims=True)
    tau = np.exp(np.asarray(score.log_temperature[...]))
    return np.einsum('bqhd,bkhd->bhqk', qn, kn) / tau[None, :, None, None]
  wq, wk, v = (
    np.asarray(score.query_kernel[...]),
    np.asarray(score.key_kernel[...]),
    np.asarray(score.energy[...]),
  )
  out = np.zeros((B, H, TQ, TK), np.float32)
  for b in range(B):
    for h in range(H):
      for i in range(TQ):
        for j in range(TK):
          out[b, h, i, j] = v[h] @ np.tanh(q[b, i, h] @ wq[h] + k[b, j, h] @ wk[h])
  return out


@pytest.mark.parametrize('kind', SCORES)
def test_score_matches_numpy(kind):
  q, k = _qk()
  score = AttentionScore(kind, num_heads=H, head_dim=D, cosine_temperature=0.5, rngs=nnx.Rngs(0))
  np.testing.assert_allclose(
    score(jnp.asarray(q), jnp.asarray(k)), _numpy_logits(kind, q, k, score), rtol=1e-5, atol=1e-5
  )


def test_fixed_cosine_temperature_is_not_a_parameter():
  learned = AttentionScore('cosine', num_heads=H, head_dim=D, rngs=nnx.Rngs(0))
  fixed = AttentionScore('cosine', num_heads=H, head_dim=D, learn_temperature=False, rngs=nnx.Rngs(0))
  assert len(jax.tree.leaves(nnx.state(learned, nnx.Param))) == 1
  assert len(jax.tree.leaves(nnx.state(fixed, nnx.Param))) == 0


def test_cosine_logit_scale_is_bounded_at_100():
  q, k = _qk()
  score = AttentionScore('cosine', num_heads=H, head_dim=D, rngs=nnx.Rngs(0))
  score.log_temperature[...] = jnp.log(jnp.asarray([1e-4, MIN_COSINE_TEMPERATURE, 0.05]))
  logits = score(jnp.asarray(q), jnp.asarray(k))
  cosine = _numpy_logits(
    'cosine',
    q,
    k,
    AttentionScore('cosine', num_heads=H, head_dim=D, cosine_temperature=1.0, rngs=nnx.Rngs(0)),
  )
  np.testing.assert_allclose(
    logits, cosine * np.asarray([100.0, 100.0, 20.0])[None, :, None, None], rtol=1e-4
  )
  assert float(jnp.abs(logits).max()) <= 100.0 * (1 + 1e-6)
  graphdef, params = nnx.split(score, nnx.Param)

  def total(params):
    return jnp.sum(nnx.merge(graphdef, params)(jnp.asarray(q), jnp.asarray(k)))

  gradient = jax.grad(total)(params)['log_temperature'][...]
  assert gradient[0] == 0.0 and gradient[2] != 0.0  # a clamped temperature is not pushed further down


def test_cosine_temperature_below_the_bound_is_refused():
  with pytest.raises(ValueError, match='cosine_temperature must be at least 0.01'):
    AttentionScore('cosine', num_heads=H, head_dim=D, cosine_temperature=0.001, rngs=nnx.Rngs(0))


def test_projections_without_bias_have_no_bias_parameters():
  x = jnp.asarray(np.random.default_rng(3).normal(size=(B, TQ, 12)).astype(np.float32))
  with_bias = MultiHeadAttention(H, 12, rngs=nnx.Rngs(0))
  without = MultiHeadAttention(H, 12, use_bias=False, rngs=nnx.Rngs(0))
  names = {'/'.join(map(str, path)) for path, _ in nnx.to_flat_state(nnx.state(without, nnx.Param))}
  assert names == {f'{layer}/kernel' for layer in ('qkv', 'out')}
  for layer in ('qkv', 'out'):
    getattr(without, layer).kernel[...] = getattr(with_bias, layer).kernel[...]
    getattr(with_bias, layer).bias[...] = jnp.zeros_like(getattr(with_bias, layer).bias[...])
  np.testing.assert_allclose(without(x)[0], with_bias(x)[0], atol=1e-6)


def numpy_projections(mha, xq, xkv):
  """Queries, keys and values ``[batch, length, heads, head_dim]`` from ``mha``'s stored kernels."""

  def project(layer, x, part=None):
    kernel, bias = np.asarray(layer.kernel[...]), np.asarray(layer.bias[...])
    if part is not None:
      kernel, bias = kernel[:, part], bias[part]
    return np.einsum('bti,ihd->bthd', x, kernel) + bias

  if mha.cross_attention:
    return project(mha.query, xq), project(mha.kv, xkv, 0), project(mha.kv, xkv, 1)
  return project(mha.qkv, xq, 0), project(mha.qkv, xkv, 1), project(mha.qkv, xkv, 2)


def _numpy_mha(mha, xq, xkv, mask):
  def linear(layer, x):
    return x @ np.asarray(layer.kernel[...]).reshape(x.shape[-1], -1) + np.asarray(layer.bias[...])

  q, k, v = numpy_projections(mha, xq, xkv)
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(D)
  logits = np.where(mask, logits, -np.inf)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  context = np.einsum('bhqk,bkhd->bqhd', weights, v).reshape(B, -1, H * D)
  return linear(mha.out, context), weights


@pytest.mark.parametrize('return_weights', [False, True])
def test_cross_attention_matches_numpy(return_weights):
  rng = np.random.default_rng(1)
  xq = rng.normal(size=(B, TQ, 12)).astype(np.float32)
  xkv = rng.normal(size=(B, TK, 10)).astype(np.float32)
  key_valid = np.ones((B, TK), bool)
  key_valid[1, 4:] = False
  mha = MultiHeadAttention(H, 12, kv_features=10, cross_attention=True, rngs=nnx.Rngs(0))
  mask = padding_mask(None, jnp.asarray(key_valid))
  out, weights = mha(jnp.asarray(xq), jnp.asarray(xkv), mask=mask, return_weights=return_weights)
  expected_out, expected_weights = _numpy_mha(mha, xq, xkv, np.asarray(mask))
  np.testing.assert_allclose(out, expected_out, rtol=1e-5, atol=1e-5)
  if return_weights:
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
  else:
    assert weights is None


@pytest.mark.parametrize('kind', ['dot', 'scaled_dot'])
def test_fused_and_explicit_paths_agree(kind):
  rng = np.random.default_rng(2)
  x = jnp.asarray(rng.normal(size=(B, TK, 12)).astype(np.float32))
  valid = np.ones((B, TK), bool)
  valid[0, 5:] = False
  mask = padding_mask(jnp.asarray(valid), jnp.asarray(valid)) & causal_mask(TK)
  bias = jnp.asarray(rng.normal(size=(1, H, TK, TK)).astype(np.float32))
  mha = MultiHeadAttention(H, 12, score=kind, fused_kernel=True, rngs=nnx.Rngs(0))
  fused, _ = mha(x, mask=mask, bias=bias)
  explicit, weights = mha(x, mask=mask, bias=bias, return_weights=True)
  mha.fused_kernel = False
  np.testing.assert_allclose(mha(x, mask=mask, bias=bias)[0], explicit, atol=1e-6)
  assert weights.shape == (B, H, TK, TK)
  np.testing.assert_allclose(fused, explicit, atol=1e-5)


@pytest.mark.parametrize(
  ('fused_kernel', 'cudnn_takes_it', 'asked'),
  [
    (True, True, ['cudnn']),
    (True, False, ['cudnn', None]),  # 'fused': XLA's implementation where cuDNN refuses
    (None, True, ['cudnn']),
    (None, False, ['cudnn']),  # 'auto': the explicit path where cuDNN refuses
  ],
)
def test_on_a_gpu_the_fused_path_asks_cudnn_first_and_falls_back(
  monkeypatch, fused_kernel, cudnn_takes_it, asked
):
  real_attention = jax.nn.dot_product_attention
  calls = []

  def recording_attention(*args, implementation=None, **kwargs):
    calls.append(implementation)
    if implementation == 'cudnn' and not cudnn_takes_it:
      raise NotImplementedError('no cuDNN kernel for these inputs')
    return real_attention(*args, **kwargs)  # this CPU has no cuDNN: XLA's computes the same numbers

  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.normal(size=(B, TK, 12)).astype(np.float32))
  mha = MultiHeadAttention(H, 12, score='scaled_dot', fused_kernel=fused_kernel, rngs=nnx.Rngs(0))
  explicit, _ = mha(x, return_weights=True)
  monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
  monkeypatch.setattr(jax.nn, 'dot_product_attention', recording_attention)
  fused, _ = mha(x)
  assert calls == asked
  np.testing.assert_allclose(fused, explicit, atol=1e-5)


def test_masked_softmax_all_masked_row_is_zero_without_nan():
  logits = jnp.asarray(np.random.default_rng(0).normal(size=(1, 1, 3, 4)).astype(np.float32))
  mask = jnp.asarray([[True, False, True, False], [False] * 4, [True] * 4])[None, None]
  weights = masked_softmax(logits, mask)
  np.testing.assert_array_equal(weights[0, 0, 1], np.zeros(4))
  np.testing.assert_allclose(weights.sum(-1)[0, 0], [1, 0, 1], atol=1e-6)
  grad = jax.grad(lambda x: jnp.sum(masked_softmax(x, mask) * jnp.arange(4.0)))(logits)
  assert np.all(np.isfinite(grad))
  np.testing.assert_array_equal(np.asarray(grad)[~np.broadcast_to(np.asarray(mask), grad.shape)], 0.0)


@pytest.mark.parametrize('return_weights', [False, True])
@pytest.mark.parametrize('kind', SCORES)
def test_masked_keys_get_zero_weight_and_zero_gradient(kind, return_weights):
  rng = np.random.default_rng(3)
  xq = jnp.asarray(rng.normal(size=(B, TQ, 12)).astype(np.float32))
  xkv = jnp.asarray(rng.normal(size=(B, TK, 12)).astype(np.float32))
  key_valid = np.ones((B, TK), bool)
  key_valid[:, 3:] = False
  key_valid[1, :] = False  # every key of example 1 masked
  mask = padding_mask(None, jnp.asarray(key_valid))
  mha = MultiHeadAttention(H, 12, score=kind, rngs=nnx.Rngs(0))

  def total(kv):
    out, _ = mha(xq, kv, mask=mask, return_weights=return_weights)
    return jnp.sum(out**2)

  grad = np.asarray(jax.grad(total)(xkv))
  assert np.all(np.isfinite(grad))
  np.testing.assert_array_equal(grad[~key_valid], 0.0)
  assert np.abs(grad[key_valid]).sum() > 0
  out, weights = mha(xq, xkv, mask=mask, return_weights=True)
  np.testing.assert_array_equal(np.asarray(weights)[0][..., 3:], 0.0)
  np.testing.assert_array_equal(np.asarray(weights)[1], 0.0)
  # An all-masked query attends to nothing: only the output bias remains.
  np.testing.assert_allclose(out[1], np.broadcast_to(mha.out.bias[...], out[1].shape), atol=1e-6)
  assert np.all(np.isfinite(out))


@pytest.mark.parametrize('kind', SCORES)
def test_causal_output_does_not_depend_on_the_future(kind):
  rng = np.random.default_rng(4)
  x = rng.normal(size=(1, 6, 12)).astype(np.float32)
  mha = MultiHeadAttention(H, 12, score=kind, rngs=nnx.Rngs(0))
  mask = causal_mask(6)
  out, _ = mha(jnp.asarray(x), mask=mask)
  for t in range(5):
    changed = x.copy()
    changed[:, t + 1 :] += rng.normal(size=changed[:, t + 1 :].shape).astype(np.float32)
    out_changed, _ = mha(jnp.asarray(changed), mask=mask)
    np.testing.assert_allclose(out_changed[:, : t + 1], out[:, : t + 1], atol=1e-6)
    assert not np.allclose(out_changed[:, t + 1 :], out[:, t + 1 :])


def test_return_weights_does_not_change_the_output_and_dropout_only_in_training():
  x = jnp.asarray(np.random.default_rng(5).normal(size=(B, TK, 12)).astype(np.float32))
  mha = MultiHeadAttention(H, 12, dropout_rate=0.5, rngs=nnx.Rngs(0))
  plain, _ = mha(x)
  with_weights, _ = mha(x, return_weights=True)
  np.testing.assert_allclose(plain, with_weights, atol=1e-5)
  train_a, _ = mha(x, deterministic=False, rngs=nnx.Rngs(dropout=1))
  train_b, _ = mha(x, deterministic=False, rngs=nnx.Rngs(dropout=1))
  train_c, _ = mha(x, deterministic=False, rngs=nnx.Rngs(dropout=2))
  np.testing.assert_array_equal(train_a, train_b)
  assert not np.allclose(train_a, plain)
  assert not np.allclose(train_a, train_c)


@pytest.mark.parametrize('kind', SCORES)
@pytest.mark.parametrize('rope', [False, True])
def test_cached_decoding_equals_full_causal_pass(kind, rope):
  rng = np.random.default_rng(6)
  length = 6
  x = jnp.asarray(rng.normal(size=(B, length, 12)).astype(np.float32))
  mha = MultiHeadAttention(H, 12, score=kind, rotary=Rotary() if rope else None, rngs=nnx.Rngs(0))
  full, _ = mha(x, mask=causal_mask(length))
  cache = mha.init_cache(B, max_length=8)
  step = jax.jit(lambda inputs, c: mha.decode_step(inputs, c))
  outputs = []
  for t in range(length):
    out, cache = step(x[:, t : t + 1], cache)
    outputs.append(out)
  np.testing.assert_allclose(jnp.concatenate(outputs, axis=1), full, atol=1e-5)
  assert int(cache['index']) == length


def test_unknown_score_names_the_allowed_values():
  with pytest.raises(ValueError, match='allowed values: dot, scaled_dot, cosine, additive'):
    MultiHeadAttention(H, 12, score='bilinear', rngs=nnx.Rngs(0))


def test_heads_must_divide_features():
  with pytest.raises(ValueError, match='divisible by num_heads'):
    MultiHeadAttention(5, 12, rngs=nnx.Rngs(0))


def _recording_fused_attention(monkeypatch):
  """Records the keyword arguments that ``jax.nn.dot_product_attention`` is called with."""
  calls, real_attention = [], jax.nn.dot_product_attention

  def recording(*args, **kwargs):
    calls.append(kwargs)
    return real_attention(*args, **kwargs)

  monkeypatch.setattr(jax.nn, 'dot_product_attention', recording)
  return calls


@pytest.mark.parametrize('kind', ['dot', 'scaled_dot'])
def test_structured_masks_reach_the_fused_kernel_as_is_causal_and_lengths(kind, monkeypatch):
  rng = np.random.default_rng(4)
  x = jnp.asarray(rng.normal(size=(B, TK, 12)).astype(np.float32))
  lengths = jnp.asarray([4, 0], jnp.int32)  # example 1: every key is padding
  masks = {
    'causal+keys': Mask(causal=True, key_lengths=lengths),
    'keys+queries': Mask(key_lengths=lengths, query_lengths=jnp.asarray([3, 7], jnp.int32)),
    'causal+dense': combine_masks(
      Mask(causal=True), padding_mask(None, jnp.asarray(rng.random((B, TK)) > 0.3))
    ),
  }
  mha = MultiHeadAttention(H, 12, score=kind, fused_kernel=True, rngs=nnx.Rngs(0))
  calls = _recording_fused_attention(monkeypatch)
  for name, mask in masks.items():
    dense = mask.as_array(TK, TK)
    explicit, _ = mha(x, mask=dense, return_weights=True)
    calls.clear()
    fused, _ = mha(x, mask=mask)
    (call,) = calls
    assert call['is_causal'] == mask.causal, name
    assert (call['key_value_seq_lengths'] is None) == (mask.key_lengths is None), name
    assert (call['query_seq_lengths'] is None) == (mask.query_lengths is None), name
    assert (call['mask'] is None) == (mask.dense is None), name  # a dense mask only for the dense part
    np.testing.assert_allclose(fused, explicit, atol=1e-5, err_msg=name)
    mha.fused_kernel = False
    np.testing.assert_allclose(mha(x, mask=mask)[0], explicit, atol=1e-6, err_msg=name)
    mha.fused_kernel = True


@pytest.mark.slow  # a whole translator, run both ways and decoded
def test_the_translator_gives_the_fused_kernel_lengths_and_is_causal_not_dense_masks(monkeypatch):
  from tests.translation_test_models import tiny_transformer

  model = tiny_transformer(
    features=16, decoder_layers=1, mlp_features=32, source_vocab_size=11, target_vocab_size=11
  )
  src = jnp.asarray([[3, 4, 5, 0, 0], [6, 7, 0, 0, 0]])
  tgt = jnp.asarray([[1, 8, 9, 0], [1, 5, 0, 0]])
  explicit, _ = model(src, tgt)
  for _, layer in nnx.iter_graph(model):
    if isinstance(layer, MultiHeadAttention):
      layer.fused_kernel = True
  calls = _recording_fused_attention(monkeypatch)
  fused, _ = model(src, tgt)
  assert len(calls) == 3 and all(call['mask'] is None for call in calls)
  assert [call['is_causal'] for call in calls] == [False, True, False]  # encoder, decoder self, cross
  for call in calls:
    np.testing.assert_array_equal(call['key_value_seq_lengths'], [3, 2])
  np.testing.assert_allclose(fused, explicit, atol=1e-5)
  cache = model.init_decode_cache(model.encode(src), 4)
  calls.clear()
  model.decode_step(tgt[:, :1], cache, src != 0)
  assert len(calls) == 2 and all(call['mask'] is None for call in calls)  # one new token: lengths only
  np.testing.assert_array_equal(calls[0]['key_value_seq_lengths'], [1, 1])
