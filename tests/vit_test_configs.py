"""A tiny ViT config for tests: digits, one layer, a few steps (seconds on a CPU)."""

from configs import vit_digits
from tests.config_overrides import override, short_run


def tiny_vit_config(**overrides):
  config = vit_digits.get_config()
  config.model.update(width=16, depth=1, num_heads=2, mlp_dim=32, patch_size=4, pool='cls', dropout=0.1)
  return override(short_run(config, steps=8, eval_every=4), overrides)
