"""Transformer base on WMT14 English->German: the recipe of Vaswani et al. (2017), for accelerators.

  tfds build wmt14_translate/de-en --data_dir ~/tensorflow_datasets
  python train.py --config configs/transformer_wmt14_ende_base.py --workdir runs/wmt14_ende_base
  python evaluate.py --workdir runs/wmt14_ende_base --split test --average_last 5

The paper's recipe: the base model (ReLU, post-LayerNorm), a shared BPE vocabulary of 37k tokens,
shared and tied embeddings, Adam, the rsqrt schedule peaking at 512^-0.5 * 4000^-0.5, dropout and
label smoothing 0.1, 100k steps, beam 4, alpha 0.6, the last 5 checkpoints averaged. Not the
paper's: batches of 1024 sentences as 4 micro-batches, pairs over 128 tokens dropped, bfloat16,
sacreBLEU. Validation is newstest2013, test newstest2014 (build the data once, on a machine with
internet: this project never downloads). Result: not yet measured.
"""

from configs.common import experiment


def get_config():
  peak = 512**-0.5 * 4000**-0.5  # d_model ** -0.5 * warmup ** -0.5
  return experiment(
    'seq2seq.task:Translation',
    batch_size=1024,
    grad_accum_steps=4,
    total_steps=100_000,
    label_smoothing=0.1,
    log_every_steps=100,
    eval_every_steps=10000,
    checkpoint_every_steps=2000,
    keep_checkpoints=5,
    best_metric='bleu',
    eval_split='validation',
    data=dict(
      source='tfds',
      name='wmt14_translate/de-en',
      src_lang='en',
      tgt_lang='de',
      max_source_length=128,
      max_target_length=128,
      tokenizer=dict(model_type='bpe', vocab_size=37_000, max_training_sentences=2_000_000),
    ),
    model=dict(
      variant='base', share_embeddings=True, activation='relu', norm_placement='post', dtype='bfloat16'
    ),
    optimizer=dict(
      learning_rate=peak, schedule='rsqrt', warmup_steps=4000, b2=0.98, eps=1e-9, grad_clip_norm=0.0
    ),
  )
