"""The Multi30k Transformer of ``transformer_multi30k.py`` trained for longer.

  python train.py --config configs/transformer_multi30k_long.py --workdir runs/transformer_multi30k_long
  python evaluate.py --workdir runs/transformer_multi30k_long --average_last 5

The same model, data and vocabulary; 12,000 steps of 64 pairs instead of 1,800, with what a longer
run needs, chosen before it ran and not tuned on the validation split: dropout 0.3 instead of 0.1,
a warm-up of 1,000 steps, and beam search with length penalty alpha 1.0 instead of 0.6.
Checkpoints every 1,000 steps, the last 5 kept, for the averaged evaluation (second command).
Results of both commands: docs/results.md, "Multi30k for longer".
"""

from configs import transformer_multi30k
from configs.common import experiment


def get_config():
  return experiment(
    transformer_multi30k.get_config(),
    total_steps=12000,
    log_every_steps=500,
    eval_every_steps=12000,
    checkpoint_every_steps=1000,
    keep_checkpoints=5,
    model=dict(dropout=0.3),
    optimizer=dict(warmup_steps=1000),
    decode=dict(alpha=1.0),
  )
