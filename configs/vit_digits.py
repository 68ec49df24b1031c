"""ViT on scikit-learn's 8x8 handwritten digits: the embedded default, no files needed.

  python train.py --config configs/vit_digits.py --workdir runs/vit_digits
  python evaluate.py --workdir runs/vit_digits

Patches of 2x2 pixels make a 4x4 grid of 16 tokens, so position carries real
information (the positional-embedding ablation in ablate.py uses this config).

1,684 steps of 128 plus start-up and 4 evaluations. Runtime: 1 to 2 minutes on a 2-core CPU for
the training command. Result, machine and commit: docs/results.md, "Headline runs". Dropout is
off: on a CPU, drawing its random masks took about 40% of each step of this small model, and
without it the same recipe ends higher (docs/results.md, "Mixed precision", has the run with
dropout).
"""

import ml_collections

from configs.common import unset


def get_config():
  config = ml_collections.ConfigDict()
  config.task = 'vit.task:ImageClassification'
  config.seed = 0
  config.batch_size = 128
  config.eval_batch_size = 360
  config.grad_accum_steps = 1
  config.total_steps = 0
  config.num_epochs = 150.0
  config.label_smoothing = 0.1
  config.log_every_steps = 100
  config.eval_every_steps = 500
  config.checkpoint_every_steps = 500
  config.keep_checkpoints = 3
  config.best_metric = 'accuracy'
  config.best_mode = 'max'
  config.eval_split = 'test'
  config.eval_splits = ()  # splits evaluated side by side, ('val', 'test'); metrics named <split>_<metric>
  config.peak_tflops = 0.0  # one device's dense peak, for the utilisation; 0: the known one
  config.profile_steps = ()  # steps traced with jax.profiler into <workdir>/profile/
  config.wandb = ml_collections.ConfigDict(dict(project='', entity='', name=''))  # project '': off

  config.data = ml_collections.ConfigDict()
  config.data.source = 'digits'
  config.data.name = unset(str)
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
  config.data.augment.crop_padding = 1  # shifts of up to one pixel
  config.data.augment.crop_pad_mode = 'constant'
  config.data.augment.flip = False
  config.data.augment.randaugment_layers = 0
  config.data.augment.randaugment_magnitude = 10
  config.data.augment.mixup_alpha = 0.0
  config.data.augment.crop_scale = unset(tuple)
  config.data.augment.crop_ratio = (3 / 4, 4 / 3)
  config.data.augment.cutmix_alpha = 0.0  # CutMix; with mixup too, mix_switch_prob picks per row
  config.data.augment.mix_switch_prob = 0.5
  config.data.augment.erase_prob = 0.0  # random erasing (timm's default when on: 0.25)
  config.data.augment.repeats = 1  # repeated augmentation (DeiT: 3)

  config.model = ml_collections.ConfigDict()
  config.model.variant = 'custom'
  config.model.width = 64
  config.model.depth = 4
  config.model.num_heads = 4
  config.model.mlp_dim = 128
  config.model.patch_size = 2
  config.model.pool = 'gap'
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
  config.model.sincos2d_layout = 'rows_cols'
  # timm's and Hugging Face's architectures (vit/model.py); off here
  config.model.reg_tokens = 0
  config.model.layer_scale = 0.0
  config.model.norm_pre = False
  config.model.fc_norm = False
  config.model.patch_bias = True
  config.model.distill_token = False  # DeiT's distillation token and head (vit.distillation)
  config.model.dtype = 'float32'
  config.model.scan_layers = False  # stack the blocks and scan over depth (attention/layers.py)
  config.model.remat = 'none'  # none, full, dots_saveable, dots_with_no_batch_dims_saveable

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = 'adamw'
  config.optimizer.learning_rate = 0.003
  config.optimizer.schedule = 'cosine'
  config.optimizer.warmup_steps = 100
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
