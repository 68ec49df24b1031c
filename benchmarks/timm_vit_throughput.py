"""The PyTorch baseline of ``benchmarks.vit_throughput``: timm's VisionTransformer of the same shape.

  python -m venv /tmp/torch-env && /tmp/torch-env/bin/pip install -r requirements-peer.txt
  /tmp/torch-env/bin/python benchmarks/timm_vit_throughput.py

(timm imports torchvision, whose PyPI build beside a CPU torch needs ``torch_libraries.py``, beside
this file. The results pages name the versions of each row.)

Not part of the project's requirements (it needs PyTorch and timm, nothing of ours): it
exists so that our throughput can be compared with the library most ViT users train with,
on the same machine. Same model (width 192, depth 6, 3 heads, MLP 768, patch 4, class
token, 10 classes), same batch of 128 random 32x32x3 images, AdamW, float32; the step is
forward, cross-entropy, backward and the optimizer update, timed after 3 warm-up steps.
"""

import argparse
import json
import time

import torch
import torch_libraries  # beside this file, which runs as a script


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--batch_size', type=int, default=128)
  parser.add_argument('--steps', type=int, default=20)
  args = parser.parse_args()

  timm = torch_libraries.import_timm()
  torch.manual_seed(0)
  model = timm.models.vision_transformer.VisionTransformer(
    img_size=32, patch_size=4, embed_dim=192, depth=6, num_heads=3, mlp_ratio=4, num_classes=10
  )
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
  images = torch.randn(args.batch_size, 3, 32, 32)
  labels = torch.randint(0, 10, (args.batch_size,))

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()

  for _ in range(3):
    step()
  start = time.perf_counter()
  for _ in range(args.steps):
    step()
  seconds = (time.perf_counter() - start) / args.steps
  num_params = sum(p.numel() for p in model.parameters())
  print(
    f'timm {timm.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads, '
    f'{num_params / 1e6:.2f}M parameters, float32, batch {args.batch_size}'
  )
  print(f'train step: {seconds * 1e3:.1f} ms/step, {args.batch_size / seconds:.1f} images/s')
  numbers = {
    'images_per_second': args.batch_size / seconds,
    'ms_per_step': seconds * 1e3,
    'parameters': num_params,
  }
  print(json.dumps(numbers))  # the numbers for records.record


if __name__ == '__main__':
  main()
