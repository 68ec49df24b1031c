"""Transformer base on WMT14 English->German: the recipe of Vaswani et al. (2017), for accelerators.

  # once, on a machine with internet (this project never downloads):
  tfds build wmt14_translate/de-en --data_dir ~/tensorflow_datasets
  python train.py --config configs/transformer_wmt14_ende_base.py --workdir runs/wmt14_ende_base
  python evaluate.py --workdir runs/wmt14_ende_base --split test --average_last 5

The paper's recipe: base model (d=512, 6+6 layers, 8 heads, ff 2048), a shared BPE vocabulary
of about 37k tokens with shared and tied embeddings, Adam (b1 0.9, b2 0.98, eps 1e-9), the
rsqrt schedule with 4000 warmup steps peaking at 512^-0.5 * 4000^-0.5, dropout 0.1, label
smoothing 0.1, 100k steps, beam 4 with length penalty 0.6, the last 5 checkpoints averaged.
Differences: pre-LayerNorm blocks; batches of 1024 sentences (about 25k target tokens on
average, as in the paper, but counted in sentences) as 4 accumulated micro-batches; pairs
over 128 tokens dropped; bfloat16 compute; sacreBLEU (the paper's 27.3 is tokenised BLEU,
usually about 1 point above sacreBLEU). Validation is newstest2013, test newstest2014.

Runtime and result: not yet measured.
"""

from configs.common import trainer_config
from seq2seq.model import default_model_config
from seq2seq.task import default_data_config, default_decode_config


def get_config():
  config = trainer_config()
  config.task = 'seq2seq.task:Translation'
  config.data = default_data_config()
  config.data.update(source='tfds', name='wmt14_translate/de-en', src_lang='en', tgt_lang='de',
                     max_source_length=128, max_target_length=128)
  config.data.tokenizer.update(kind='sentencepiece', model_type='bpe', shared=True, vocab_size=37000,
                               max_training_sentences=2_000_000)
  config.model = default_model_config()
  config.model.update(variant='base', share_embeddings=True, tie_output=True, posemb='sincos1d', max_length=256,
                      dropout=0.1, attention_dropout=0.0, dtype='bfloat16')
  config.decode = default_decode_config()
  config.decode.update(beam_size=4, alpha=0.6, max_extra_length=50)
  config.label_smoothing = 0.1
  config.batch_size = 1024
  config.grad_accum_steps = 4
  config.eval_batch_size = 256
  config.total_steps = 100_000
  config.log_every_steps = 100
  config.eval_every_steps = 10_000
  config.checkpoint_every_steps = 2_000
  config.keep_checkpoints = 5
  config.best_metric = 'bleu'
  config.eval_split = 'validation'
  config.optimizer.update(name='adamw', learning_rate=512 ** -0.5 * 4000 ** -0.5, schedule='rsqrt',
                          warmup_steps=4000, weight_decay=0.0, b1=0.9, b2=0.98, eps=1e-9, grad_clip_norm=0.0)
  return config
