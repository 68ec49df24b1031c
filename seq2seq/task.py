"""Translation as a trainer task: the encoder-decoder (Transformer or RNN), its data, loss and metrics.

Config sections: ``data`` (below), ``data.tokenizer`` (``seq2seq.workdir_tokenizers``),
``model`` (``seq2seq.architectures``: the Transformer of ``seq2seq.model`` or the RNN of
``seq2seq.rnn_model``), ``decode`` (below) and ``label_smoothing``.

``data`` fields (``default_data_config()``):
  source, split, path, name, data_dir, src_lang, tgt_lang
                      where the pairs come from (``seq2seq.sources``)
  train_split         the split to train on. 'train'.
  holdout             pairs of the training split held out as the split 'holdout', to choose
                      a recipe or a checkpoint by (``seq2seq.sources``; 0 = none). 0.
  max_source_length   training pairs with more source tokens are dropped; evaluation
                      sources are truncated to it. 64.
  max_target_length   the same for the target plus its BOS/EOS (``len(target) + 1``). 64.
  pad_to_multiple     training batch widths are rounded up to a multiple of this. 8.
  max_eval_examples   evaluate on the first N pairs of a split only (0 = all of them). 0.
  packing             train on packed rows (``seq2seq.packing``): as many pairs per row of
                      max_source_length + max_target_length tokens as fit, batch_size
                      counting rows; the Transformer only. False.

``decode`` fields (``default_decode_config()``): ``beam_size`` (1 = greedy), ``alpha``
(GNMT length penalty), ``max_extra_length`` (outputs end by source length + this),
``num_samples`` (sample translations shown in TensorBoard).

Training minimises token-level cross-entropy with teacher forcing and label smoothing,
averaged over the real (non-padding) target tokens of the whole batch (``loss_and_outputs``
returns the sum and the token count; the trainer adds them over micro-batches and devices);
``accuracy`` is the token accuracy. The training ``loss`` metric is that smoothed loss; the
evaluation ``loss`` is the unsmoothed negative log-likelihood per target token, as in every
family. Evaluation adds ``perplexity`` (exp of that evaluation loss) and, by decoding the
split, sacreBLEU's ``bleu``, ``bleu_lowercase``, ``chrf`` and ``length_ratio`` on detokenised text
(``seq2seq.text_metrics``), ``exact_match`` (whole sentences), the signatures, sample
translations, and every hypothesis in ``<output_dir>/hypotheses_<split>.txt`` (in the split's
order, rewritten at each evaluation).
"""

import dataclasses
import functools
import pathlib

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from clu import metrics as clu_metrics
from flax import nnx

from seq2seq import ablation_table, input_pipeline
from seq2seq import config_sections as sections
from seq2seq.architectures import architecture_of, make_translator, model_section
from seq2seq.decoding import translate
from seq2seq.model import PACKING_KEYS, PAD_ID, Packing
from seq2seq.packing import PackedTrainingBatches
from seq2seq.prediction import TranslationPrediction
from seq2seq.sources import PairSource, open_source
from seq2seq.text_metrics import corpus_scores
from seq2seq.tokenizer import Tokenizer
from seq2seq.workdir_tokenizers import (
  check_tokenizer_config,
  load_saved_tokenizers,
  prepare_tokenizers,
)
from trainer.config_sections import to_section
from trainer.errors import ConfigError, DataError, WorkdirError
from trainer.io import storage
from trainer.losses import token_losses
from trainer.observe.reporting import Reporting
from trainer.partitioning import Devices
from trainer.task import Task, loss_and_accuracy
from trainer.validation import check_split_name, resolve_split


@flax.struct.dataclass
class Perplexity(clu_metrics.Average):
  """exp of the average of ``nll`` over the (masked) tokens."""

  def compute(self) -> jax.Array:
    return jnp.exp(super().compute())


TranslationMetrics = loss_and_accuracy()
TranslationEvalMetrics = loss_and_accuracy(perplexity=Perplexity.from_output('nll'))


def default_data_config() -> ml_collections.ConfigDict:
  """Every ``data`` field with its default (``seq2seq.config_sections.TextData``)."""
  return to_section(sections.TextData())


def default_decode_config() -> ml_collections.ConfigDict:
  """Every ``decode`` field with its default (``seq2seq.config_sections.Decode``)."""
  return to_section(sections.Decode())


def _sample_text(sources, hypotheses, references, count: int) -> str:
  """Markdown for TensorBoard: the first ``count`` sources with their hypothesis and reference."""
  blocks = [
    f'**source:** {source}  \n**hypothesis:** {hypothesis}  \n**reference:** {reference}'
    for source, hypothesis, reference in list(zip(sources, hypotheses, references))[:count]
  ]
  return '\n\n'.join(blocks)


@dataclasses.dataclass(frozen=True)
class VocabSizes:
  """What a translator's data gives its model (``trainer.task.DataSizes``): the sizes of its source and
  target vocabularies. The tokenizers ``Translation.prepare`` makes or loads give one (``of``); so does
  a workdir's record of it (``from_json``)."""

  source_vocab_size: int
  target_vocab_size: int

  @classmethod
  def of(cls, source_tokenizer: Tokenizer, target_tokenizer: Tokenizer) -> 'VocabSizes':
    return cls(source_tokenizer.vocab_size, target_tokenizer.vocab_size)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, values: dict, config: ml_collections.ConfigDict) -> 'VocabSizes':
    """``values['source_vocab_size']`` and ``values['target_vocab_size']``, else ``values['vocab_size']``
    (0: ``config.data.tokenizer.vocab_size``) for both."""
    if values.get('source_vocab_size') and values.get('target_vocab_size'):
      return cls(int(values['source_vocab_size']), int(values['target_vocab_size']))
    vocab_size = values.get('vocab_size') or config.data.tokenizer.vocab_size or 0
    if vocab_size < 1:
      raise ConfigError(
        'Set a vocabulary size (data.tokenizer.vocab_size) to build the task without its data.'
      )
    return cls(vocab_size, vocab_size)


class TranslationReporting(Reporting):
  """The translator's tables (the Transformer paper's positional-encoding rows) and pictures (cross-
  attention of a sentence)."""

  percent_metrics = ('accuracy', 'exact_match')

  def ablation_table(self, summary):
    return ablation_table.table(summary)

  def draw_pictures(self, task, model, out_dir, name, title):
    from seq2seq import pictures  # pylint: disable=g-import-not-at-top  (matplotlib: only when drawing)

    return pictures.draw(model, task, out_dir, name, title)


class Translation(Task):
  config_sections = sections.SECTIONS
  train_metrics = TranslationMetrics
  eval_metrics = TranslationEvalMetrics
  # the SentencePiece files may move; what they hold is checked against the workdir's copy
  not_identity_fields = ('data.tokenizer.model_file', 'data.tokenizer.target_model_file')
  Sizes = VocabSizes
  reporting = TranslationReporting()

  def __init__(self, config: ml_collections.ConfigDict, sizes: VocabSizes | None = None):
    """``sizes``: a workdir's record, whose tokenizers ``prepare`` loads as saved; ``None``: the data is
    opened (and its evaluation split read) here, and ``prepare`` makes the tokenizers from it."""
    super().__init__(config, sizes)
    data = config.data
    self.label_smoothing = config.label_smoothing
    for field in ('src_lang', 'tgt_lang'):  # parts of file names
      if data[field] is not None:
        check_split_name(data[field], f'config.data.{field}')
    check_tokenizer_config(data.tokenizer)
    model = model_section(config.model)
    architecture = architecture_of(config.model)
    if model.share_embeddings and not data.tokenizer.shared:
      raise ConfigError('model.share_embeddings needs one vocabulary: set data.tokenizer.shared=True.')
    if min(data.max_source_length, data.max_target_length) < 2 or data.pad_to_multiple < 1:
      raise ConfigError(
        'data.max_source_length and data.max_target_length must be at least 2, '
        'data.pad_to_multiple at least 1.'
      )
    if model.max_length < max(data.max_source_length, data.max_target_length):
      raise ConfigError(
        f'model.max_length ({model.max_length}) must cover data.max_source_length '
        f'({data.max_source_length}) and data.max_target_length ({data.max_target_length}).'
      )
    self.packing = data.packing
    if self.packing and architecture != 'transformer':
      raise ConfigError(
        f'data.packing is for the Transformer; the {architecture} translator reads one pair per row '
        '(set data.packing=False).'
      )
    decode = config.decode
    if decode.beam_size < 1 or decode.max_extra_length < 0:
      raise ConfigError(
        f'decode.beam_size must be >= 1 and decode.max_extra_length >= 0, got '
        f'{decode.beam_size} and {decode.max_extra_length}.'
      )
    # the paths and the options' checks do not depend on the vocabularies' sizes
    self.check_model(
      lambda section: make_translator(section, source_vocab_size=8, target_vocab_size=8, rngs=nnx.Rngs(0))
    )
    self._training_batches = {}
    self._eval_tokens = {}
    self._recorded = sizes is not None
    self.source_tokenizer = self.target_tokenizer = None
    self.prediction = TranslationPrediction(self)
    if sizes is None:  # learned from the data: a missing or mismatched evaluation split fails now
      split_names = self.source.split_names()
      eval_split = resolve_split(config.eval_split, split_names)
      if eval_split not in split_names and '|' in config.eval_split:
        raise ConfigError(
          f'config.eval_split is {config.eval_split!r}; this data has the splits {", ".join(split_names)}.'
        )
      self.source.read(eval_split)

  @functools.cached_property
  def source(self) -> PairSource:
    """Where the sentence pairs come from, opened when first needed (at once when no sizes were given)."""
    return open_source(self.config.data)

  def batch_shapes(self, batch_size):
    data = self.config.data
    source, target = (batch_size, data.max_source_length), (batch_size, data.max_target_length)
    names = {'src': source, 'tgt_in': target, 'tgt_out': target}
    if self.packing:
      names.update(src_segments=source, tgt_segments=target, src_positions=source, tgt_positions=target)
    return {name: jax.ShapeDtypeStruct(shape, jnp.int32) for name, shape in names.items()}

  # Data -------------------------------------------------------------------------

  @functools.cached_property
  def train_pairs(self) -> list[tuple[str, str]]:
    """The training split, read when first needed, so evaluating a checkpoint never reads it."""
    return self.source.read(self.config.data.train_split)

  def check_training_data(self) -> None:
    if not self.train_pairs:  # reads the split once; later uses take the cached pairs
      raise DataError(f'The training split {self.config.data.train_split!r} has no pairs.')

  def prepare(self, workdir: pathlib.Path) -> None:
    """Makes the tokenizers from the training split, or loads the workdir's; a task built from a
    workdir's record loads them as saved, checked against the sizes it records."""
    tokenizer_config = self.config.data.tokenizer
    if self._recorded:
      tokenizers = load_saved_tokenizers(tokenizer_config, workdir)
    else:
      tokenizers = prepare_tokenizers(tokenizer_config, lambda: self.train_pairs, workdir)
    found = VocabSizes.of(*tokenizers)
    if self._recorded and found != self.sizes:
      raise WorkdirError(
        f'{workdir}: its tokenizers have {found.source_vocab_size} and {found.target_vocab_size} entries, '
        f'but it records {self.sizes.source_vocab_size} and {self.sizes.target_vocab_size}.'
      )
    self.source_tokenizer, self.target_tokenizer = tokenizers
    self.sizes = found
    self._training_batches.clear()
    self._eval_tokens.clear()

  def check_prepared(self) -> None:
    """Raises unless ``prepare`` has made or loaded the tokenizers."""
    if self.source_tokenizer is None:
      raise RuntimeError('Translation.prepare(workdir) must run first: it makes or loads the tokenizers.')

  def num_train_examples(self) -> int:
    """Training pairs before length filtering (the filter needs the tokenizer, made later)."""
    return len(self.train_pairs)

  def eval_split_names(self) -> tuple[str, ...]:
    return self.source.split_names()

  def eval_metric_names(self) -> tuple[str, ...]:
    # ``length_ratio`` is reported too, but is no ``best_metric``: neither more nor less is better.
    return (*self.eval_metrics.__annotations__, 'bleu', 'bleu_lowercase', 'chrf', 'exact_match')

  def eval_pairs(self, split: str) -> list[tuple[str, str]]:
    check_split_name(split, 'split')
    pairs = self.source.read(split)
    limit = self.config.data.max_eval_examples
    return pairs[:limit] if limit else pairs

  def _tokenized(self, split: str) -> input_pipeline.TokenizedPairs:
    self.check_prepared()
    if split not in self._eval_tokens:
      data = self.config.data
      self._eval_tokens[split] = input_pipeline.tokenize_pairs(
        self.eval_pairs(split),
        self.source_tokenizer,
        self.target_tokenizer,
        max_source_length=data.max_source_length,
        max_target_length=data.max_target_length,
      )
    return self._eval_tokens[split]

  def train_batches(self, *, batch_size, seed, start_step, process_index, process_count):
    self.check_prepared()
    if batch_size not in self._training_batches:
      data = self.config.data
      pairs = input_pipeline.tokenize_pairs(self.train_pairs, self.source_tokenizer, self.target_tokenizer)
      lengths = dict(max_source_length=data.max_source_length, max_target_length=data.max_target_length)
      if self.packing:
        plan = PackedTrainingBatches(pairs, batch_size=batch_size, **lengths)
      else:
        plan = input_pipeline.TrainingBatches(
          pairs, batch_size=batch_size, pad_to_multiple=data.pad_to_multiple, **lengths
        )
      self._training_batches[batch_size] = plan
    return self._training_batches[batch_size].batches(
      seed=seed, start_step=start_step, process_index=process_index, process_count=process_count
    )

  def eval_batches(self, split, *, batch_size, process_index, process_count):
    data = self.config.data
    return input_pipeline.eval_batches(
      self._tokenized(split),
      batch_size=batch_size,
      max_source_length=data.max_source_length,
      max_target_length=data.max_target_length,
      process_index=process_index,
      process_count=process_count,
    )

  # Model and loss -----------------------------------------------------------------

  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    if self.sizes is None:
      raise RuntimeError('Translation.prepare(workdir) must run first: it makes or loads the tokenizers.')
    return make_translator(
      self.config.model,
      source_vocab_size=self.sizes.source_vocab_size,
      target_vocab_size=self.sizes.target_vocab_size,
      rngs=rngs,
    )

  def loss_and_outputs(self, model, batch, *, rngs, deterministic):
    packing = {'packing': Packing.from_batch(batch)} if PACKING_KEYS[0] in batch else {}
    logits, _ = model(batch['src'], batch['tgt_in'], deterministic=deterministic, rngs=rngs, **packing)
    losses, _ = token_losses(logits, batch['tgt_out'], self.label_smoothing)
    weights = batch['tgt_out'] != PAD_ID
    outputs = {'loss': losses, 'logits': logits, 'labels': batch['tgt_out'], 'mask': weights}
    return jnp.sum(jnp.where(weights, losses, 0.0)), jnp.sum(weights), outputs

  def eval_outputs(self, model, batch):
    logits, _ = model(batch['src'], batch['tgt_in'])
    _, nll = token_losses(logits, batch['tgt_out'])
    weights = (batch['tgt_out'] != PAD_ID) & (batch['mask'][:, None] > 0)
    return {'loss': nll, 'nll': nll, 'logits': logits, 'labels': batch['tgt_out'], 'mask': weights}

  # Decoding -----------------------------------------------------------------------

  def translate_split(self, model: nnx.Module, split: str, devices: Devices) -> list[str]:
    """Detokenised hypotheses for every evaluated pair of ``split``, in the split's order.

    Each process decodes its rows of each global batch; all processes get every hypothesis.
    """
    decode = self.config.decode
    hypotheses = [None] * len(self._tokenized(split))
    for local in self.eval_batches(
      split,
      batch_size=self.config.eval_batch_size,
      process_index=devices.process_index,
      process_count=devices.process_count,
    ):
      batch = devices.shard({name: local[name] for name in ('src', 'index', 'mask')})
      tokens = translate(
        model,
        batch['src'],
        beam_size=decode.beam_size,
        alpha=decode.alpha,
        max_extra_length=decode.max_extra_length,
      )
      tokens, index, mask = devices.gather((tokens, batch['index'], batch['mask']))
      for row in np.flatnonzero(mask):
        hypotheses[index[row]] = self.target_tokenizer.decode(tokens[row])
    return hypotheses

  def extra_evaluation(self, model, split, output_dir, devices):
    hypotheses = self.translate_split(model, split, devices)
    pairs = self.eval_pairs(split)
    sources, references = [source for source, _ in pairs], [target for _, target in pairs]
    results = corpus_scores(hypotheses, references)
    results['samples'] = _sample_text(sources, hypotheses, references, self.config.decode.num_samples)
    if output_dir is not None and devices.is_main_process:
      storage.write_text(
        storage.as_path(output_dir) / f'hypotheses_{split}.txt',
        ''.join(hypothesis + '\n' for hypothesis in hypotheses),
      )
    return results
