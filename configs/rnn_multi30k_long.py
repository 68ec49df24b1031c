"""The Multi30k RNN of ``rnn_multi30k.py`` trained for longer, its decoding chosen on held-out pairs.

  python train.py --config configs/rnn_multi30k_long.py --workdir runs/rnn_multi30k_long
  python -m seq2seq.choose_decoding --workdir runs/rnn_multi30k_long --average_last 1,3,6 --beam_sizes 1,4 --alphas 0.6,1.0,1.4 --report_on val

The same model, data and vocabulary; 3,600 steps of 64 pairs instead of 2,700, with 1,000 training
pairs held out (``data.holdout``) to choose on, never val. Evaluated greedily on the held-out pairs and
on val at the end; checkpoints every 300 steps, the last 6 kept, so that the second command can
choose checkpoint averaging, beam size and length penalty on the held-out pairs and then translate
val once with that choice. Result: docs/results/translation.md, "The RNN translator".
"""

from configs import rnn_multi30k
from configs.common import experiment


def get_config():
  return experiment(
    rnn_multi30k.get_config(),
    total_steps=3600,
    eval_every_steps=3600,
    checkpoint_every_steps=300,
    keep_checkpoints=6,
    eval_splits=('holdout', 'val'),
    data=dict(holdout=1000),
  )
