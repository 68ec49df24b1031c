"""The attention-layout and temporal-position sweeps on moving digits, short enough for a 2-core CPU.

  python ablate.py --config configs/video_digits_ablation.py --workdir runs/video_ablation \
      --axis model.attention=spacetime,factorised_encoder,divided,factorised_dot_product
  python ablate.py --config configs/video_digits_ablation.py --workdir runs/video_posemb \
      --axis model.temporal_posemb=none,learn1d,sincos1d

This is video_digits with ``divided`` attention over one-frame tubelets (1x4x4), batches of 64
and 120 steps: the same as ``--config configs/video_digits.py --config.model.attention=divided
--config.model.tubelet="(1,4,4)" --config.batch_size=64 --config.total_steps=120
--config.eval_every_steps=120 --config.checkpoint_every_steps=120 --config.log_every_steps=20``.
It measures what a layout costs (GFLOPs per clip from XLA's cost analysis, training clips/s);
its accuracies are those of barely started models and rank nothing. For accuracies, sweep
``configs/video_digits.py`` itself (5 min 15 s a run alone on a 2-core CPU, 8-9 minutes shared).

Runtime: 7 to 10 minutes on a 2-core CPU for each sweep. The tables: docs/ablations.md, "Video
layouts and temporal positions"; machine and commit: docs/results.md.
"""

from configs import video_digits


def get_config():
  config = video_digits.get_config()
  # The sweeps' base: divided attention over one-frame tubelets, so time reaches the model only
  # through its temporal positions (two-frame tubelets would show the motion inside each token).
  config.model.attention = 'divided'
  config.model.tubelet = (1, 4, 4)
  config.batch_size = 64
  config.num_epochs = 0.0
  config.total_steps = 120
  config.eval_every_steps = 120
  config.checkpoint_every_steps = 120
  config.log_every_steps = 20
  return config
