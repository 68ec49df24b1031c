"""Fine-tunes the MNIST ViT of ``vit_mnist_pretrain.py`` on the embedded 8x8 digits shown at 16x16.

  python train.py --config configs/vit_digits_finetune.py --workdir runs/vit_digits_finetune \
    --config.init_from.path=runs/vit_mnist_pretrain.npz
  # the same recipe from scratch, for comparison:
  python train.py --config configs/vit_digits_finetune.py --workdir runs/vit_digits_scratch \
    --config.init_from.path=''

The paper's fine-tuning recipe at small scale: SGD with momentum 0.9, no weight decay,
global-norm clipping at 1, cosine decay after a linear warmup, a zero-initialised head, the
learned position table resampled from the 7x7 grid to the 4x4 one (bilinear; the class-token
row kept apart). Few-shot linear accuracy is computed at every evaluation (``fewshot``).

Runtime: about 75 s on a 2-core CPU for each command. A linear probe is
``'--config.optimizer.frozen=^(?!head\\.)' --config.optimizer.learning_rate=0.1``. Results of the
fine-tuned, scratch and probe runs and the few-shot numbers: docs/results.md, "Pretrained ViTs:
MNIST to digits".
"""

import ml_collections

from configs import vit_mnist_pretrain
from configs.common import unset


def get_config():
  config = vit_mnist_pretrain.get_config()
  config.total_steps = 200
  config.eval_batch_size = 360
  config.log_every_steps = 50
  config.eval_every_steps = 200
  config.checkpoint_every_steps = 200
  config.label_smoothing = 0.0

  config.data.source = 'digits'
  config.data.path = unset(str)
  config.data.image_size = (16, 16)
  config.data.augment.crop_padding = 1

  config.init_from = ml_collections.ConfigDict()
  config.init_from.path = 'runs/vit_mnist_pretrain.npz'
  config.init_from.checkpoint = 'latest'
  config.init_from.strict = True
  config.init_from.init_head = True
  config.init_from.resample = 'bilinear'
  config.init_from.arch = ''  # a bare timm .safetensors: its architecture name

  config.fewshot = ml_collections.ConfigDict()
  config.fewshot.shots = (1, 5, 10, 25)
  config.fewshot.seeds = 5
  config.fewshot.held_out_per_class = 10
  config.fewshot.train_examples = 5000

  config.optimizer.name = 'sgd'
  config.optimizer.learning_rate = 0.03
  config.optimizer.schedule = 'cosine'
  config.optimizer.warmup_steps = 20
  config.optimizer.weight_decay = 0.0
  config.optimizer.momentum = 0.9
  config.optimizer.grad_clip_norm = 1.0

  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1  # devices on the data axis; -1: all that fsdp and model leave
  config.mesh.fsdp = 1  # devices that shard parameters and optimizer state (trainer/partitioning.py)
  config.mesh.model = 1  # devices that split attention heads and MLP width (tensor parallelism)
  # Parameter groups by path (trainer/optim.py): '^(?!head\.)' freezes all but the head (a linear
  # probe); layer_decay < 1 gives lower layers smaller learning rates.
  config.optimizer.frozen = ''
  config.optimizer.layer_decay = 1.0
  config.optimizer.layer_decay_stem = r'^(patch_embedding|class_token|encoder\.positional)'
  config.optimizer.layer_regex = r'blocks\.(\d+)\.'
  return config
