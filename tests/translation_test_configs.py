"""Tiny translator configs for tests: small models, a few steps, small evaluations (seconds on a CPU)."""

from configs import rnn_scan, transformer_scan
from tests.config_overrides import override, short_run


def tiny_translation_config(**overrides):
  """``configs/transformer_scan.py`` with a one-layer model, run as ``short_scan_run`` runs it."""
  config = transformer_scan.get_config()
  config.model.update(
    features=16, encoder_layers=1, decoder_layers=1, num_heads=2, mlp_features=32, dropout=0.1
  )
  return short_scan_run(config, overrides)


def tiny_rnn_config(**overrides):
  """``configs/rnn_scan.py`` with small GRUs, run as ``short_scan_run`` runs it."""
  config = rnn_scan.get_config()
  config.model.update(embedding_features=8, encoder_hidden=8, decoder_hidden=16)
  return short_scan_run(config, overrides)


def short_scan_run(config, overrides):
  """A SCAN config trained 4 steps on the pairs of at most 7 words and actions (one batch shape to
  compile), evaluated on the first 48 test pairs (truncated likewise); ``overrides`` over that."""
  config.data.update(max_source_length=8, max_target_length=8, max_eval_examples=48)
  config.decode.update(beam_size=1, num_samples=2)
  return override(short_run(config, steps=4, eval_every=2), overrides)


def tiny_parallel_config(path, **overrides):
  """A folder of parallel text with a small shared SentencePiece vocabulary, no dropout."""
  config = tiny_translation_config()
  config.data.update(
    source='parallel',
    path=str(path),
    src_lang='de',
    tgt_lang='en',
    max_source_length=16,
    max_target_length=16,
  )
  config.data.tokenizer.update(kind='sentencepiece', shared=True, vocab_size=48, model_type='unigram')
  config.model.update(share_embeddings=True, dropout=0.0)
  config.batch_size = 8
  config.eval_batch_size = 16
  config.eval_split = 'val'
  config.decode.update(max_extra_length=5)
  return override(config, overrides)
