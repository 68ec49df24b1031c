"""Transformer on Multi30k German->English image captions (Elliott et al. 2016), sized for a CPU.

  python train.py --config configs/transformer_multi30k.py --workdir runs/transformer_multi30k
  python evaluate.py --workdir runs/transformer_multi30k

Reads the gzipped line-aligned files of data/multi30k (`python -m pipelines.download multi30k`
writes them; train: 29,000 pairs, val: 1,014, test (test_2016_flickr): 1,000; set
--config.data.path elsewhere). A shared SentencePiece vocabulary of 4,000 pieces trained on the
training split (a small vocabulary keeps the output layer cheap), shared and tied embeddings, a
small model (d=256, 3 encoder and 2 decoder layers), 1,800 steps of 64 pairs (4 epochs), beam
search (4, alpha 0.6) at the end on test where the folder has it, else on val.
Runtime: about 25 minutes of a 2-core CPU for the training command (36 min with other jobs
beside it). Result (on val), machine and commit: docs/results.md, "Headline runs"; what moved it
between versions: CHANGELOG.md.
"""

import ml_collections

from configs.common import unset


def get_config():
  config = ml_collections.ConfigDict()
  config.task = 'seq2seq.task:Translation'
  config.seed = 0
  config.batch_size = 64
  # Length-sorted batches of 256: short sentences get short decoding caches (beam search on a CPU
  # is bound by them), for 4 shapes to compile.
  config.eval_batch_size = 256
  config.grad_accum_steps = 1
  config.total_steps = 1800
  config.num_epochs = 0.0
  config.label_smoothing = 0.1
  config.log_every_steps = 100
  config.eval_every_steps = 1800
  config.checkpoint_every_steps = 600
  config.keep_checkpoints = 3
  config.best_metric = 'bleu'
  config.best_mode = 'max'
  config.eval_split = 'test|val'  # test_2016_flickr where the folder has it, else val
  config.eval_splits = ()  # splits evaluated side by side, ('val', 'test'); metrics named <split>_<metric>
  config.peak_tflops = 0.0  # one device's dense peak, for the utilisation; 0: the known one
  config.profile_steps = ()  # steps traced with jax.profiler into <workdir>/profile/
  config.wandb = ml_collections.ConfigDict(dict(project='', entity='', name=''))  # project '': off

  config.data = ml_collections.ConfigDict()
  config.data.source = 'parallel'
  config.data.split = 'simple'  # SCAN's split; unused here
  config.data.name = unset(str)
  config.data.data_dir = unset(str)
  config.data.path = 'data/multi30k'  # python -m pipelines.download multi30k
  config.data.src_lang = 'de'
  config.data.tgt_lang = 'en'
  config.data.train_split = 'train'
  config.data.max_source_length = 64
  config.data.max_target_length = 64
  config.data.pad_to_multiple = 1
  config.data.max_eval_examples = 0
  config.data.packing = False  # several pairs per row (seq2seq/packing.py)

  config.data.tokenizer = ml_collections.ConfigDict()
  config.data.tokenizer.kind = 'sentencepiece'
  config.data.tokenizer.shared = True
  config.data.tokenizer.model_type = 'unigram'
  config.data.tokenizer.vocab_size = 4000
  config.data.tokenizer.character_coverage = 1.0
  config.data.tokenizer.max_training_sentences = 1_000_000
  config.data.tokenizer.model_file = unset(str)
  config.data.tokenizer.target_model_file = unset(str)

  config.model = ml_collections.ConfigDict()
  config.model.variant = 'custom'
  config.model.num_heads = 4
  config.model.features = 256
  config.model.encoder_layers = 3
  config.model.decoder_layers = 2
  config.model.mlp_features = 512
  config.model.share_embeddings = True
  config.model.tie_output = True
  config.model.posemb = 'sincos1d'
  config.model.posemb_injection = 'stem'
  config.model.max_length = 128
  config.model.score = 'scaled_dot'
  config.model.dropout = 0.1
  config.model.attention_dropout = 0.0
  config.model.dtype = 'float32'
  config.model.scan_layers = False  # stack the blocks and scan over depth (attention/layers.py)
  config.model.remat = 'none'  # none, full, dots_saveable, dots_with_no_batch_dims_saveable
  config.model.activation = 'gelu'  # ours: pre-LayerNorm and GELU train stably without warm-up tuning
  config.model.norm_placement = 'pre'
  config.model.use_bias = True  # biases on the attention projections

  config.decode = ml_collections.ConfigDict()
  config.decode.beam_size = 4
  config.decode.alpha = 0.6
  config.decode.max_extra_length = 50
  config.decode.num_samples = 5

  config.optimizer = ml_collections.ConfigDict()
  config.optimizer.name = 'adamw'
  config.optimizer.learning_rate = 0.001
  config.optimizer.schedule = 'cosine'
  config.optimizer.warmup_steps = 300
  config.optimizer.end_learning_rate = 0.0
  config.optimizer.weight_decay = 0.0
  config.optimizer.weight_decay_regex = 'kernel$'  # the parameters decayed, by path (trainer/optim.py)
  config.optimizer.b1 = 0.9
  config.optimizer.b2 = 0.98
  config.optimizer.eps = 1e-9
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
