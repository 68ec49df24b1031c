"""ViT on MNIST (28x28 grey, 60,000 train / 10,000 test), from the four IDX files or from tfds.

  python train.py --config configs/vit_mnist.py --workdir runs/vit_mnist
  python evaluate.py --workdir runs/vit_mnist

data/mnist (`python -m pipelines.download mnist`; elsewhere: --config.data.path=DIR) holds
train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and
t10k-labels-idx1-ubyte.gz (gzipped or not). With a
prepared tfds copy instead: --config.data.source=tfds --config.data.name=mnist
[--config.data.data_dir=DIR].

Patches of 7x7 pixels make a 4x4 grid; 5 epochs (2,344 steps of 128).

Runtime: about 6 minutes on a 2-core CPU for the training command. Result, machine and commit:
docs/results.md, "Headline runs".
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
  config.num_epochs = 5.0
  config.label_smoothing = 0.1
  config.log_every_steps = 100
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  config.keep_checkpoints = 3
  config.best_metric = 'accuracy'
  config.best_mode = 'max'
  config.eval_split = 'test'
  config.eval_splits = ()  # splits evaluated side by side, ('val', 'test'); metrics named <split>_<metric>
  config.peak_tflops = 0.0  # one device's dense peak, for the utilisation; 0: the known one
  config.profile_steps = ()  # steps traced with jax.profiler into <workdir>/profile/
  config.wandb = ml_collections.ConfigDict(dict(project='', entity='', name=''))  # project '': off

  config.data = ml_collections.ConfigDict()
  config.data.source = 'idx'
  config.data.name = unset(str)
  config.data.data_dir = unset(str)
  config.data.random_access = unset(bool)
  config.data.streaming = unset(bool)
  config.data.path = 'data/mnist'
  config.data.cache_dir = unset(str)
  config.data.image_size = unset(tuple)
  config.data.mean = unset(tuple)
  config.data.std = unset(tuple)
  config.data.prefetch_batches = 4
  config.data.num_threads = 2

  config.data.augment = ml_collections.ConfigDict()
  config.data.augment.crop_padding = 2
  config.data.augment.crop_pad_mode = 'constant'
  config.data.augment.flip = False
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
  config.model.variant = 'custom'
  config.model.width = 128
  config.model.depth = 4
  config.model.num_heads = 4
  config.model.mlp_dim = 256
  config.model.patch_size = 7
  config.model.pool = 'gap'
  config.model.posemb = 'learn1d'
  config.model.posemb_injection = 'stem'
  config.model.score = 'scaled_dot'
  config.model.dropout = 0.0
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
  config.model.dtype = 'float32'
  config.model.scan_layers = False  # stack the blocks and scan over depth (attention/layers.py)
  config.model.remat = 'none'  # none, full, dots_saveable, dots_with_no_batch_dims_saveable

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = 'adamw'
  config.optimizer.learning_rate = 0.002
  config.optimizer.schedule = 'cosine'
  config.optimizer.warmup_steps = 200
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
