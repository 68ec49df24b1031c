"""RNN with Bahdanau attention on SCAN's simple split (commands -> actions): the embedded default.

  python train.py --config configs/rnn_scan.py --workdir runs/rnn_scan
  python evaluate.py --workdir runs/rnn_scan

A bidirectional GRU encoder (128 per direction) and an attentive GRU decoder (256) with the
additive score and input feeding (``seq2seq.rnn_model``), embeddings of 64, word-level
vocabularies, 1,600 steps of 128 pairs, greedy decoding of the whole test split.
Swap the score with ``--config.model.attention_score=dot`` (or scaled_dot, cosine, none).

Runtime: about 8 minutes of a 2-core CPU for the training command. Result, machine and commit:
docs/results.md, "The RNN translator" (Lake and Baroni (2018) report 99.8% for their best RNN on
this split).
"""

import ml_collections

from configs.common import unset


def get_config():
  config = ml_collections.ConfigDict()
  config.task = 'seq2seq.task:Translation'
  config.seed = 0
  config.batch_size = 128
  config.eval_batch_size = 4224  # the whole test split (4,182 pairs) in one batch: one shape to compile
  config.grad_accum_steps = 1
  config.total_steps = 1600
  config.num_epochs = 0.0
  config.label_smoothing = 0.0
  config.log_every_steps = 200
  config.eval_every_steps = 1600
  config.checkpoint_every_steps = 800
  config.keep_checkpoints = 3
  config.best_metric = 'exact_match'
  config.best_mode = 'max'
  config.eval_split = 'test'
  config.eval_splits = ()  # splits evaluated side by side, ('val', 'test'); metrics named <split>_<metric>
  config.peak_tflops = 0.0  # one device's dense peak, for the utilisation; 0: the known one
  config.profile_steps = ()  # steps traced with jax.profiler into <workdir>/profile/
  config.wandb = ml_collections.ConfigDict(dict(project='', entity='', name=''))  # project '': off

  config.data = ml_collections.ConfigDict()
  config.data.source = 'scan'
  config.data.split = 'simple'
  config.data.name = unset(str)
  config.data.data_dir = unset(str)
  config.data.path = unset(str)
  config.data.src_lang = unset(str)
  config.data.tgt_lang = unset(str)
  config.data.train_split = 'train'
  config.data.max_source_length = 16
  config.data.max_target_length = 64
  config.data.pad_to_multiple = 1  # on a CPU every padded position costs time
  config.data.max_eval_examples = 0
  config.data.packing = False  # several pairs per row (seq2seq/packing.py); the Transformer only

  config.data.tokenizer = ml_collections.ConfigDict()
  config.data.tokenizer.kind = 'word'
  config.data.tokenizer.shared = False
  config.data.tokenizer.model_type = 'unigram'
  config.data.tokenizer.vocab_size = 8000
  config.data.tokenizer.character_coverage = 1.0
  config.data.tokenizer.max_training_sentences = 1_000_000
  config.data.tokenizer.model_file = unset(str)
  config.data.tokenizer.target_model_file = unset(str)

  config.model = ml_collections.ConfigDict()
  config.model.architecture = 'rnn'
  config.model.embedding_features = 64
  config.model.encoder_hidden = 128
  config.model.decoder_hidden = 256
  config.model.encoder_cell = 'gru'
  config.model.attention_score = 'additive'  # Bahdanau
  config.model.dropout = 0.1
  config.model.share_embeddings = False
  config.model.max_length = 64

  config.decode = ml_collections.ConfigDict()
  config.decode.beam_size = 1
  config.decode.alpha = 0.6
  config.decode.max_extra_length = 50
  config.decode.num_samples = 5

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = 'adamw'
  config.optimizer.learning_rate = 0.002
  config.optimizer.schedule = 'cosine'
  config.optimizer.warmup_steps = 100
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.weight_decay = 0.0
  config.optimizer.weight_decay_regex = 'kernel$'  # the parameters decayed, by path (trainer/optim.py)
  config.optimizer.b1 = 0.9
  config.optimizer.b2 = 0.98
  config.optimizer.eps = 1e-8
  config.optimizer.momentum = 0.9
  config.optimizer.nesterov = False
  config.optimizer.grad_clip_norm = 1.0

  config.ema = ml_collections.ConfigDict()
  config.ema.decay = 0.0  # a moving average of the parameters, evaluated beside them (trainer/ema.py)

  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1  # devices on the data axis; -1: all that fsdp and model leave
  config.mesh.fsdp = 1  # devices that shard parameters and optimizer state (trainer/partitioning.py)
  config.mesh.model = 1  # devices that split attention heads and MLP width (tensor parallelism)
  return config
