"""The Multi30k Transformer of ``transformer_multi30k.py`` trained for longer, on packed rows, its
decoding chosen on held-out pairs.

  python train.py --config configs/transformer_multi30k_long.py --workdir runs/transformer_multi30k_long
  python -m seq2seq.choose_decoding --workdir runs/transformer_multi30k_long --average_last 1,3,6 --beam_sizes 1,4 --alphas 0.6,1.0,1.4 --report_on val

The same model, data and vocabulary; 11,000 steps instead of 1,800, each of 18 packed rows (about
64 pairs: ``data.packing``, which gave the short config more BLEU for less CPU), with what a longer
run needs: dropout 0.3 instead of 0.1 and a warm-up of 1,000 steps. 1,000 training pairs are held
out (``data.holdout``) to choose on, never val: evaluated with beam search (4, alpha 1.0) on them and
on val at the end; checkpoints every 500 steps, the last 6 kept, so that the second command chooses
checkpoint averaging, beam size and length penalty on the held-out pairs and then translates val
once with that choice. Result: docs/results/translation.md, "Multi30k for longer".
"""

from configs import transformer_multi30k
from configs.common import experiment


def get_config():
  return experiment(
    transformer_multi30k.get_config(),
    total_steps=11000,
    batch_size=18,
    log_every_steps=500,
    eval_every_steps=11000,
    checkpoint_every_steps=500,
    keep_checkpoints=6,
    eval_splits=('holdout', 'val'),
    data=dict(packing=True, holdout=1000),
    model=dict(dropout=0.3),
    optimizer=dict(warmup_steps=1000),
    decode=dict(alpha=1.0),
  )
