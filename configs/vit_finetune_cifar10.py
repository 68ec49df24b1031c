"""ViT-B/16 pre-trained on ImageNet-21k, fine-tuned on CIFAR-10 at 384x384 (the ViT paper's recipe).

  python train.py --config configs/vit_finetune_cifar10.py --workdir runs/vit_b16_cifar10 \
    --config.init_from.path=PATH/TO/imagenet21k/ViT-B_16.npz [--config.data.data_dir=DIR]
  python evaluate.py --workdir runs/vit_b16_cifar10

The checkpoint is the published ImageNet-21k ViT-B/16 ``.npz`` (official layout; its 768-wide
``pre_logits`` is dropped as the paper's fine-tuning does; the head is new and zero-initialised).
Recipe of the paper (appendix B.1.1): SGD with momentum 0.9, no weight decay, global-norm
clipping at 1, batch 512, cosine decay after a linear warmup, 10,000 steps, learning rate 0.01 of
{0.001, 0.003, 0.01, 0.03}, at 384x384 (the 14x14 position table resampled to 24x24). For an
accelerator. Result: not yet measured.
"""

from configs import cifar10_data
from configs.common import experiment


def get_config():
  return experiment(
    'vit.task:ImageClassification',
    batch_size=512,
    eval_batch_size=500,
    total_steps=10000,
    log_every_steps=100,
    eval_every_steps=1000,
    checkpoint_every_steps=1000,
    keep_checkpoints=2,
    data=dict(
      **cifar10_data.TFDS,
      image_size=(384, 384),
      mean=(0.5, 0.5, 0.5),
      std=(0.5, 0.5, 0.5),
      num_threads=8,
      augment=dict(flip=True),
    ),
    model=dict(
      variant='B/16', width=768, depth=12, num_heads=12, mlp_dim=3072, patch_size=16, dtype='bfloat16'
    ),
    optimizer=dict(name='sgd', learning_rate=0.01, warmup_steps=500),
    init_from=dict(path='imagenet21k/ViT-B_16.npz', init_head=False),
  )
