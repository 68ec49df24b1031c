"""ViT-B/16 on ImageNet-1k from scratch, the recipe of Dosovitskiy et al. (2021), for accelerators.

  python train.py --config configs/vit_b16_imagenet.py --workdir runs/vit_b16 --config.data.data_dir=DIR

DIR holds a prepared tfds `imagenet2012` (build it with `tfds build imagenet2012`
after placing the manually downloaded archives). Recipe: 224x224 images, batch
4096, Adam (b1 0.9, b2 0.999) with decoupled weight decay 0.3, peak learning rate
3e-3, 10k warmup steps then linear decay, 300 epochs, dropout 0.1, gradient
clipping at global norm 1, class-token head. The paper reports 77.9% top-1 for
ViT-B/16 trained on ImageNet alone (Table 5); their augmentation was random
crops and flips, approximated here by resize + pad-and-crop + flip (this input
pipeline has no Inception-style crop). Result: not yet measured.
"""

from configs.common import trainer_config
from vit.input_pipeline import default_data_config
from vit.model import default_model_config


def get_config():
  config = trainer_config()
  config.task = 'vit.task:ImageClassification'
  config.data = default_data_config()
  config.data.update(source='tfds', name='imagenet2012', image_size=(224, 224),
                     mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
  config.data.augment.update(crop_padding=16, flip=True)
  config.model = default_model_config()
  config.model.update(variant='B/16', pool='cls', posemb='learn1d', dropout=0.1, dtype='bfloat16')
  config.label_smoothing = 0.0
  config.batch_size = 4096
  config.eval_batch_size = 1024
  config.num_epochs = 300.0
  config.eval_split = 'validation'
  config.log_every_steps = 100
  config.eval_every_steps = 5000
  config.checkpoint_every_steps = 2000
  config.optimizer.update(name='adamw', learning_rate=3e-3, schedule='linear', warmup_steps=10_000,
                          weight_decay=0.3, grad_clip_norm=1.0)
  return config
