"""The encoder-decoder Transformer and its decoding: masks, shared tables, cache, greedy and beam search."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seq2seq.architectures import make_translator
from seq2seq.decoding import beam_search, greedy_search, length_penalty
from seq2seq.model import decode_variant
from seq2seq.tokenizer import BOS_ID, EOS_ID
from tests.translation_test_models import VOCAB, decoded_step_by_step, sources, tiny_transformer
from trainer.errors import ConfigError


def greedy_searches(model):
  """Greedy search with the decoding cache and without it, compiled together."""
  return jax.jit(
    lambda s: (
      greedy_search(model, s, max_extra_length=6),
      greedy_search(model, s, max_extra_length=6, use_cache=False),
    )
  )


@pytest.mark.parametrize('posemb', ['sincos1d', 'relative'])
def test_padding_does_not_change_the_encoding_of_real_tokens(posemb):
  model = tiny_transformer(posemb)
  src = sources()[1:2, :4]
  encode = jax.jit(lambda s, padded: (model.encode(s), model.encode(padded)[:, :4]))
  unpadded, padded = encode(src, jnp.pad(src, ((0, 0), (0, 5))))
  np.testing.assert_allclose(padded, unpadded, atol=1e-5)


# The fast tier decodes with one of them; the full suite with each.
@pytest.mark.parametrize(
  'posemb',
  ['learn1d', pytest.param('relative', marks=pytest.mark.slow), pytest.param('rope', marks=pytest.mark.slow)],
)
def test_cached_greedy_search_equals_rerunning_the_decoder(posemb):
  model = tiny_transformer(posemb)
  src = sources()
  cached, uncached = greedy_searches(model)(src)
  np.testing.assert_array_equal(cached, uncached)
  assert cached.shape == (3, 14)
  # Every output ends with EOS by its length limit (source length + 6) and is padded after it.
  for row, length in zip(np.asarray(cached), [7, 4, 2]):
    end = list(row).index(EOS_ID)
    assert end <= length + 6 and not row[end + 1 :].any()


@pytest.mark.parametrize('posemb', ['sincos1d', pytest.param('relative', marks=pytest.mark.slow)])
def test_cached_beam_search_equals_rerunning_the_decoder(posemb):
  model = tiny_transformer(posemb)
  src = sources()
  search = jax.jit(
    lambda s, eos: [
      beam_search(model, s, beam_size=3, alpha=0.6, max_extra_length=6, eos_id=eos, use_cache=use_cache)
      for use_cache in (True, False)
    ],
    static_argnums=1,
  )
  for eos_id in (EOS_ID, None):  # None: no hypothesis ends, every step of the buffer is decoded
    (cached, cached_scores), (uncached, uncached_scores) = search(src, eos_id)
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_allclose(cached_scores, uncached_scores, rtol=1e-5)
  assert not np.any(np.asarray(cached) == 0)  # never padding: the whole buffer was decoded
  assert not np.any(np.asarray(cached) == BOS_ID)


def test_decode_step_gives_the_teacher_forced_logits():
  model = tiny_transformer('relative')
  src = sources()
  tokens = np.random.default_rng(1).integers(4, VOCAB, size=(3, 3)).astype(np.int32)
  tgt_in = jnp.concatenate([jnp.full((3, 1), BOS_ID), tokens], axis=1)

  @jax.jit
  def both(src, tgt_in):
    return decoded_step_by_step(model, src, tgt_in, 6), model(src, tgt_in)[0]

  stepwise, teacher_forced = both(src, tgt_in)
  np.testing.assert_allclose(stepwise, teacher_forced, atol=1e-4)


def _sequence_log_prob(model, src, tokens):
  """Teacher-forced log-probability of each output (up to and including its EOS), with padding
  and BOS ruled out as the searches rule them out."""
  tgt_in = jnp.concatenate([jnp.full((tokens.shape[0], 1), BOS_ID), tokens[:, :-1]], axis=1)
  logits, _ = model(src, tgt_in)
  logits = logits.at[..., jnp.asarray([0, BOS_ID])].set(-1e9)
  token_logp = jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], axis=-1)[..., 0]
  return jnp.sum(jnp.where(tokens != 0, token_logp, 0.0), axis=1)


def test_beam_search_against_greedy_search_and_its_own_scores():
  model = tiny_transformer('rope', decoder_layers=1)
  src = sources(2)

  @jax.jit
  def searches(src):
    greedy = greedy_search(model, src, max_extra_length=6)
    beam_of_one, _ = beam_search(model, src, beam_size=1, alpha=0.0, max_extra_length=6)
    beam, scores = beam_search(model, src, beam_size=3, alpha=0.6, max_extra_length=6)
    shortest_alone, _ = beam_search(model, src[2:], beam_size=3, alpha=0.6, max_extra_length=6)

    def normalised(tokens):
      return _sequence_log_prob(model, src, tokens) / length_penalty(jnp.sum(tokens != 0, axis=1), 0.6)

    return greedy, beam_of_one, beam, shortest_alone, scores, normalised(beam), normalised(greedy)

  greedy, beam_of_one, beam, shortest_alone, scores, beam_scores, greedy_scores = searches(src)
  np.testing.assert_array_equal(beam_of_one, greedy)  # beam size 1 is greedy search
  # A sentence's result does not depend on the others in its batch.
  np.testing.assert_array_equal(shortest_alone[0], beam[2])
  np.testing.assert_allclose(scores, beam_scores, rtol=1e-4)
  assert np.all(np.asarray(scores) >= np.asarray(greedy_scores) - 1e-5)
  assert np.all(np.asarray(beam)[:, 0] != 0)


def test_shared_and_tied_embeddings_are_one_table():
  def embedding_parameters(**options):
    state = nnx.state(nnx.eval_shape(lambda: tiny_transformer(**options)), nnx.Param)
    return sum(x.size for x in jax.tree.leaves(state) if x.shape == (VOCAB, 8)), len(jax.tree.leaves(state))

  separate, separate_leaves = embedding_parameters(share_embeddings=False, tie_output=False)
  shared, shared_leaves = embedding_parameters(share_embeddings=True, tie_output=True)
  assert separate == 2 * VOCAB * 8 and shared == VOCAB * 8
  assert shared_leaves == separate_leaves - 3  # one embedding table, the output kernel and bias fewer


def test_cross_attention_weights_are_returned_when_asked():
  model = tiny_transformer()
  src, tgt_in = sources(), sources(1)[:, :5]
  logits, intermediates = jax.jit(lambda s, t: model(s, t, return_weights=True))(src, tgt_in)
  assert logits.shape == (3, 5, VOCAB) and logits.dtype == jnp.float32
  weights = intermediates['cross_attention_weights']
  assert len(weights) == 2 and weights[0].shape == (3, 2, 5, 7)
  assert len(intermediates['encoder_attention_weights']) == 1
  np.testing.assert_allclose(weights[0].sum(-1), 1.0, atol=1e-5)
  assert float(jnp.abs(weights[0][2, :, :, 2:]).max()) == 0.0  # padded source keys get no weight


def test_variants_and_their_errors():
  assert decode_variant('base') == dict(
    features=512, encoder_layers=6, decoder_layers=6, num_heads=8, mlp_features=2048
  )
  assert decode_variant('big')['features'] == 1024 and decode_variant('big')['num_heads'] == 16
  with pytest.raises(ValueError, match='Unknown Transformer variant'):
    decode_variant('large')
  with pytest.raises(ValueError, match='one vocabulary'):
    tiny_transformer(share_embeddings=True, source_vocab_size=10, target_vocab_size=12)
  with pytest.raises(ValueError, match='at most 40'):
    jax.eval_shape(lambda: tiny_transformer().encode(jnp.ones((1, 41), jnp.int32)))


PAPER_RECIPE = dict(activation='relu', norm_placement='post', use_bias=False)


@pytest.mark.slow  # decodes step by step
def test_the_papers_recipe_decodes_with_the_cache_as_without():
  model = tiny_transformer('sincos1d', **PAPER_RECIPE)
  src = sources()
  cached, uncached = greedy_searches(model)(src)
  np.testing.assert_array_equal(cached, uncached)
  tgt_in = jnp.concatenate([jnp.full((3, 1), BOS_ID), cached[:, :4]], axis=1)
  np.testing.assert_allclose(decoded_step_by_step(model, src, tgt_in, 6), model(src, tgt_in)[0], atol=1e-4)


def test_the_papers_recipe_has_no_attention_biases_and_no_final_norms():
  def parameter_names(**options):
    state = nnx.state(nnx.eval_shape(lambda: tiny_transformer(**options)), nnx.Param)
    return {'/'.join(map(str, path)) for path, _ in nnx.to_flat_state(state)}

  ours, papers = parameter_names(), parameter_names(**PAPER_RECIPE)
  attention_biases = {name for name in ours if 'attention/' in name and name.endswith('/bias')}
  final_norms = {name for name in ours if name.startswith(('encoder/norm/', 'decoder/norm/'))}
  # qkv and out per self-attention (1 encoder, 2 decoder layers), query, kv and out per cross-attention
  assert len(attention_biases) == 2 * (1 + 2) + 3 * 2 and len(final_norms) == 4
  assert papers == ours - attention_biases - final_norms
  assert all(name.startswith(('encoder/blocks/', 'decoder/blocks/')) for name in attention_biases)


def test_model_configs_without_the_newer_fields_get_our_defaults():
  from seq2seq.model import model_section

  newer = dict(activation='gelu', norm_placement='pre', use_bias=True, scan_layers=False, remat='none')
  config = model_section({})
  assert {name: config[name] for name in newer} == newer
  config.update(
    variant='custom', features=8, encoder_layers=1, decoder_layers=1, num_heads=2, mlp_features=16
  )
  for name in newer:
    del config[name]
  build = lambda config: nnx.eval_shape(
    lambda: make_translator(config, source_vocab_size=VOCAB, target_vocab_size=VOCAB, rngs=nnx.Rngs(0))
  )
  assert build(config).encoder.blocks[0].mlp.activation == 'gelu'
  config.update(PAPER_RECIPE)
  model = build(config)
  assert model.encoder.blocks[0].mlp.activation == 'relu' and model.decoder.blocks[0].norm_placement == 'post'
  assert model.decoder.blocks[0].self_attention.qkv.bias is None
  config.activation = 'tanh'
  with pytest.raises(
    ConfigError,
    match="^config.model.activation is 'tanh'; allowed values: gelu, gelu_exact, quick_gelu, relu.",
  ):
    build(config)
