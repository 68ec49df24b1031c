"""DeiT's training recipe (Touvron et al. 2021) for a DeiT-Ti-shaped ViT on CIFAR-10, from scratch.

  python train.py --config configs/vit_cifar10_deit.py --workdir runs/vit_cifar10_deit
  python evaluate.py --workdir runs/vit_cifar10_deit --checkpoint best --params ema

Reads a prepared tfds copy of `cifar10` (`--config.data.data_dir=DIR`), or an image folder
(`python -m pipelines.download cifar10` writes data/cifar10):
  --config.data.source=folder --config.data.path=data/cifar10 --config.data.cache_dir=/tmp/cifar_cache

DeiT's (its `main.py` defaults): AdamW at 5e-4 per 512 images, weight decay 0.05, cosine schedule
with 5 warm-up epochs, 300 epochs, label smoothing 0.1, drop path 0.1, no gradient clipping; random
resized crop and flip, RandAugment (2 layers, magnitude 9), mixup 0.8 and CutMix 1.0, random
erasing 0.25, 3 repeated augmentations, an EMA of the parameters (decay 0.99996, trainer/ema.py);
DeiT-Ti's shape (width 192, 12 layers, 3 heads, MLP 768, a class token). Not DeiT's: 4x4 patches
on the 32x32 images; batch 768, so that the 3 repeats divide it; big_vision's RandAugment ops;
mixup and CutMix drawn per row. For an accelerator. Result: not yet measured.
"""

from configs import cifar10_data
from configs.common import experiment


def get_config():
  return experiment(
    'vit.task:ImageClassification',
    batch_size=768,
    eval_batch_size=500,
    num_epochs=300.0,
    label_smoothing=0.1,
    log_every_steps=100,
    eval_every_steps=1950,
    checkpoint_every_steps=1950,
    data=dict(
      **cifar10_data.TFDS,
      augment=dict(
        flip=True,
        randaugment_layers=2,
        randaugment_magnitude=9,
        mixup_alpha=0.8,
        cutmix_alpha=1.0,
        crop_scale=(0.08, 1.0),
        erase_prob=0.25,
        repeats=3,
      ),
    ),
    model=dict(depth=12, mlp_dim=768, drop_path=0.1),
    optimizer=dict(learning_rate=7.5e-4, warmup_steps=325, weight_decay=0.05, grad_clip_norm=0.0),
    ema=dict(decay=0.99996),
  )
