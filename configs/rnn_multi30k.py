"""RNN with Bahdanau attention on Multi30k German->English (Elliott et al. 2016), the PyTorch
tutorial's model shrunk for a CPU.

  python train.py --config configs/rnn_multi30k.py --workdir runs/rnn_multi30k
  python evaluate.py --workdir runs/rnn_multi30k

Embeddings of 256, a bidirectional GRU encoder of 256 per direction, an attentive GRU decoder of
256 with the additive score and input feeding (``seq2seq.rnn_model``), dropout 0.3; the tutorial
had 512 per direction, a decoder of 512 and dropout 0.5, trained 10 epochs of 128 pairs (set those
fields for its size). Here 2,700 steps of 64 pairs. Reads data/multi30k (`python -m
pipelines.download multi30k`; set --config.data.path elsewhere); a shared SentencePiece vocabulary
of 4,000 pieces; greedy decoding of test (test_2016_flickr) at the end, or of val where the folder
has no test. Reports sacreBLEU (``bleu``) and ``bleu_lowercase``. Result: docs/results.md, "The
RNN translator".
"""

from configs.common import experiment
from configs.translation_data import MULTI30K


def get_config():
  return experiment(
    'seq2seq.task:Translation',
    **MULTI30K,
    total_steps=2700,
    log_every_steps=100,
    eval_every_steps=2700,
    checkpoint_every_steps=900,
    model=dict(
      architecture='rnn',
      encoder_hidden=256,
      decoder_hidden=256,
      dropout=0.3,
      max_length=128,
      share_embeddings=True,
    ),
    decode=dict(beam_size=1),
    optimizer=dict(warmup_steps=300, b2=0.98, eps=1e-9),
  )
