"""Transformer big on WMT14 English->German: the recipe of Vaswani et al. (2017), for accelerators.

  # once, on a machine with internet (this project never downloads):
  tfds build wmt14_translate/de-en --data_dir ~/tensorflow_datasets
  python train.py --config configs/transformer_wmt14_ende_big.py --workdir runs/wmt14_ende_big
  python evaluate.py --workdir runs/wmt14_ende_big --split test --average_last 20

As ``transformer_wmt14_ende_base`` with the big model (d=1024, 6+6 layers, 16 heads, ff 4096),
dropout 0.3, the peak learning rate 1024^-0.5 * 4000^-0.5, 300k steps, 8 micro-batches per step
instead of 4 (the same batch in less memory) and evaluation batches of 128; the paper averaged the
last 20 checkpoints. Result: not yet measured.
"""

from configs import transformer_wmt14_ende_base
from configs.common import experiment


def get_config():
  return experiment(
    transformer_wmt14_ende_base.get_config(),
    grad_accum_steps=8,
    eval_batch_size=128,
    total_steps=300_000,
    keep_checkpoints=20,
    model=dict(variant='big', dropout=0.3),
    optimizer=dict(learning_rate=1024**-0.5 * 4000**-0.5),
  )
