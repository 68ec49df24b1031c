"""Transformer on SCAN's simple split (commands -> actions): the embedded default, no files needed.

  python train.py --config configs/transformer_scan.py --workdir runs/transformer_scan
  python evaluate.py --workdir runs/transformer_scan

Word-level vocabularies, a small model (d=128, 2 encoder and 2 decoder layers), 4,800 steps of
128 pairs, greedy decoding of the whole test split in one batch (one shape to compile). The number
of steps was chosen on 1,000 held-out training pairs (docs/results.md, "Choosing the SCAN recipe
on held-out pairs"). Result: docs/results.md, "Headline runs".
"""

from configs.common import experiment
from configs.translation_data import SCAN


def get_config():
  return experiment(
    'seq2seq.task:Translation',
    **SCAN,
    total_steps=4800,
    log_every_steps=200,
    eval_every_steps=4800,
    checkpoint_every_steps=1600,
    model=dict(
      variant='custom',
      features=128,
      encoder_layers=2,
      decoder_layers=2,
      mlp_features=256,
      max_length=64,
      dropout=0.0,
    ),
    optimizer=dict(learning_rate=0.002, warmup_steps=100, b2=0.98),
  )
