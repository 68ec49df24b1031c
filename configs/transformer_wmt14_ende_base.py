"""Transformer base on WMT14 English->German: the recipe of Vaswani et al. (2017), for accelerators.

  # once, on a machine with internet (this project never downloads):
  tfds build wmt14_translate/de-en --data_dir ~/tensorflow_datasets
  python train.py --config configs/transformer_wmt14_ende_base.py --workdir runs/wmt14_ende_base
  python evaluate.py --workdir runs/wmt14_ende_base --split test --average_last 5

The paper's recipe: base model (d=512, 6+6 layers, 8 heads, ff 2048, ReLU, post-LayerNorm), a shared BPE vocabulary
of about 37k tokens with shared and tied embeddings, Adam (b1 0.9, b2 0.98, eps 1e-9), the
rsqrt schedule with 4000 warmup steps peaking at 512^-0.5 * 4000^-0.5, dropout 0.1, label
smoothing 0.1, 100k steps, beam 4 with length penalty 0.6, the last 5 checkpoints averaged.
Differences: batches of 1024 sentences (about 25k target tokens on
average, as in the paper, but counted in sentences) as 4 accumulated micro-batches; pairs
over 128 tokens dropped; bfloat16 compute; sacreBLEU (the paper's 27.3 is tokenised BLEU,
usually about 1 point above sacreBLEU). Validation is newstest2013, test newstest2014.

Runtime and result: not yet measured.
"""

import ml_collections

from configs.common import unset


def get_config():
  config = ml_collections.ConfigDict()
  config.task = 'seq2seq.task:Translation'
  config.seed = 0
  config.batch_size = 1024
  config.eval_batch_size = 256
  config.grad_accum_steps = 4
  config.total_steps = 100_000
  config.num_epochs = 0.0
  config.label_smoothing = 0.1
  config.log_every_steps = 100
  config.eval_every_steps = 10_000
  config.checkpoint_every_steps = 2000
  config.keep_checkpoints = 5
  config.best_metric = 'bleu'
  config.best_mode = 'max'
  config.eval_split = 'validation'
  config.eval_splits = ()  # splits evaluated side by side, ('val', 'test'); metrics named <split>_<metric>
  config.peak_tflops = 0.0  # one device's dense peak, for the utilisation; 0: the known one
  config.profile_steps = ()  # steps traced with jax.profiler into <workdir>/profile/
  config.wandb = ml_collections.ConfigDict(dict(project='', entity='', name=''))  # project '': off

  config.data = ml_collections.ConfigDict()
  config.data.source = 'tfds'
  config.data.split = 'simple'  # SCAN's split; unused here
  config.data.name = 'wmt14_translate/de-en'
  config.data.data_dir = unset(str)
  config.data.path = unset(str)
  config.data.src_lang = 'en'
  config.data.tgt_lang = 'de'
  config.data.train_split = 'train'
  config.data.max_source_length = 128
  config.data.max_target_length = 128
  config.data.pad_to_multiple = 8
  config.data.max_eval_examples = 0
  config.data.packing = False  # several pairs per row (seq2seq/packing.py)

  config.data.tokenizer = ml_collections.ConfigDict()
  config.data.tokenizer.kind = 'sentencepiece'
  config.data.tokenizer.shared = True
  config.data.tokenizer.model_type = 'bpe'
  config.data.tokenizer.vocab_size = 37_000
  config.data.tokenizer.character_coverage = 1.0
  config.data.tokenizer.max_training_sentences = 2_000_000
  config.data.tokenizer.model_file = unset(str)
  config.data.tokenizer.target_model_file = unset(str)

  config.model = ml_collections.ConfigDict()
  config.model.variant = (
    'base'  # d=512, 6 + 6 layers, 8 heads, MLP 2048 (the paper's); the next five are unused
  )
  config.model.num_heads = 4
  config.model.features = 256
  config.model.encoder_layers = 3
  config.model.decoder_layers = 3
  config.model.mlp_features = 1024
  config.model.share_embeddings = True
  config.model.tie_output = True
  config.model.posemb = 'sincos1d'
  config.model.posemb_injection = 'stem'
  config.model.max_length = 256
  config.model.score = 'scaled_dot'
  config.model.dropout = 0.1
  config.model.attention_dropout = 0.0
  config.model.dtype = 'bfloat16'
  config.model.scan_layers = False  # stack the blocks and scan over depth (attention/layers.py)
  config.model.remat = 'none'  # none, full, dots_saveable, dots_with_no_batch_dims_saveable
  config.model.activation = 'relu'  # the paper's: ReLU and post-LayerNorm
  config.model.norm_placement = 'post'
  config.model.use_bias = True  # biases on the attention projections

  config.decode = ml_collections.ConfigDict()
  config.decode.beam_size = 4
  config.decode.alpha = 0.6
  config.decode.max_extra_length = 50
  config.decode.num_samples = 5

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = 'adamw'
  config.optimizer.learning_rate = 512**-0.5 * 4000**-0.5  # d_model ** -0.5 * warmup ** -0.5 (rsqrt peak)
  config.optimizer.schedule = 'rsqrt'
  config.optimizer.warmup_steps = 4000
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.weight_decay = 0.0
  config.optimizer.weight_decay_regex = 'kernel$'  # the parameters decayed, by path (trainer/optim.py)
  config.optimizer.b1 = 0.9
  config.optimizer.b2 = 0.98
  config.optimizer.eps = 1e-9
  config.optimizer.momentum = 0.9
  config.optimizer.nesterov = False
  config.optimizer.grad_clip_norm = 0.0

  config.ema = ml_collections.ConfigDict()
  config.ema.decay = 0.0  # a moving average of the parameters, evaluated beside them (trainer/ema.py)

  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1  # devices on the data axis; -1: all that fsdp and model leave
  config.mesh.fsdp = 1  # devices that shard parameters and optimizer state (trainer/partitioning.py)
  config.mesh.model = 1  # devices that split attention heads and MLP width (tensor parallelism)
  return config
