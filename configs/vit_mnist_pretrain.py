"""A small ViT pre-trained on MNIST, to be exported and fine-tuned elsewhere (the CPU fine-tuning demo).

  python train.py --config configs/vit_mnist_pretrain.py --workdir runs/vit_mnist_pretrain
  python -m vit.weights.export_npz --workdir runs/vit_mnist_pretrain --out runs/vit_mnist_pretrain.npz
  python -m vit.fewshot --workdir runs/vit_mnist_pretrain --source digits --shots 1,5,10,25

Then ``configs/vit_digits_finetune.py`` fine-tunes the exported file on the embedded digits at
another resolution. 4x4 patches of the 28x28 images make a 7x7 grid; a class token pools, so the
exported file has the official layout's class-token position row. Results of the whole
demonstration: docs/results.md, "Pretrained ViTs: MNIST to digits".
"""

from configs.common import experiment


def get_config():
  return experiment(
    'vit.task:ImageClassification',
    eval_batch_size=500,
    total_steps=1000,
    label_smoothing=0.1,
    log_every_steps=100,
    eval_every_steps=1000,
    checkpoint_every_steps=1000,
    keep_checkpoints=1,
    data=dict(source='idx', path='data/mnist', augment=dict(crop_padding=2, crop_pad_mode='constant')),
    model=dict(width=64, depth=4, num_heads=4, mlp_dim=128),
    optimizer=dict(learning_rate=0.002, warmup_steps=100, weight_decay=0.05),
  )
