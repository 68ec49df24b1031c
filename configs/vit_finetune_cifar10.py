"""ViT-B/16 pre-trained on ImageNet-21k, fine-tuned on CIFAR-10 at 384x384 (the ViT paper's recipe). For an accelerator.

  python train.py --config configs/vit_finetune_cifar10.py --workdir runs/vit_b16_cifar10 \
    --config.init_from.path=PATH/TO/imagenet21k/ViT-B_16.npz [--config.data.data_dir=DIR]
  python evaluate.py --workdir runs/vit_b16_cifar10

The checkpoint is the published ImageNet-21k ViT-B/16 ``.npz`` (official layout, with a
768-wide ``pre_logits``, dropped here as the paper's fine-tuning does; the head is new and
zero-initialised). Recipe of the paper (appendix B.1.1): SGD with momentum 0.9, no weight
decay, global-norm gradient clipping at 1, batch 512, cosine decay after a linear warmup,
10,000 steps for CIFAR-10, learning rate from {0.001, 0.003, 0.01, 0.03} (0.01 here), at
384x384 (the 14x14 position table is resampled to 24x24). The paper reports 98.95% on
CIFAR-10 for this model (Table 5, ImageNet-21k column; quoted from the paper, not checked
against the PDF here).

Result: not run here (it needs an accelerator; on a 2-core CPU a single step of ViT-B/16 at
384x384 with batch 512 would take minutes).
"""

import ml_collections

from configs.common import unset


def get_config():
  config = ml_collections.ConfigDict()
  config.task = 'vit.task:ImageClassification'
  config.seed = 0
  config.batch_size = 512
  config.eval_batch_size = 500
  config.grad_accum_steps = 1
  config.total_steps = 10_000
  config.num_epochs = 0.0
  config.label_smoothing = 0.0
  config.log_every_steps = 100
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  config.keep_checkpoints = 2
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
  config.data.image_size = (384, 384)
  config.data.mean = (0.5, 0.5, 0.5)  # the checkpoints expect pixels in [-1, 1]
  config.data.std = (0.5, 0.5, 0.5)
  config.data.prefetch_batches = 4
  config.data.num_threads = 8

  config.data.augment = ml_collections.ConfigDict()
  config.data.augment.crop_padding = 0
  config.data.augment.crop_pad_mode = 'reflect'
  config.data.augment.flip = True
  config.data.augment.randaugment_layers = 0
  config.data.augment.randaugment_magnitude = 10
  config.data.augment.mixup_alpha = 0.0
  config.data.augment.crop_scale = unset(tuple)
  config.data.augment.crop_ratio = (3 / 4, 4 / 3)
  config.data.augment.cutmix_alpha = 0.0
  config.data.augment.mix_switch_prob = 0.5
  config.data.augment.erase_prob = 0.0
  config.data.augment.repeats = 1

  config.model = ml_collections.ConfigDict()
  config.model.variant = 'B/16'
  config.model.width = 768
  config.model.depth = 12
  config.model.num_heads = 12
  config.model.mlp_dim = 3072
  config.model.patch_size = 16
  config.model.pool = 'cls'
  config.model.posemb = 'learn1d'
  config.model.posemb_injection = 'stem'
  config.model.score = 'scaled_dot'
  config.model.dropout = 0.0
  config.model.attention_dropout = 0.0
  config.model.drop_path = 0.0
  config.model.head_zero_init = True
  config.model.activation = 'gelu'  # the tanh approximation, as the checkpoint's code
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

  config.init_from = ml_collections.ConfigDict()
  config.init_from.path = 'imagenet21k/ViT-B_16.npz'
  config.init_from.checkpoint = 'latest'
  config.init_from.strict = True
  config.init_from.init_head = False
  config.init_from.resample = 'bilinear'
  config.init_from.arch = ''  # a bare timm .safetensors: its architecture name

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = 'sgd'
  config.optimizer.learning_rate = 0.01
  config.optimizer.schedule = 'cosine'
  config.optimizer.warmup_steps = 500
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.weight_decay = 0.0
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
