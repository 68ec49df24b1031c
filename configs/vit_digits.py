"""ViT on scikit-learn's 8x8 handwritten digits: the embedded default, no files needed.

  python train.py --config configs/vit_digits.py --workdir runs/vit_digits
  python evaluate.py --workdir runs/vit_digits

Patches of 2x2 pixels make a 4x4 grid of 16 tokens, so position carries real information (the
positional-embedding ablation uses this config); 150 epochs of 128, dropout off. Result:
docs/results.md, "Headline runs".
"""

from configs.common import experiment


def get_config():
  return experiment(
    'vit.task:ImageClassification',
    eval_batch_size=360,
    num_epochs=150.0,
    label_smoothing=0.1,
    log_every_steps=100,
    data=dict(source='digits', augment=dict(crop_padding=1, crop_pad_mode='constant')),
    model=dict(width=64, depth=4, num_heads=4, mlp_dim=128, patch_size=2, pool='gap', drop_path=0.1),
    optimizer=dict(learning_rate=0.003, warmup_steps=100, weight_decay=0.3),
  )
