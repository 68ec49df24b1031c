"""The positional-embedding table on CIFAR-10 (ViT Table 8's rows on real images), sized for one GPU.

  python ablate.py --config configs/vit_cifar10_posemb.py --workdir runs/posemb_cifar10 \
      --axis model.posemb=none,learn1d,learn2d,sincos2d,relative

The small ViT of s-chh's CIFAR-10 table (2D-Positional-Encoding-Vision-Transformer): width 128, 6
layers, 4 heads, MLP 256, 4x4 patches (an 8x8 grid and a class token), dropout 0.1, AdamW with
weight decay 1e-3, a linear warm-up into a cosine decay to 1e-5, random crop (4 pixels of zero
padding) and flip. What differs from theirs: batch 512 for 50 epochs instead of 128 for 200, the
learning rate 1e-3 instead of 5e-4 (the batch is 4 times theirs) and the warm-up 5 epochs (489
steps) instead of 10, so that the five runs, one seed each, fit the time budget of one GPU given in
docs/ablations.md ("The positional-embedding table on CIFAR-10"), the decoded images in host memory.

Reads the image folder data/cifar10/{train,test}/<class>/* (``python -m pipelines.download cifar10``
writes it; elsewhere: --config.data.path=DIR); the decoded images are cached in
``runs/cifar10_cache`` so that the runs after the first do not decode them again.
``bash benchmarks/gpu_records.sh posemb_cifar10`` runs the sweep on a GPU and records it. Result:
not yet measured.
"""

from configs import cifar10_data
from configs.common import experiment


def get_config():
  return experiment(
    'vit.task:ImageClassification',
    batch_size=512,
    eval_batch_size=1000,
    num_epochs=50.0,
    log_every_steps=500,
    eval_every_steps=1000,
    checkpoint_every_steps=5000,
    data=dict(
      **cifar10_data.FOLDER,
      cache_dir='runs/cifar10_cache',
      num_threads=8,
      prefetch_batches=8,
      augment=dict(crop_padding=4, crop_pad_mode='constant', flip=True),
    ),
    model=dict(width=128, depth=6, num_heads=4, mlp_dim=256, patch_size=4, dropout=0.1),
    optimizer=dict(learning_rate=1e-3, warmup_steps=489, weight_decay=1e-3, end_learning_rate=1e-5),
  )
