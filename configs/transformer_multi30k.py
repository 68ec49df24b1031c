"""Transformer on Multi30k German->English image captions (Elliott et al. 2016), sized for a CPU.

  python train.py --config configs/transformer_multi30k.py --workdir runs/transformer_multi30k
  python evaluate.py --workdir runs/transformer_multi30k

Reads the gzipped line-aligned files of data/multi30k (`python -m pipelines.download multi30k`
writes them; set --config.data.path elsewhere). A shared SentencePiece vocabulary of 4,000 pieces
trained on the training split, shared and tied embeddings, a small model (d=256, 3 encoder and 2
decoder layers), 1,800 steps of 64 pairs, beam search (4, alpha 0.6) at the end on test
(test_2016_flickr) where the folder has it, else on val. Result: docs/results.md, "Headline runs".
"""

from configs.common import experiment
from configs.translation_data import MULTI30K


def get_config():
  return experiment(
    'seq2seq.task:Translation',
    **MULTI30K,
    total_steps=1800,
    label_smoothing=0.1,
    log_every_steps=100,
    eval_every_steps=1800,
    checkpoint_every_steps=600,
    model=dict(variant='custom', decoder_layers=2, mlp_features=512, max_length=128, share_embeddings=True),
    optimizer=dict(warmup_steps=300, b2=0.98, eps=1e-9),
  )
