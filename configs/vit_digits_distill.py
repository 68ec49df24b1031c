"""A small ViT student on the digits, distilled from the README's ViT (knowledge distillation, DeiT).

Train the teacher with the README command, then the student (three seeds, with and without the
teacher; ``distill.alpha=0.0`` is the student alone, whose loss and gradient are the label loss's):

  python train.py --config configs/vit_digits.py --workdir runs/vit_digits
  python ablate.py --config configs/vit_digits_distill.py --workdir runs/distill \
      --axis distill.alpha=0.0,0.5 --seeds 3

The student is ``vit_digits`` at half the width and depth (32 wide, 2 layers, 2 heads: 18,154
parameters to the teacher's 136,010), with the teacher's recipe otherwise. The teacher (``runs/vit_digits``,
its latest checkpoint) sees the same augmented batches inside the same compiled step. The
distillation settings (soft, T=2, alpha=0.5) are a first choice, not tuned. DeiT's distillation
token: ``--config.model.distill_token=True`` (or ``--axis model.distill_token=False,True``; the
token with alpha 0 is not run, as it would learn nothing). Results, machine and commit:
docs/results.md.
"""

import ml_collections

from configs import vit_digits


def get_config():
  config = vit_digits.get_config()
  config.model.update(width=32, depth=2, num_heads=2, mlp_dim=64)

  config.distill = ml_collections.ConfigDict()
  config.distill.teacher = 'runs/vit_digits'  # a workdir of train.py, or an .npz the ViT reads
  config.distill.checkpoint = 'latest'  # of a workdir teacher: 'latest', 'best' or a step
  config.distill.kind = 'soft'  # soft: T^2 KL at the temperature; hard: the teacher's argmax
  config.distill.temperature = 2.0
  config.distill.alpha = 0.5  # loss = (1 - alpha) * label loss + alpha * distillation loss
  return config
