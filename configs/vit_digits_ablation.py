"""The positional-embedding ablation on digits, sized for a 2-core CPU (ViT Table 8's rows).

  python ablate.py --config configs/vit_digits_ablation.py --workdir runs/table8 \
      --axis model.posemb=none,learn1d,learn2d,sincos2d,relative \
      --axis model.posemb_injection=stem,every_layer,every_layer_shared --seeds 3

This is vit_digits with batch 64 for 50 epochs and dropout 0.1: the same as ``--config
configs/vit_digits.py --config.batch_size=64 --config.num_epochs=50 --config.model.dropout=0.1``,
plus 5-shot linear accuracy of the pre-logits at every evaluation (``fewshot``: Table 8's own
metric, the second table ablate.py prints; training is unchanged by it). Both tables and their
comparison with the paper: docs/ablations.md, "The ViT paper's Table 8 on the digits"; machine and
commit: docs/results.md, "Ablations".
"""

from configs import vit_digits
from configs.common import experiment


def get_config():
  return experiment(
    vit_digits.get_config(),
    batch_size=64,
    num_epochs=50.0,
    model=dict(dropout=0.1),
    fewshot=dict(shots=(5,), seeds=3),
  )
