"""ViT on MNIST (28x28 grey, 60,000 train / 10,000 test), from the four IDX files or from tfds.

  python train.py --config configs/vit_mnist.py --workdir runs/vit_mnist
  python evaluate.py --workdir runs/vit_mnist

data/mnist (`python -m pipelines.download mnist`; elsewhere: --config.data.path=DIR) holds the four
IDX files (gzipped or not). With a prepared tfds copy instead: --config.data.source=tfds
--config.data.name=mnist [--config.data.data_dir=DIR]. Patches of 7x7 pixels make a 4x4 grid; 5
epochs of 128. Result: docs/results.md, "Headline runs".
"""

from configs.common import experiment


def get_config():
  return experiment(
    'vit.task:ImageClassification',
    eval_batch_size=500,
    num_epochs=5.0,
    label_smoothing=0.1,
    log_every_steps=100,
    eval_every_steps=1000,
    checkpoint_every_steps=1000,
    data=dict(source='idx', path='data/mnist', augment=dict(crop_padding=2, crop_pad_mode='constant')),
    model=dict(width=128, depth=4, num_heads=4, mlp_dim=256, patch_size=7, pool='gap'),
    optimizer=dict(learning_rate=0.002, warmup_steps=200, weight_decay=0.05),
  )
