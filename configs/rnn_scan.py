"""RNN with Bahdanau attention on SCAN's simple split (commands -> actions): the embedded default.

  python train.py --config configs/rnn_scan.py --workdir runs/rnn_scan
  python evaluate.py --workdir runs/rnn_scan

A bidirectional GRU encoder (128 per direction) and an attentive GRU decoder (256) with the
additive score and input feeding (``seq2seq.rnn_model``), embeddings of 64, word-level
vocabularies, 1,600 steps of 128 pairs, greedy decoding of the whole test split. Swap the score
with ``--config.model.attention_score=dot`` (or scaled_dot, cosine, none). Result:
docs/results.md, "The RNN translator".
"""

from configs.common import experiment
from configs.translation_data import SCAN


def get_config():
  return experiment(
    'seq2seq.task:Translation',
    **SCAN,
    total_steps=1600,
    log_every_steps=200,
    eval_every_steps=1600,
    checkpoint_every_steps=800,
    model=dict(
      architecture='rnn',
      embedding_features=64,
      encoder_hidden=128,
      decoder_hidden=256,
      dropout=0.1,
      max_length=64,
    ),
    optimizer=dict(learning_rate=0.002, warmup_steps=100, b2=0.98),
  )
