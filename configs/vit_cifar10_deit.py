"""DeiT's training recipe (Touvron et al. 2021) for a DeiT-Ti-shaped ViT on CIFAR-10, from scratch.

  python train.py --config configs/vit_cifar10_deit.py --workdir runs/vit_cifar10_deit
  python evaluate.py --workdir runs/vit_cifar10_deit --checkpoint best --params ema

Reads a prepared tfds copy of `cifar10` (`--config.data.data_dir=DIR`), or an image
folder root/{train,test}/<class>/*.png|jpg (`python -m pipelines.download cifar10` writes data/cifar10):
  --config.data.source=folder --config.data.path=data/cifar10 --config.data.cache_dir=/tmp/cifar_cache

What is DeiT's (its `main.py` defaults): AdamW, learning rate 5e-4 per 512 images (7.5e-4 at 768),
weight decay 0.05, cosine schedule with 5 warm-up epochs, 300 epochs, label smoothing 0.1, drop
path 0.1, no gradient clipping; random resized crop (scale 0.08-1) and flip, RandAugment with 2
layers at magnitude 9, mixup 0.8 and CutMix 1.0 switched per row with probability 0.5, random
erasing 0.25 with per-pixel normal values, 3 repeated augmentations, and an EMA of the parameters
with decay 0.99996 (which this run, 19,500 steps long, never reaches: the warm-up
`min(decay, (1 + t) / (10 + t))` governs it throughout, see trainer/ema.py). DeiT-Ti's shape:
width 192, 12 layers, 3 heads, MLP 768, a class token.
What is not: 4x4 patches on the 32x32 images (an 8x8 grid) rather than 16x16 patches at 224;
batch 768 rather than 1024, so that the 3 repeats divide it; our RandAugment (big_vision's ops) is
not timm's `rand-m9-mstd0.5-inc1` (no magnitude noise); mixup and CutMix are drawn per row, not per
batch (timm's `mode='elem'`, not DeiT's `'batch'`).

What was run: the config passes every check (tests/test_bad_config.py), and 3 steps were trained
on the CIFAR-10 image folder on a shared 2-core CPU to see every part work together, with
  --config.data.source=folder --config.data.path=DIR --config.batch_size=48 --config.total_steps=3
(the evaluation after them was stopped before it ended). The recipe was NOT trained: it is for an
accelerator (on a 2-core CPU one step at batch 768 takes minutes). Result: not measured.
"""

import ml_collections

from configs.common import unset


def get_config():
  config = ml_collections.ConfigDict()
  config.task = 'vit.task:ImageClassification'
  config.seed = 0
  config.batch_size = 768  # divisible by data.augment.repeats
  config.eval_batch_size = 500
  config.grad_accum_steps = 1
  config.total_steps = 0
  config.num_epochs = 300.0
  config.label_smoothing = 0.1
  config.log_every_steps = 100
  config.eval_every_steps = 1950  # every 30 epochs
  config.checkpoint_every_steps = 1950
  config.keep_checkpoints = 3
  config.best_metric = 'accuracy'
  config.best_mode = 'max'
  config.eval_split = 'test'
  config.eval_splits = ()  # splits evaluated side by side, ('val', 'test'); metrics named <split>_<metric>
  config.peak_tflops = 0.0  # one device's dense peak, for the utilisation; 0: the known one
  config.profile_steps = ()  # steps traced with jax.profiler into <workdir>/profile/
  config.wandb = ml_collections.ConfigDict(dict(project='', entity='', name=''))  # project '': off

  config.data = ml_collections.ConfigDict()
  config.data.source = 'tfds'
  config.data.name = 'cifar10'
  config.data.data_dir = unset(str)
  config.data.random_access = unset(bool)
  config.data.streaming = unset(bool)
  config.data.path = unset(str)
  config.data.cache_dir = unset(str)
  config.data.image_size = unset(tuple)
  config.data.mean = unset(tuple)
  config.data.std = unset(tuple)
  config.data.prefetch_batches = 4
  config.data.num_threads = 2

  config.data.augment = ml_collections.ConfigDict()
  config.data.augment.crop_padding = 0
  config.data.augment.crop_pad_mode = 'reflect'
  config.data.augment.flip = True
  config.data.augment.randaugment_layers = 2
  config.data.augment.randaugment_magnitude = 9
  config.data.augment.mixup_alpha = 0.8
  config.data.augment.crop_scale = (0.08, 1.0)
  config.data.augment.crop_ratio = (3 / 4, 4 / 3)
  config.data.augment.cutmix_alpha = 1.0
  config.data.augment.mix_switch_prob = 0.5
  config.data.augment.erase_prob = 0.25
  config.data.augment.repeats = 3

  config.model = ml_collections.ConfigDict()
  config.model.variant = 'custom'
  config.model.width = 192
  config.model.depth = 12
  config.model.num_heads = 3
  config.model.mlp_dim = 768
  config.model.patch_size = 4
  config.model.pool = 'cls'
  config.model.posemb = 'learn1d'
  config.model.posemb_injection = 'stem'
  config.model.score = 'scaled_dot'
  config.model.dropout = 0.0
  config.model.attention_dropout = 0.0
  config.model.drop_path = 0.1
  config.model.head_zero_init = True
  config.model.activation = 'gelu'
  config.model.layernorm_epsilon = 1e-6
  config.model.pre_logits = 0
  # timm's and Hugging Face's architectures (vit/model.py); off here
  config.model.reg_tokens = 0
  config.model.layer_scale = 0.0
  config.model.norm_pre = False
  config.model.fc_norm = False
  config.model.patch_bias = True
  config.model.distill_token = False  # DeiT's distillation token and head (vit.distillation)
  config.model.sincos2d_layout = 'rows_cols'
  config.model.dtype = 'float32'
  config.model.scan_layers = False  # stack the blocks and scan over depth (attention/layers.py)
  config.model.remat = 'none'  # none, full, dots_saveable, dots_with_no_batch_dims_saveable

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = 'adamw'
  config.optimizer.learning_rate = 5e-4 * 768 / 512
  config.optimizer.schedule = 'cosine'
  config.optimizer.warmup_steps = 325  # 5 epochs of 65 steps
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.weight_decay = 0.05
  config.optimizer.weight_decay_regex = 'kernel$'  # the parameters decayed, by path (trainer/optim.py)
  config.optimizer.b1 = 0.9
  config.optimizer.b2 = 0.999
  config.optimizer.eps = 1e-8
  config.optimizer.momentum = 0.9
  config.optimizer.nesterov = False
  config.optimizer.grad_clip_norm = 0.0

  config.ema = ml_collections.ConfigDict()
  config.ema.decay = 0.99996

  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1  # devices on the data axis; -1: all that fsdp and model leave
  config.mesh.fsdp = 1  # devices that shard parameters and optimizer state (trainer/partitioning.py)
  config.mesh.model = 1  # devices that split attention heads and MLP width (tensor parallelism)
  return config
