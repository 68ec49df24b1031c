"""A tiny ViT config for tests: digits, one layer, a few steps (seconds on a CPU)."""

from configs import vit_digits
from tests.config_overrides import override


def tiny_vit_config(**overrides):
  config = vit_digits.get_config()
  config.model.update(width=16, depth=1, num_heads=2, mlp_dim=32, patch_size=4, pool='cls', dropout=0.1)
  config.batch_size = 32
  config.eval_batch_size = 64
  config.num_epochs = 0.0
  config.total_steps = 8
  config.log_every_steps = 1
  config.eval_every_steps = 4
  config.checkpoint_every_steps = 2
  config.optimizer.warmup_steps = 2
  return override(config, overrides)
