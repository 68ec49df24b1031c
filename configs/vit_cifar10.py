"""ViT on CIFAR-10 with a small-data recipe: 4x4 patches (an 8x8 grid), 7 layers, strong augmentation.

  python train.py --config configs/vit_cifar10.py --workdir runs/vit_cifar10
  python evaluate.py --workdir runs/vit_cifar10

Reads the image folder data/cifar10/{train,test}/<class>/*.png that `python -m pipelines.download
cifar10` writes (elsewhere: --config.data.path=DIR; --config.data.cache_dir=DIR keeps the decoded
images between runs), or a prepared tfds copy:
  --config.data.source=tfds --config.data.name=cifar10 [--config.data.data_dir=DIR]

The shape follows the small ViTs that train well from scratch on CIFAR (e.g. the
"ViT-Lite-7/4" of Hassani et al. 2021): width 256, 7 layers, 4 heads, MLP 512,
random crop + flip + RandAugment, label smoothing, AdamW, 200 epochs. This is a
recipe for an accelerator: on a 2-core CPU one epoch takes on the order of ten minutes.
On a CPU, ``--config.grad_accum_steps=4`` (the same update as 4 micro-batches of 32) and
``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-individual_dot`` made the train step
of the benchmark's ViT of similar size about a third faster (``benchmarks/vit_throughput.py``;
docs/performance.md).
Result: not yet measured.
"""

import ml_collections

from configs.common import unset


def get_config():
  config = ml_collections.ConfigDict()
  config.task = 'vit.task:ImageClassification'
  config.seed = 0
  config.batch_size = 128
  config.eval_batch_size = 500
  config.grad_accum_steps = 1
  config.total_steps = 0
  config.num_epochs = 200.0
  config.label_smoothing = 0.1
  config.log_every_steps = 100
  config.eval_every_steps = 2000
  config.checkpoint_every_steps = 2000
  config.keep_checkpoints = 3
  config.best_metric = 'accuracy'
  config.best_mode = 'max'
  config.eval_split = 'test'
  config.eval_splits = ()  # splits evaluated side by side, ('val', 'test'); metrics named <split>_<metric>
  config.peak_tflops = 0.0  # one device's dense peak, for the utilisation; 0: the known one
  config.profile_steps = ()  # steps traced with jax.profiler into <workdir>/profile/
  config.wandb = ml_collections.ConfigDict(dict(project='', entity='', name=''))  # project '': off

  config.data = ml_collections.ConfigDict()
  config.data.source = 'folder'
  config.data.name = unset(str)
  config.data.data_dir = unset(str)
  config.data.random_access = unset(bool)
  config.data.streaming = unset(bool)
  config.data.path = 'data/cifar10'  # python -m pipelines.download cifar10
  config.data.cache_dir = unset(str)
  config.data.image_size = unset(tuple)
  config.data.mean = unset(tuple)
  config.data.std = unset(tuple)
  config.data.prefetch_batches = 4
  config.data.num_threads = 2

  config.data.augment = ml_collections.ConfigDict()
  config.data.augment.crop_padding = 4
  config.data.augment.crop_pad_mode = 'reflect'
  config.data.augment.flip = True
  config.data.augment.randaugment_layers = 2
  config.data.augment.randaugment_magnitude = 9
  config.data.augment.mixup_alpha = 0.0
  config.data.augment.crop_scale = unset(tuple)
  config.data.augment.crop_ratio = (3 / 4, 4 / 3)
  config.data.augment.cutmix_alpha = 0.0
  config.data.augment.mix_switch_prob = 0.5
  config.data.augment.erase_prob = 0.0
  config.data.augment.repeats = 1

  config.model = ml_collections.ConfigDict()
  config.model.variant = 'custom'
  config.model.width = 256
  config.model.depth = 7
  config.model.num_heads = 4
  config.model.mlp_dim = 512
  config.model.patch_size = 4
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
  config.optimizer.learning_rate = 0.001
  config.optimizer.schedule = 'cosine'
  config.optimizer.warmup_steps = 3900
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.weight_decay = 0.05
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
