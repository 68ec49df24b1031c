"""ViT-B/16 on ImageNet-1k from scratch, the recipe of Dosovitskiy et al. (2021), for accelerators.

  python train.py --config configs/vit_b16_imagenet.py --workdir runs/vit_b16 --config.data.data_dir=DIR

DIR holds a prepared tfds `imagenet2012` (build it with `tfds build imagenet2012
--file_format array_record` after placing the manually downloaded archives, so that it is
read with random access and resumes exactly; see docs/data.md). Recipe: 224x224 images, batch
4096, Adam (b1 0.9, b2 0.999) with decoupled weight decay 0.3, peak learning rate
3e-3, 10k warmup steps then linear decay, 300 epochs, dropout 0.1, gradient
clipping at global norm 1, class-token head. The paper reports 77.9% top-1 for
ViT-B/16 trained on ImageNet alone (Table 5); their augmentation was random
crops and flips: the Inception crop (area 8-100%, ratio 3/4-4/3) and a horizontal flip, as
here. Result: not yet measured.
"""

import ml_collections

from configs.common import unset


def get_config():
  config = ml_collections.ConfigDict()
  config.task = 'vit.task:ImageClassification'
  config.seed = 0
  config.batch_size = 4096
  config.eval_batch_size = 1024
  config.grad_accum_steps = 1
  config.total_steps = 0
  config.num_epochs = 300.0
  config.label_smoothing = 0.0
  config.log_every_steps = 100
  config.eval_every_steps = 5000
  config.checkpoint_every_steps = 2000
  config.keep_checkpoints = 3
  config.best_metric = 'accuracy'
  config.best_mode = 'max'
  config.eval_split = 'validation'
  config.eval_splits = ()  # splits evaluated side by side, ('val', 'test'); metrics named <split>_<metric>
  config.peak_tflops = 0.0  # one device's dense peak, for the utilisation; 0: the known one
  config.profile_steps = ()  # steps traced with jax.profiler into <workdir>/profile/
  config.wandb = ml_collections.ConfigDict(dict(project='', entity='', name=''))  # project '': off

  config.data = ml_collections.ConfigDict()
  config.data.source = 'tfds'
  config.data.name = 'imagenet2012'
  config.data.data_dir = unset(str)
  config.data.random_access = unset(bool)
  config.data.streaming = unset(bool)
  config.data.path = unset(str)
  config.data.cache_dir = unset(str)
  config.data.image_size = (224, 224)
  config.data.mean = (0.5, 0.5, 0.5)
  config.data.std = (0.5, 0.5, 0.5)
  config.data.prefetch_batches = 4
  config.data.num_threads = 2

  config.data.augment = ml_collections.ConfigDict()
  config.data.augment.crop_padding = 0
  config.data.augment.crop_pad_mode = 'reflect'
  config.data.augment.flip = True
  config.data.augment.randaugment_layers = 0
  config.data.augment.randaugment_magnitude = 10
  config.data.augment.mixup_alpha = 0.0
  config.data.augment.crop_scale = (0.08, 1.0)  # the Inception crop
  config.data.augment.crop_ratio = (3 / 4, 4 / 3)
  config.data.augment.cutmix_alpha = 0.0
  config.data.augment.mix_switch_prob = 0.5
  config.data.augment.erase_prob = 0.0
  config.data.augment.repeats = 1

  config.model = ml_collections.ConfigDict()
  config.model.variant = (
    'B/16'  # width 768, depth 12, 12 heads, MLP 3072, patches of 16; the next five are unused
  )
  config.model.width = 192
  config.model.depth = 6
  config.model.num_heads = 3
  config.model.mlp_dim = 384
  config.model.patch_size = 4
  config.model.pool = 'cls'
  config.model.posemb = 'learn1d'
  config.model.posemb_injection = 'stem'
  config.model.score = 'scaled_dot'
  config.model.dropout = 0.1
  config.model.attention_dropout = 0.0
  config.model.drop_path = 0.0
  config.model.head_zero_init = True
  config.model.activation = 'gelu'
  config.model.layernorm_epsilon = 1e-6
  config.model.pre_logits = 0
  config.model.sincos2d_layout = 'rows_cols'
  # timm's and Hugging Face's architectures (vit/model.py); off here
  config.model.reg_tokens = 0
  config.model.layer_scale = 0.0
  config.model.norm_pre = False
  config.model.fc_norm = False
  config.model.patch_bias = True
  config.model.distill_token = False  # DeiT's distillation token and head (vit.distillation)
  config.model.dtype = 'bfloat16'
  config.model.scan_layers = False  # stack the blocks and scan over depth (attention/layers.py)
  config.model.remat = 'none'  # none, full, dots_saveable, dots_with_no_batch_dims_saveable

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = 'adamw'
  config.optimizer.learning_rate = 0.003
  config.optimizer.schedule = 'linear'
  config.optimizer.warmup_steps = 10_000
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.weight_decay = 0.3
  config.optimizer.weight_decay_regex = 'kernel$'  # the parameters decayed, by path (trainer/optim.py)
  config.optimizer.b1 = 0.9
  config.optimizer.b2 = 0.999
  config.optimizer.eps = 1e-8
  config.optimizer.momentum = 0.9
  config.optimizer.nesterov = False
  config.optimizer.grad_clip_norm = 1.0

  config.ema = ml_collections.ConfigDict()
  config.ema.decay = 0.0  # a moving average of the parameters, evaluated beside them (trainer/ema.py)

  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1  # devices on the data axis; -1: all that fsdp and model leave
  config.mesh.fsdp = 1  # devices that shard parameters and optimizer state (trainer/partitioning.py)
  config.mesh.model = 1  # devices that split attention heads and MLP width (tensor parallelism)
  return config
