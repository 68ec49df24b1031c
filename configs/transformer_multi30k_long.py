"""The Multi30k Transformer of ``transformer_multi30k.py`` trained for longer, on packed rows, with a
larger vocabulary, its decoding chosen on held-out pairs.

  python train.py --config configs/transformer_multi30k_long.py --workdir runs/transformer_multi30k_long
  python -m seq2seq.choose_decoding --workdir runs/transformer_multi30k_long --average_last 1 --beam_sizes 4 --alphas 1.4,1.8,2.2,2.6,3.0 --report_on val

The same model and data; 8,000 SentencePiece pieces instead of 4,000; 9,500 steps instead of
1,800, each of 18 packed rows (about 64 pairs: ``data.packing``, which gave the short config more
BLEU for less CPU), with what a longer run needs: dropout 0.3 instead of 0.1 and a warm-up of 1,000
steps. 1,000 training pairs are held out (``data.holdout``) to choose on, never val: the vocabulary
size and label smoothing were chosen on them, and the second command chooses the length penalty on
them and then translates val once with that choice; evaluated with beam search (4, alpha 1.0) on
them and on val at the end; checkpoints every 500 steps, the last 6 kept. Result:
docs/results/translation.md, "Multi30k for longer".
"""

from configs import transformer_multi30k
from configs.common import experiment


def get_config():
  return experiment(
    transformer_multi30k.get_config(),
    total_steps=9500,
    batch_size=18,
    log_every_steps=500,
    eval_every_steps=9500,
    checkpoint_every_steps=500,
    keep_checkpoints=6,
    eval_splits=('holdout', 'val'),
    data=dict(packing=True, holdout=1000, tokenizer=dict(vocab_size=8000)),
    model=dict(dropout=0.3),
    optimizer=dict(warmup_steps=1000),
    decode=dict(alpha=1.0),
  )
