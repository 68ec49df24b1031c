"""RNN with Bahdanau attention on Multi30k German->English (Elliott et al. 2016), the PyTorch
tutorial's model (28.3 test BLEU: lowercased, tokenised, greedy decoding) shrunk for a CPU.

  python train.py --config configs/rnn_multi30k.py --workdir runs/rnn_multi30k
  python evaluate.py --workdir runs/rnn_multi30k

Embeddings of 256, a bidirectional GRU encoder of 256 per direction, an attentive GRU decoder of
256 with the additive score and input feeding (``seq2seq.rnn_model``), dropout 0.3; the
tutorial had 512 per direction, a decoder of 512 and dropout 0.5, trained 10 epochs of 128
pairs (set those fields for its size). Here 2,700 steps of 64 pairs (6 epochs). Reads
data/multi30k (`python -m pipelines.download multi30k`; set --config.data.path elsewhere); a
shared SentencePiece vocabulary of 4,000 pieces (the tutorial used spaCy words); greedy decoding
of test (test_2016_flickr) at the end, or of val where the folder has no test. Reports sacreBLEU
(``bleu``: cased, 13a tokenisation) and ``bleu_lowercase`` (the same on lowercased text, the
tutorial's kind of BLEU up to its tokeniser).

Runtime: about 22 minutes of a 2-core CPU for the training command. The folder it was measured with
had no test split, so the result is on the validation split (the tutorial's 28.3 is on the test set, with
spaCy tokens). Result, machine and commit: docs/results.md, "The RNN translator".
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
  config.total_steps = 2700
  config.num_epochs = 0.0
  config.label_smoothing = 0.0
  config.log_every_steps = 100
  config.eval_every_steps = 2700
  config.checkpoint_every_steps = 900
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
  config.data.packing = False  # several pairs per row (seq2seq/packing.py); the Transformer only

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
  config.model.architecture = 'rnn'
  config.model.embedding_features = 256
  config.model.encoder_hidden = 256  # the tutorial: 512
  config.model.decoder_hidden = 256  # the tutorial: 512
  config.model.encoder_cell = 'gru'
  config.model.attention_score = 'additive'  # Bahdanau
  config.model.dropout = 0.3  # the tutorial: 0.5, for 10 epochs
  config.model.share_embeddings = True
  config.model.max_length = 128

  config.decode = ml_collections.ConfigDict()
  config.decode.beam_size = 1  # greedy, as the tutorial
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
