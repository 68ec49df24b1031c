"""Fine-tunes the MNIST ViT of ``vit_mnist_pretrain.py`` on the embedded 8x8 digits shown at 16x16.

  python train.py --config configs/vit_digits_finetune.py --workdir runs/vit_digits_finetune \
    --config.init_from.path=runs/vit_mnist_pretrain.npz
  # the same recipe from scratch, for comparison:
  python train.py --config configs/vit_digits_finetune.py --workdir runs/vit_digits_scratch \
    --config.init_from.path=''

The paper's fine-tuning recipe at small scale: SGD with momentum 0.9, no weight decay, global-norm
clipping at 1, cosine decay after a linear warmup, a zero-initialised head, the learned position
table resampled from the 7x7 grid to the 4x4 one (bilinear; the class-token row kept apart).
Few-shot linear accuracy is computed at every evaluation (``fewshot``). A linear probe is
``'--config.optimizer.frozen=^(?!head\\.)' --config.optimizer.learning_rate=0.1``; layer_decay < 1
gives lower layers smaller learning rates. Results of the fine-tuned, scratch and probe runs:
docs/results.md, "Pretrained ViTs: MNIST to digits".
"""

from configs import vit_mnist_pretrain
from configs.common import experiment, unset


def get_config():
  return experiment(
    vit_mnist_pretrain.get_config(),
    total_steps=200,
    eval_batch_size=360,
    log_every_steps=50,
    eval_every_steps=200,
    checkpoint_every_steps=200,
    label_smoothing=0.0,
    data=dict(source='digits', path=unset(str), image_size=(16, 16), augment=dict(crop_padding=1)),
    init_from=dict(path='runs/vit_mnist_pretrain.npz'),
    fewshot=dict(shots=(1, 5, 10, 25), seeds=5),
    optimizer=dict(
      name='sgd',
      learning_rate=0.03,
      warmup_steps=20,
      weight_decay=0.0,
      layer_decay_stem=r'^(patch_embedding|class_token|encoder\.positional)',
    ),
  )
