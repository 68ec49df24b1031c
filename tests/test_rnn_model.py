"""The RNN translator: its scores against NumPy, causality, padding, decoding with its state, options,
and a few real training steps on SCAN through the trainer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention.scores import AttentionScore
from seq2seq.architectures import make_translator, model_section
from seq2seq.decoding import beam_search, greedy_search
from seq2seq.rnn_model import ATTENTION_SCORES
from tests.translation_test_configs import tiny_rnn_config
from tests.translation_test_models import VOCAB, decoded_step_by_step, sources, tiny_transformer
from trainer.errors import ConfigError
from trainer.loop import train_and_evaluate
from trainer.task import load_task


def tiny_rnn(attention_score='additive', encoder_cell='gru', **options):
  section = dict(
    architecture='rnn', embedding_features=8, encoder_hidden=6, decoder_hidden=10, max_length=40, dropout=0.0
  )
  section.update(options, attention_score=attention_score, encoder_cell=encoder_cell)
  return make_translator(section, source_vocab_size=VOCAB, target_vocab_size=VOCAB + 2, rngs=nnx.Rngs(0))


def targets(seed=1, length=5):
  return jnp.asarray(np.random.default_rng(seed).integers(4, VOCAB, size=(3, length)), jnp.int32)


def numpy_score(kind, score: AttentionScore, query, keys):
  """One query ``[batch, d]`` against keys ``[batch, source, d]`` -> logits ``[batch, source]``."""
  if kind == 'dot':
    return np.einsum('bd,bsd->bs', query, keys)
  if kind == 'scaled_dot':
    return np.einsum('bd,bsd->bs', query, keys) / np.sqrt(query.shape[-1])
  if kind == 'cosine':
    unit_q = query / np.linalg.norm(query, axis=-1, keepdims=True)
    unit_k = keys / np.sqrt(np.sum(keys * keys, axis=-1, keepdims=True) + 1e-12)  # padding keys are 0
    return np.einsum('bd,bsd->bs', unit_q, unit_k) / np.exp(np.asarray(score.log_temperature[...])[0])
  w_q, w_k = np.asarray(score.query_kernel[...])[0], np.asarray(score.key_kernel[...])[0]
  v = np.asarray(score.energy[...])[0]
  return np.tanh((query @ w_q)[:, None, :] + keys @ w_k) @ v


@pytest.mark.parametrize('kind', ['additive', 'dot', 'scaled_dot', 'cosine', 'none'])
def test_each_score_inside_the_decoder_against_numpy_for_one_step(kind):
  model = tiny_rnn(kind)
  src, first_token = sources(), targets(length=1)
  logits, intermediates = model(src, first_token, return_weights=True)
  encoded = np.asarray(intermediates['encoded'])
  # The decoder's first state, by NumPy's own GRU from the model's parameters.
  hidden0 = np.tanh(
    encoded[:, 0, 6:] @ np.asarray(model.bridge.kernel[...]) + np.asarray(model.bridge.bias[...])
  )
  x = np.concatenate([np.asarray(model.target_embedding(first_token))[:, 0], np.zeros_like(hidden0)], -1)
  cell = model.decoder_cell
  xr, xz, xn = np.split(x @ np.asarray(cell.dense_i.kernel[...]) + np.asarray(cell.dense_i.bias[...]), 3, -1)
  hr, hz, hn = np.split(hidden0 @ np.asarray(cell.dense_h.kernel[...]), 3, -1)
  sigmoid = lambda a: 1 / (1 + np.exp(-a))
  r, z = sigmoid(xr + hr), sigmoid(xz + hz)
  hidden = (1 - z) * np.tanh(xn + r * hn) + z * hidden0
  mask = np.asarray(src) != 0
  if kind == 'none':
    last = mask.sum(1) - 1
    context = np.concatenate([encoded[np.arange(3), last, :6], encoded[:, 0, 6:]], -1)
    weights = np.zeros(mask.shape)
  else:
    keys = encoded @ np.asarray(model.key_projection.kernel[...])
    scores = np.where(mask, numpy_score(kind, model.score, hidden, keys), -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum('bs,bsm->bm', weights, encoded)
  combined = np.concatenate([context, hidden], -1) @ np.asarray(model.combine.kernel[...])
  attentional = np.tanh(combined + np.asarray(model.combine.bias[...]))
  expected = attentional @ np.asarray(model.output_projection.kernel[...])
  expected += np.asarray(model.output_projection.bias[...])
  np.testing.assert_allclose(intermediates['cross_attention_weights'][0][:, 0, 0], weights, atol=1e-5)
  np.testing.assert_allclose(logits[:, 0], expected, atol=1e-5)


@pytest.mark.parametrize('kind', ['additive', 'dot', 'scaled_dot', 'cosine'])
def test_prepared_keys_give_the_scores_logits(kind):
  score = AttentionScore(kind, num_heads=2, head_dim=4, rngs=nnx.Rngs(0))
  query, key = (
    jax.random.normal(jax.random.key(0), (2, 3, 2, 4)),
    jax.random.normal(jax.random.key(1), (2, 5, 2, 4)),
  )
  np.testing.assert_allclose(
    score.logits_for_prepared(query, score.prepare_keys(key)), score(query, key), atol=1e-5
  )


@pytest.mark.parametrize('encoder_cell', ['gru', pytest.param('lstm', marks=pytest.mark.slow)])
def test_the_encoder_sees_the_whole_source_and_the_decoder_only_the_past(encoder_cell):
  model = tiny_rnn(encoder_cell=encoder_cell)
  src, tgt = sources()[:1], targets()[:1]
  changed_src, changed_tgt = (
    src.at[0, 5].set(src[0, 5] % (VOCAB - 5) + 4),
    tgt.at[0, 3].set(tgt[0, 3] % (VOCAB - 5) + 4),
  )
  encoded, encoded_changed = model.encode(src), model.encode(changed_src)
  # A change at position 5 reaches every encoder position: forward after it, backward before it.
  assert np.all(np.abs(encoded - encoded_changed).max(axis=-1) > 1e-6)
  logits, logits_changed = model(src, tgt)[0], model(src, changed_tgt)[0]
  # Input position 3 (the token before output 3) reaches outputs 3 onwards only.
  np.testing.assert_allclose(logits_changed[:, :3], logits[:, :3], atol=1e-6)
  assert np.all(np.abs(logits_changed[:, 3:] - logits[:, 3:]).max(axis=-1) > 1e-6)


@pytest.mark.parametrize('encoder_cell', ['gru', 'lstm'])
def test_padding_does_not_change_the_encoder_states_of_real_tokens(encoder_cell):
  model = tiny_rnn(encoder_cell=encoder_cell)
  src = sources()[1:2, :4]
  padded = model.encode(jnp.pad(src, ((0, 0), (0, 5))))
  np.testing.assert_allclose(padded[:, :4], model.encode(src), atol=1e-6)
  assert np.all(padded[:, 4:] == 0)


@pytest.mark.slow  # builds both translators
def test_an_all_padding_source_gets_the_transformers_zero_weights():
  src = np.array(sources())
  src[2] = 0  # padding only
  tgt_in = targets()
  _, intermediates = tiny_rnn('scaled_dot')(jnp.asarray(src), tgt_in, return_weights=True)
  (weights,) = intermediates['cross_attention_weights']
  transformer = tiny_transformer(decoder_layers=1, num_heads=1, target_vocab_size=VOCAB + 2)
  _, theirs = transformer(jnp.asarray(src), tgt_in, return_weights=True)
  np.testing.assert_array_equal(np.asarray(theirs['cross_attention_weights'][0][2]), 0.0)
  np.testing.assert_array_equal(np.asarray(weights[2]), 0.0)
  np.testing.assert_allclose(np.asarray(weights[:2]).sum(-1), 1.0, atol=1e-6)
  assert float(jnp.abs(weights[1, ..., 4:]).max()) == 0.0


@pytest.mark.parametrize('kind', ['additive', pytest.param('none', marks=pytest.mark.slow)])
def test_decoding_with_the_state_equals_rerunning_the_decoder(kind):
  model = tiny_rnn(kind, encoder_cell='lstm' if kind == 'none' else 'gru')
  src = sources()
  graphdef, state = nnx.split(model)  # merged inside jit, as translate() does: nnx.RNN is an NNX scan

  @jax.jit
  def searches(state, s):
    model = nnx.merge(graphdef, state)
    return (
      greedy_search(model, s, max_extra_length=6),
      greedy_search(model, s, max_extra_length=6, use_cache=False),
      beam_search(model, s, beam_size=1, max_extra_length=6)[0],
      beam_search(model, s, beam_size=3, max_extra_length=6),
      beam_search(model, s, beam_size=3, max_extra_length=6, use_cache=False),
    )

  cached, uncached, beam_one, beam, beam_uncached = searches(state, src)
  np.testing.assert_array_equal(cached, uncached)
  np.testing.assert_array_equal(beam_one, cached)
  np.testing.assert_array_equal(beam[0], beam_uncached[0])
  np.testing.assert_allclose(beam[1], beam_uncached[1], atol=1e-5)
  # Step by step through the state gives the teacher-forced logits.
  tgt = targets()
  np.testing.assert_allclose(decoded_step_by_step(model, src, tgt, 8), model(src, tgt)[0], atol=1e-5)


def test_bad_options_fail_with_the_allowed_values():
  with pytest.raises(ValueError, match=f'allowed values: {", ".join(ATTENTION_SCORES)}'):
    tiny_rnn('general')
  with pytest.raises(ValueError, match='allowed values: gru, lstm'):
    tiny_rnn(encoder_cell='rnn')
  with pytest.raises(
    ConfigError, match="config.model.architecture is 'lstm'; allowed values: transformer, rnn"
  ):
    load_task(tiny_rnn_config(**{'model.architecture': 'lstm'}))
  with pytest.raises(ConfigError, match="config.model.attention_score is 'luong'; allowed values: "):
    load_task(tiny_rnn_config(**{'model.attention_score': 'luong'}))
  with pytest.raises(ConfigError, match='needs one vocabulary'):
    load_task(tiny_rnn_config(**{'model.share_embeddings': True}))
  assert set(model_section({'architecture': 'rnn'})) == set(tiny_rnn_config().model)


@pytest.mark.slow  # runs the trainer
def test_a_few_training_steps_on_scan_through_the_trainer(tmp_path):
  result = train_and_evaluate(tiny_rnn_config(), tmp_path)
  assert result.step == 4 and not result.interrupted
  metrics = result.eval_metrics
  assert {'bleu', 'bleu_lowercase', 'chrf', 'exact_match', 'perplexity', 'loss', 'accuracy'} <= set(metrics)
  assert np.isfinite(metrics['loss']) and metrics['perplexity'] >= 1.0
  assert len((tmp_path / 'hypotheses_test.txt').read_text().splitlines()) == 48
  # The alignment picture: the decoder's attention weights, source across, translation down.
  task = load_task(tiny_rnn_config())
  task.prepare(tmp_path)
  paths = task.reporting.draw_pictures(
    task, task.make_model(nnx.Rngs(0)), tmp_path / 'plots', 'run', 'untrained'
  )
  assert [path.name for path in paths] == ['cross_attention_run.png']
  assert paths[0].read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_lowercased_bleu_is_sacrebleus_lowercase_bleu():
  import sacrebleu

  from seq2seq.text_metrics import corpus_scores

  hypotheses, references = (
    ['A dog runs in the Park .', 'Two men talk'],
    ['a dog is running in the park .', 'Two men talk'],
  )
  scores = corpus_scores(hypotheses, references)
  assert scores['bleu_lowercase'] == sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
  assert scores['bleu_lowercase'] > scores['bleu']
  assert (
    '|case:lc|' in scores['bleu_lowercase_signature'] and '|tok:13a|' in scores['bleu_lowercase_signature']
  )


def test_the_score_ablation_table_has_a_row_per_score_and_a_column_group_per_split():
  from seq2seq.ablation_table import table

  scores, splits = ['none', 'additive'], ['simple', 'length']
  runs = [
    {
      'overrides': {'model.attention_score': score, 'data.split': split},
      'metrics': {'perplexity': 1.5 + i, 'bleu': 90.0 - 10 * i, 'exact_match': 0.5 - 0.1 * i},
    }
    for i, (score, split) in enumerate((score, split) for score in scores for split in splits)
  ]
  summary = dict(
    axes={'model.attention_score': scores, 'data.split': splits},
    seeds=[0],
    runs=runs,
    eval_split='test',
    task='seq2seq.task:Translation',
  )
  lines = table(summary).splitlines()
  assert lines[2].startswith('| model.attention_score | simple test PPL | simple test BLEU |')
  assert lines[4] == '| none | 1.50 | 90.0 | 50.0 | 2.50 | 80.0 | 40.0 |'
  assert lines[5].startswith('| additive | 3.50 | 70.0 | 30.0 |')
