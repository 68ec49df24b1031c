"""ViT on CIFAR-10 with a small-data recipe: 4x4 patches (an 8x8 grid), 7 layers, strong augmentation.

  python train.py --config configs/vit_cifar10.py --workdir runs/vit_cifar10
  python evaluate.py --workdir runs/vit_cifar10

Reads the image folder data/cifar10/{train,test}/<class>/*.png that `python -m pipelines.download
cifar10` writes (elsewhere: --config.data.path=DIR; --config.data.cache_dir=DIR keeps the decoded
images between runs), or a prepared tfds copy:
  --config.data.source=tfds --config.data.name=cifar10 [--config.data.data_dir=DIR]

The shape follows the small ViTs that train well from scratch on CIFAR (e.g. the "ViT-Lite-7/4" of
Hassani et al. 2021): width 256, 7 layers, 4 heads, MLP 512, random crop + flip + RandAugment,
label smoothing, AdamW, 200 epochs; a recipe for an accelerator (on a CPU,
``--config.grad_accum_steps=4``: docs/performance.md). Result: not yet measured.
"""

from configs import cifar10_data
from configs.common import experiment


def get_config():
  return experiment(
    'vit.task:ImageClassification',
    eval_batch_size=500,
    num_epochs=200.0,
    label_smoothing=0.1,
    log_every_steps=100,
    eval_every_steps=2000,
    checkpoint_every_steps=2000,
    data=dict(
      **cifar10_data.FOLDER,
      augment=dict(crop_padding=4, flip=True, randaugment_layers=2, randaugment_magnitude=9),
    ),
    model=dict(width=256, depth=7, num_heads=4, mlp_dim=512, pool='gap', drop_path=0.1),
    optimizer=dict(warmup_steps=3900, weight_decay=0.05),
  )
