"""The attention-layout and temporal-position sweeps on moving digits, short enough for a 2-core CPU.

  python ablate.py --config configs/video_digits_ablation.py --workdir runs/video_ablation \
      --axis model.attention=spacetime,factorised_encoder,divided,factorised_dot_product
  python ablate.py --config configs/video_digits_ablation.py --workdir runs/video_posemb \
      --axis model.temporal_posemb=none,learn1d,sincos1d

This is video_digits with ``divided`` attention over one-frame tubelets (1x4x4), so time reaches
the model only through its temporal positions, batches of 64 and 120 steps. It measures what a
layout costs (GFLOPs per clip, training clips/s); its accuracies are those of barely started
models and rank nothing (for accuracies, sweep ``configs/video_digits.py``). The tables:
docs/ablations.md, "Video layouts and temporal positions"; machine and commit: docs/results.md,
"Ablations".
"""

from configs import video_digits
from configs.common import experiment


def get_config():
  return experiment(
    video_digits.get_config(),
    batch_size=64,
    total_steps=120,
    log_every_steps=20,
    eval_every_steps=120,
    checkpoint_every_steps=120,
    model=dict(attention='divided', tubelet=(1, 4, 4)),
  )
