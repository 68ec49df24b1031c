"""How far apart the position-table resampling methods are on real resolution changes.

  python -m benchmarks.posemb_resample

Two changes a user of pretrained weights makes: a ViT-B/16 table fine-tuned from 224 to 384 pixels
(a 14x14 grid to 24x24, growing) and DINOv2's 518-pixel table (37x37, ViT-B/14) used at 224 pixels
(16x16, shrinking); each table width 768 with a class-token row. Two deterministic tables each:
``normal`` (seeded, N(0, 0.02^2) per value, the usual initialisation) and ``sincos`` (the 2-D
sine-cosine table of the old grid, smooth as trained tables tend to be). For each, the largest
absolute difference over the table between PyTorch's two bicubic resizes (``torch_bicubic``, what
transformers computes; ``torch_bicubic_aa``, what timm computes) and the ``jax.image.resize``
methods (``bicubic``; ``bilinear``, the ``.npz`` default), and the table's own largest absolute
value, for scale. The last line is the numbers as JSON, for ``records.record``.
"""

import json

import jax.numpy as jnp
import numpy as np

from attention.positional import sincos_2d_table
from attention.resample import resample_grid_table

CHANGES = {'vit_b16_224_to_384': ((14, 14), (24, 24)), 'dinov2_b14_518_to_224': ((37, 37), (16, 16))}
WIDTH = 768
PAIRS = (
  ('torch_bicubic', 'bicubic'),
  ('torch_bicubic_aa', 'bicubic'),
  ('torch_bicubic', 'bilinear'),
  ('torch_bicubic_aa', 'bilinear'),
)


def tables(grid: tuple[int, int]) -> dict[str, np.ndarray]:
  """The two tables of a grid, class-token row first."""
  rows = 1 + grid[0] * grid[1]
  normal = np.random.default_rng(0).normal(0.0, 0.02, (rows, WIDTH)).astype(np.float32)
  sincos = np.concatenate([np.zeros((1, WIDTH)), sincos_2d_table(*grid, WIDTH)]).astype(np.float32)
  return {'normal': normal, 'sincos': sincos}


def main() -> None:
  numbers = {}
  for change, (old, new) in CHANGES.items():
    for kind, table in tables(old).items():
      resized = {
        method: np.asarray(resample_grid_table(jnp.asarray(table), old, new, 1, method))
        for method in {name for pair in PAIRS for name in pair}
      }
      prefix = f'{change}.{kind}'
      numbers[f'{prefix}.table_max_abs'] = float(np.abs(table).max())
      for a, b in PAIRS:
        numbers[f'{prefix}.{a}_vs_{b}'] = float(np.abs(resized[a] - resized[b]).max())
      line = ', '.join(f'{a} vs {b} {numbers[f"{prefix}.{a}_vs_{b}"]:.3g}' for a, b in PAIRS)
      print(f'{change} ({old[0]}x{old[1]} -> {new[0]}x{new[1]}), {kind} table: max abs difference {line}')
  print(json.dumps(numbers))


if __name__ == '__main__':
  main()
