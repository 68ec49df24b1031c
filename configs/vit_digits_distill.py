"""A small ViT student on the digits, distilled from the README's ViT (knowledge distillation, DeiT).

Train the teacher with the README command, then the student (three seeds, with and without the
teacher; ``distill.alpha=0.0`` is the student alone, whose loss and gradient are the label loss's):

  python train.py --config configs/vit_digits.py --workdir runs/vit_digits
  python ablate.py --config configs/vit_digits_distill.py --workdir runs/distill \
      --axis distill.alpha=0.0,0.5 --seeds 3

The student is ``vit_digits`` at half the width and depth (32 wide, 2 layers, 2 heads), with the
teacher's recipe otherwise; the teacher (``runs/vit_digits``, its latest checkpoint) sees the same
augmented batches inside the same compiled step. The distillation settings (soft, T=2, alpha=0.5)
are a first choice, not tuned. DeiT's distillation token: ``--config.model.distill_token=True``.
Result: docs/results.md, "Round four: the recipes" (record ``recipes_distill``).
"""

from configs import vit_digits
from configs.common import experiment


def get_config():
  return experiment(
    vit_digits.get_config(),
    model=dict(width=32, depth=2, num_heads=2, mlp_dim=64),
    distill=dict(teacher='runs/vit_digits', temperature=2.0),
  )
