"""The fused attention call padded to a length cuDNN takes: the same numbers, and cuDNN asked for.

JAX's cuDNN path refuses to train on odd lengths (a ViT's class token and 14x14 patches: 197).
``attention_pad_multiple`` pads the fused call; these tests check on a CPU that the padded model
computes what the unpadded one does, and that the train step, traced as on a GPU, asks cuDNN for
every attention with a length JAX's own check of cuDNN's kernel accepts.
"""

import jax
import jax._src.cudnn.fused_attention_stablehlo as cudnn_attention
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention import MultiHeadAttention
from attention.masks import Mask, combine_masks, padding_mask
from benchmarks.synthetic_tasks import SyntheticImageTask
from configs.common import trainer_config
from trainer.partitioning import global_batch, replicated
from trainer.run_step import build_step
from trainer.state import train_metrics
from vit.model import make_vit, model_section

B, T, H, D = 2, 7, 2, 16  # an odd length, as a ViT's 197


def _inputs(seed=0):
  return jnp.asarray(np.random.default_rng(seed).normal(size=(B, T, D)).astype(np.float32))


def _masks():
  rng = np.random.default_rng(1)
  lengths = jnp.asarray([5, 7], jnp.int32)
  return {
    'none': None,
    'keys': Mask(key_lengths=lengths),
    'causal+keys': Mask(causal=True, key_lengths=lengths),
    'dense': padding_mask(None, jnp.asarray(rng.random((B, T)) > 0.3)),
    'causal+dense+queries': combine_masks(
      Mask(causal=True, query_lengths=lengths), padding_mask(None, jnp.asarray(rng.random((B, T)) > 0.3))
    ),
  }


@pytest.mark.parametrize('name', list(_masks()))
@pytest.mark.parametrize('multiple', [2, 8])
def test_padded_fused_attention_equals_the_unpadded(name, multiple):
  mask, x = _masks()[name], _inputs()
  bias = jnp.asarray(np.random.default_rng(2).normal(size=(1, H, T, T)).astype(np.float32))
  unpadded = MultiHeadAttention(H, D, fused_kernel=True, rngs=nnx.Rngs(0))
  padded = MultiHeadAttention(H, D, fused_kernel=True, pad_multiple=multiple, rngs=nnx.Rngs(0))
  for b in (None, bias):
    expected, _ = unpadded(x, mask=mask, bias=b)
    got, _ = padded(x, mask=mask, bias=b)
    np.testing.assert_allclose(got, expected, atol=1e-6, err_msg=f'{name}, bias {b is not None}')


def test_padded_cross_attention_equals_the_unpadded():
  memory = jnp.asarray(np.random.default_rng(3).normal(size=(B, 5, D)).astype(np.float32))
  mask = Mask(key_lengths=jnp.asarray([3, 5], jnp.int32))
  make = lambda **pad: MultiHeadAttention(
    H, D, fused_kernel=True, cross_attention=True, rngs=nnx.Rngs(0), **pad
  )  # noqa: E731
  expected, _ = make()(_inputs(), memory, mask=mask)
  got, _ = make(pad_multiple=4)(_inputs(), memory, mask=mask)
  np.testing.assert_allclose(got, expected, atol=1e-6)


def test_a_negative_multiple_is_refused():
  with pytest.raises(ValueError, match='attention_pad_multiple must be >= 0'):
    make_vit({'attention_pad_multiple': -1}, num_classes=3, image_shape=(8, 8, 3), rngs=nnx.Rngs(0))


def _tiny_vit(**options):
  # 16x16 images in 4x4 patches and a class token: 17 tokens, odd as B/16's 197.
  section = dict(width=32, depth=2, num_heads=2, mlp_dim=64, patch_size=4, **options)
  return make_vit(section, num_classes=5, image_shape=(16, 16, 3), rngs=nnx.Rngs(0))


@pytest.mark.parametrize('pool', ['cls', 'map'])
def test_the_padded_vit_equals_the_unpadded_in_logits_and_gradients(pool):
  images = jnp.asarray(np.random.default_rng(4).normal(size=(3, 16, 16, 3)).astype(np.float32))
  labels = jnp.asarray([0, 3, 1])

  def logits_and_grads(**options):
    model = _tiny_vit(pool=pool, head_zero_init=False, **options)
    graph, params = nnx.split(model)

    def loss(params):
      logits, _ = nnx.merge(graph, params)(images)
      return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(3), labels]), logits

    (_, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return logits, grads

  def close(a, b):  # 1e-6 of the gradient's own size: the zero class token's gradient is in the hundreds
    np.testing.assert_allclose(a, b, atol=1e-6 * max(1.0, float(jnp.abs(b).max())))

  explicit = logits_and_grads(attention_kernel='explicit')
  unpadded = logits_and_grads(attention_kernel='fused')
  for multiple in (2, 16):
    padded = logits_and_grads(attention_kernel='fused', attention_pad_multiple=multiple)
    for reference in (unpadded, explicit):
      np.testing.assert_allclose(padded[0], reference[0], atol=1e-6)
      jax.tree.map(close, padded[1], reference[1])


def _cudnn_calls_in_the_traced_train_step(monkeypatch, **options):
  """The train step of a bfloat16 ViT traced as on a GPU with cuDNN (``jax.default_backend`` says
  ``'gpu'``, JAX's cuDNN version check answers 9.28): how many of cuDNN's attention primitives,
  forward and backward, its jaxpr holds. JAX checks the shapes against cuDNN's kernel while tracing
  and refuses the attention there, so a refused call leaves no primitive (the explicit path runs)."""
  config = trainer_config()
  config.model = model_section(
    dict(width=32, depth=2, num_heads=2, mlp_dim=64, patch_size=4, dtype='bfloat16', **options)
  )
  config.batch_size = 4
  task = SyntheticImageTask(config, 16, 5)
  run_step = build_step(config, task, num_steps=10)
  state, parts = run_step.init.create()
  step = run_step.train_step(parts)
  rng = np.random.default_rng(0)
  batch = global_batch(
    {
      'image': rng.normal(size=(4, 16, 16, 3)).astype(np.float32),
      'label': rng.integers(0, 5, 4).astype(np.int32),
    },
    run_step.mesh,
  )
  metrics = jax.device_put(train_metrics(task).empty(), replicated(run_step.mesh))
  asked = []
  real_attention = jax.nn.dot_product_attention

  def recording_attention(*args, **kwargs):
    asked.append(dict(kwargs, length=args[0].shape[1]))
    return real_attention(*args, **kwargs)

  monkeypatch.setattr(cudnn_attention, 'check_cudnn_version', lambda: 92800)
  monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
  monkeypatch.setattr(jax.nn, 'dot_product_attention', recording_attention)
  text = str(jax.make_jaxpr(step)(state, metrics, batch))
  forward = text.count('dot_product_attention_fwd_wrapper[')
  backward = text.count('dot_product_attention_bwd_wrapper[')
  padding_masks = text.count('mask_type=MaskType.PADDING\n')
  return forward, backward, asked, padding_masks


def test_unpadded_odd_length_is_refused_by_cudnn_in_the_train_step(monkeypatch):
  # Why the padding exists: should a JAX release take odd lengths, this fails, and the option can go.
  forward, backward, asked, _ = _cudnn_calls_in_the_traced_train_step(monkeypatch)
  assert [call['implementation'] for call in asked] == ['cudnn', 'cudnn']  # asked, refused, explicit
  assert (forward, backward) == (0, 0)


@pytest.mark.parametrize('multiple', [2, 64])
def test_padded_train_step_asks_cudnn_with_lengths_it_takes(monkeypatch, multiple):
  forward, backward, asked, padding_masks = _cudnn_calls_in_the_traced_train_step(
    monkeypatch, attention_pad_multiple=multiple
  )
  padded = -(-17 // multiple) * multiple
  assert (forward, backward) == (2, 2)  # both layers, forward and backward, on cuDNN's kernel
  assert padding_masks == 4  # each of them told the padded keys by their lengths
  assert len(asked) == 2
  for call in asked:
    assert call['implementation'] == 'cudnn' and call['length'] == padded
    assert call['mask'] is None and not call['is_causal']
    lengths = call['key_value_seq_lengths']
    assert lengths.shape == (4,) and lengths.dtype == jnp.int32
