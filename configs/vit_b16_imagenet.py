"""ViT-B/16 on ImageNet-1k from scratch, the recipe of Dosovitskiy et al. (2021), for accelerators.

  python train.py --config configs/vit_b16_imagenet.py --workdir runs/vit_b16 --config.data.data_dir=DIR

DIR holds a prepared tfds `imagenet2012` (build it with `tfds build imagenet2012 --file_format
array_record` after placing the manually downloaded archives, so that it is read with random
access and resumes exactly; see docs/data.md). Recipe: 224x224 images, batch 4096, Adam with
decoupled weight decay 0.3, peak learning rate 3e-3, 10k warmup steps then linear decay, 300
epochs, dropout 0.1, gradient clipping at global norm 1, class-token head, the Inception crop and
a horizontal flip. Result: not yet measured.
"""

from configs.common import experiment


def get_config():
  return experiment(
    'vit.task:ImageClassification',
    batch_size=4096,
    eval_batch_size=1024,
    num_epochs=300.0,
    log_every_steps=100,
    eval_every_steps=5000,
    checkpoint_every_steps=2000,
    eval_split='validation',
    data=dict(
      source='tfds',
      name='imagenet2012',
      image_size=(224, 224),
      mean=(0.5, 0.5, 0.5),
      std=(0.5, 0.5, 0.5),
      augment=dict(flip=True, crop_scale=(0.08, 1.0)),
    ),
    model=dict(variant='B/16', dropout=0.1, dtype='bfloat16'),
    optimizer=dict(learning_rate=0.003, schedule='linear', warmup_steps=10000, weight_decay=0.3),
  )
