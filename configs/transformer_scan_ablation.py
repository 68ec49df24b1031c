"""The positional-encoding ablation on SCAN, sized for a 2-core CPU (Vaswani et al. Table 3, row (E)).

  python ablate.py --config configs/transformer_scan_ablation.py --workdir runs/ablation_scan \
      --axis model.posemb=none,learn1d,sincos1d,relative,rope --axis data.split=simple,length

This is transformer_scan with 1,200 steps instead of 2,400 (it trains what ``--config
configs/transformer_scan.py --config.total_steps=1200`` trains; evaluation and checkpoints
come every 1,200 and 600 steps instead of 2,400 and 800), evaluated with greedy decoding on
each split's test set. The length split trains on action sequences of at most 22 actions and
tests on longer ones (24 to 48).

Measured on a 2-core AMD EPYC CPU: 55 minutes for the 10 runs (other jobs shared the CPU
for about a quarter of that time). Test exact match (%), simple / length split: none
11.1 / 0.9, learn1d 79.8 / 0.0, sincos1d 95.6 / 0.9, relative 89.2 / 4.6, rope 97.1 / 10.1
(one seed; the README compares them with the papers).
"""

from configs import transformer_scan


def get_config():
  config = transformer_scan.get_config()
  config.total_steps = 1200
  config.eval_every_steps = 1200
  config.checkpoint_every_steps = 600
  return config
