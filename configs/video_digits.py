"""Video Transformer on moving digits: the embedded default, no files needed.

  python train.py --config configs/video_digits.py --workdir runs/video_digits
  python evaluate.py --workdir runs/video_digits

Clips of 4 frames of 24x24: one of scikit-learn's 8x8 digits, scaled to 16x16, moves 2 pixels per
frame right, left, down or up (video.clip_sources). The label is digit x direction, 40 classes. A
model that sees the frames as a set (no temporal positions, one-frame tubelets) cannot tell a
direction from its opposite.

Layout ``factorised_encoder`` (ViViT model 2: a spatial encoder per time step, then a temporal
encoder of 2 blocks over the time steps' pooled features) over tubelets of 2x4x4 pixels: each
tubelet spans two frames, so its embedding sees the motion itself (``video_digits_ablation.py``
uses one-frame tubelets, where time must come from the temporal positions). Result: the record
``results/video_digits.json`` (docs/results.md, "Headline runs"; other recipes: "The video
classifier").
"""

from configs.common import experiment


def get_config():
  return experiment(
    'video.task:VideoClassification',
    eval_batch_size=240,
    total_steps=2500,
    label_smoothing=0.1,
    log_every_steps=250,
    data=dict(num_frames=4, frame_size=24, jitter=2, augment=dict(crop_padding=1)),
    model=dict(
      attention='factorised_encoder',
      tubelet=(2, 4, 4),
      temporal_posemb='sincos1d',
      pool='gap',
      drop_path=0.1,
    ),
    optimizer=dict(learning_rate=0.003, warmup_steps=50, weight_decay=0.3),
  )
