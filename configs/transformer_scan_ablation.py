"""The positional-encoding ablation on SCAN, sized for a 2-core CPU (Vaswani et al. Table 3, row (E)).

  python ablate.py --config configs/transformer_scan_ablation.py --workdir runs/ablation_scan_simple \
      --axis model.posemb=none,learn1d,sincos1d,relative,rope --axis data.split=simple --seeds 3
  python ablate.py --config configs/transformer_scan_ablation.py --workdir runs/ablation_scan_length \
      --axis model.posemb=none,learn1d,sincos1d,relative,rope --axis data.split=length --seeds 3

This is transformer_scan with 1,200 steps instead of 4,800 (it trains what ``--config
configs/transformer_scan.py --config.total_steps=1200`` trains), evaluated with greedy decoding on
each split's test set. The length split trains on action sequences of at most 22 actions and tests
on longer ones (24 to 48). The table and its comparison with the papers: docs/ablations.md, "The
Transformer on SCAN" (records transformer_scan_posemb_simple and transformer_scan_posemb_length);
machine and commit: docs/results.md, "Ablations".
"""

from configs import transformer_scan
from configs.common import experiment


def get_config():
  return experiment(
    transformer_scan.get_config(), total_steps=1200, eval_every_steps=1200, checkpoint_every_steps=600
  )
