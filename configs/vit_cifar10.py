"""ViT on CIFAR-10 with a small-data recipe: 4x4 patches (an 8x8 grid), 7 layers, strong augmentation.

  python train.py --config configs/vit_cifar10.py --workdir runs/vit_cifar10
  python evaluate.py --workdir runs/vit_cifar10

Reads a prepared tfds copy of `cifar10` (`--config.data.data_dir=DIR`), or an image
folder root/{train,test}/<class>/*.png|jpg:
  --config.data.source=folder --config.data.path=PATH/TO/cifar10 --config.data.cache_dir=/tmp/cifar_cache

The shape follows the small ViTs that train well from scratch on CIFAR (e.g. the
"ViT-Lite-7/4" of Hassani et al. 2021): width 256, 7 layers, 4 heads, MLP 512,
random crop + flip + RandAugment, label smoothing, AdamW, 200 epochs. This is a
recipe for an accelerator: on a 2-core CPU one epoch takes on the order of ten minutes.
On a CPU, ``--config.grad_accum_steps=4`` (the same update as 4 micro-batches of 32) and
``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-individual_dot`` made the train step
of the benchmark's ViT of similar size 48% faster (``benchmarks/vit_throughput.py``).
Result: not yet measured.
"""

from configs.common import trainer_config
from vit.input_pipeline import default_data_config
from vit.model import default_model_config


def get_config():
  config = trainer_config()
  config.task = 'vit.task:ImageClassification'
  config.data = default_data_config()
  config.data.update(source='tfds', name='cifar10')
  config.data.augment.update(crop_padding=4, flip=True, randaugment_layers=2, randaugment_magnitude=9)
  config.model = default_model_config()
  config.model.update(variant='custom', width=256, depth=7, num_heads=4, mlp_dim=512, patch_size=4, pool='gap',
                      posemb='learn1d', dropout=0.0, drop_path=0.1)
  config.label_smoothing = 0.1
  config.batch_size = 128
  config.eval_batch_size = 500
  config.num_epochs = 200.0
  config.log_every_steps = 100
  config.eval_every_steps = 2000
  config.checkpoint_every_steps = 2000
  config.optimizer.update(name='adamw', learning_rate=1e-3, schedule='cosine', warmup_steps=3900,
                          weight_decay=0.05, grad_clip_norm=1.0)
  return config
