"""The translator through the generic trainer: real steps, evaluation, BLEU, tokenizers and bad input."""

import gzip
import json
import random

import numpy as np
import pytest
import sacrebleu
import tensorflow_datasets as tfds

from seq2seq.model import PAD_ID
from seq2seq.text_metrics import corpus_scores
from seq2seq.tokenizer import SentencePieceTokenizer
from tests.config_overrides import assert_fails_before_any_work
from tests.micro_batch_updates import assert_micro_batches_give_the_whole_batch
from tests.translation_test_configs import tiny_parallel_config, tiny_translation_config
from trainer.evaluation import evaluate_workdir
from trainer.io.metrics_io import read_metrics
from trainer.loop import train_and_evaluate
from trainer.task import load_task

FINAL_METRICS = {'bleu', 'chrf', 'exact_match', 'perplexity', 'loss', 'accuracy'}
GERMAN = {'der Hund': 'the dog', 'die Katze': 'the cat', 'ein Mann': 'a man', 'eine Frau': 'a woman'}
VERBS = {'läuft': 'runs', 'schläft': 'sleeps', 'spielt': 'plays', 'springt': 'jumps'}


def write_corpus(directory, split, count, seed=0, *, gzipped=False):
  rng = random.Random(seed)
  pairs = [(rng.choice(list(GERMAN)), rng.choice(list(VERBS))) for _ in range(count)]
  german = ''.join(f'{subject} {verb} .\n' for subject, verb in pairs)
  english = ''.join(f'{GERMAN[subject]} {VERBS[verb]} .\n' for subject, verb in pairs)
  directory.mkdir(parents=True, exist_ok=True)
  suffix = '.gz' if gzipped else ''
  for language, text in (('de', german), ('en', english)):
    data = text.encode()
    (directory / f'{split}.{language}{suffix}').write_bytes(gzip.compress(data) if gzipped else data)


@pytest.fixture(scope='module')
def scan_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('scan')
  return workdir, train_and_evaluate(tiny_translation_config(), workdir)


@pytest.mark.slow  # runs the trainer
def test_scan_trains_and_reports_translation_metrics(scan_run):
  workdir, result = scan_run
  assert result.step == 4 and not result.interrupted
  assert set(result.eval_metrics) >= FINAL_METRICS
  assert 0.0 <= result.eval_metrics['bleu'] <= 100.0 and result.eval_metrics['perplexity'] >= 1.0
  hypotheses = (workdir / 'hypotheses_test.txt').read_text().splitlines()
  assert len(hypotheses) == 48
  assert json.loads((workdir / 'tokenizer' / 'source' / 'tokenizer.json').read_text())['kind'] == 'word'
  assert [r['step'] for r in read_metrics(workdir) if r['split'] == 'eval'] == [2, 4]


@pytest.mark.slow  # runs the trainer
def test_evaluate_reproduces_the_logged_metrics(scan_run):
  workdir, _ = scan_run
  logged = {r['step']: r for r in read_metrics(workdir) if r['split'] == 'eval'}
  result = evaluate_workdir(workdir)
  assert result['step'] == 4
  for name in ('bleu', 'chrf', 'exact_match', 'accuracy'):
    assert result[name] == pytest.approx(logged[4][name], abs=1e-6)
  for name in ('loss', 'perplexity'):
    assert result[name] == pytest.approx(logged[4][name], rel=1e-5)
  assert result['bleu_signature'].startswith('nrefs:1|case:mixed|') and 'samples' not in result
  assert 'case:lc' in result['bleu_lowercase_signature'] and result['chrf_signature']


@pytest.mark.slow  # trains each way
def test_micro_batches_give_the_whole_batch_update_and_metrics(tmp_path):
  """Micro-batches with very different token counts: each target token weighs the same, as in the
  whole batch (a mean of the micro-batches' token means would weigh the short ones' tokens more)."""
  task = load_task(tiny_translation_config(**{'model.dropout': 0.0}))
  task.prepare(tmp_path)
  batch = next(task.train_batches(batch_size=32, seed=0, start_step=0, process_index=0, process_count=1))
  short = np.arange(32) % 4 != 0  # micro-batches 1-3 (every 4th row is micro-batch 0's): one token each
  for name in ('tgt_in', 'tgt_out'):
    batch[name] = batch[name].copy()
    batch[name][short, 1:] = PAD_ID
  tokens = [int(np.sum(batch['tgt_out'][index::4] != PAD_ID)) for index in range(4)]
  assert tokens[0] > 3 * max(tokens[1:]), tokens
  assert_micro_batches_give_the_whole_batch(task, batch, 4, ('loss', 'accuracy'))


@pytest.mark.slow  # runs the trainer
def test_few_steps_on_mock_wmt14(tmp_path):
  config = tiny_parallel_config(tmp_path, total_steps=1, eval_split='validation')
  config.data.update(source='tfds', name='wmt14_translate/de-en', path=None, max_eval_examples=8)
  with tfds.testing.mock_data(num_examples=24):
    result = train_and_evaluate(config, tmp_path / 'run')
  assert result.step == 1 and set(result.eval_metrics) >= FINAL_METRICS


def test_bleu_and_chrf_are_sacrebleus():
  hypotheses = ['the cat sat on the mat', 'a dog runs in the park .', 'hello world', 'It rains today']
  references = [
    'the cat sat on a mat',
    'a dog is running in the park .',
    'hello there world',
    'It rains today',
  ]
  scores = corpus_scores(hypotheses, references)
  assert scores['bleu'] == sacrebleu.corpus_bleu(hypotheses, [references]).score
  assert scores['chrf'] == sacrebleu.corpus_chrf(hypotheses, [references]).score
  reference_bleu = sacrebleu.corpus_bleu(hypotheses, [references])
  assert scores['length_ratio'] == reference_bleu.sys_len / reference_bleu.ref_len
  assert scores['length_ratio'] < 1  # two hypotheses are shorter than their references
  assert scores['exact_match'] == 0.25
  assert scores['bleu_signature'].startswith('nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:')


@pytest.mark.slow  # runs the trainer
def test_parallel_text_with_a_given_sentencepiece_model_that_must_match_the_workdir(tmp_path):
  write_corpus(tmp_path / 'corpus', 'train', 60)
  write_corpus(tmp_path / 'corpus', 'val', 10, seed=1)
  texts = [
    line
    for name in ('train.de', 'train.en')
    for line in (tmp_path / 'corpus' / name).read_text().splitlines()
  ]
  trained = SentencePieceTokenizer.train(texts, tmp_path / 'trained', vocab_size=48, hard_vocab_limit=False)
  other = SentencePieceTokenizer.train(
    texts[::-1][:50], tmp_path / 'other', vocab_size=40, hard_vocab_limit=False
  )
  given = tmp_path / 'given.model'
  given.write_bytes(trained.model_bytes)
  config = tiny_parallel_config(
    tmp_path / 'corpus', total_steps=1, **{'data.tokenizer.model_file': str(given), 'decode.beam_size': 2}
  )
  workdir = tmp_path / 'run'
  result = train_and_evaluate(config, workdir)
  assert set(result.eval_metrics) >= FINAL_METRICS
  assert len((workdir / 'hypotheses_val.txt').read_text().splitlines()) == 10
  given.write_bytes(other.model_bytes)
  with pytest.raises(ValueError, match='fingerprint'):
    train_and_evaluate(config, workdir)
  (workdir / 'tokenizer' / 'spm.model').write_bytes(other.model_bytes)
  with pytest.raises(ValueError, match='fingerprint'):
    evaluate_workdir(workdir)


def _break_line_counts(corpus):
  (corpus / 'train.en').write_text('the dog runs .\n' * 59)
  return 'train.de has 60 lines'


def _empty_line(corpus):
  lines = (corpus / 'train.en').read_text().splitlines()
  lines[6] = ''
  (corpus / 'train.en').write_text('\n'.join(lines) + '\n')
  return 'train.en:7: empty line'


def _bad_bytes(corpus):
  data = (corpus / 'train.de').read_bytes().split(b'\n')
  data[2] = b'der Hund l\xe4uft .'
  (corpus / 'train.de').write_bytes(b'\n'.join(data))
  return 'train.de:3: invalid UTF-8'


def _missing_file(corpus):
  (corpus / 'val.en').unlink()
  return 'val.en'


@pytest.mark.parametrize('damage', [_break_line_counts, _empty_line, _bad_bytes, _missing_file])
def test_bad_parallel_text_fails_before_any_work(tmp_path, damage):
  corpus = tmp_path / 'corpus'
  write_corpus(corpus, 'train', 60)
  write_corpus(corpus, 'val', 10, seed=1)
  message = damage(corpus)
  workdir = tmp_path / 'run'
  with pytest.raises((ValueError, FileNotFoundError), match=message):
    train_and_evaluate(tiny_parallel_config(corpus), workdir)
  assert not workdir.exists()


@pytest.mark.parametrize(
  'overrides,message',
  [
    (
      {
        'data.source': 'tfds',
        'data.name': 'wmt14_translate/de-en',
        'data.src_lang': 'de',
        'data.tgt_lang': 'en',
        'data.data_dir': '{tmp}/no_tfds',
      },
      'tfds build wmt14_translate/de-en',
    ),
    ({'data.split': 'around_right'}, "config.data.split is 'around_right'; allowed values: simple, length"),
    ({'data.path': '{tmp}/no_scan'}, r'simple_split/tasks_(train|test)_simple.txt'),
    ({'model.posemb': 'sincos2d'}, 'needs a 2-D patch grid'),
    (
      {'model.variant': 'huge'},
      "config.model.variant is 'huge'; allowed values: tiny, small, base, big, custom.",
    ),
    ({'model.share_embeddings': True}, 'tokenizer.shared=True'),
    ({'model.max_length': 4}, 'model.max_length'),
    (
      {'data.tokenizer.kind': 'bytes'},
      "config.data.tokenizer.kind is 'bytes'; allowed values: sentencepiece, word",
    ),
  ],
)
def test_bad_config_fails_before_any_work(tmp_path, overrides, message):
  assert_fails_before_any_work(tiny_translation_config, overrides, message, tmp_path)


@pytest.mark.slow  # runs the trainer
def test_evaluation_reads_no_training_data(tmp_path):
  corpus = tmp_path / 'corpus'
  write_corpus(corpus, 'train', 60)
  write_corpus(corpus, 'val', 10, seed=1)
  workdir = tmp_path / 'run'
  trained = train_and_evaluate(tiny_parallel_config(corpus, total_steps=2), workdir)
  for name in ('train.de', 'train.en'):
    (corpus / name).unlink()
  result = evaluate_workdir(workdir)
  assert result['bleu'] == pytest.approx(trained.eval_metrics['bleu'])
