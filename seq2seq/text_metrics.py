"""Corpus-level translation metrics on detokenised text, computed by sacreBLEU itself.

BLEU and chrF are sacreBLEU's defaults (13a tokenisation, exponential smoothing; chrF2),
exactly what ``sacrebleu.corpus_bleu`` and ``sacrebleu.corpus_chrf`` return; the
signatures say so in the results (``bleu_signature``, ``chrf_signature``).
``bleu_lowercase`` is the same BLEU on lowercased hypotheses and references
(``sacrebleu.corpus_bleu(..., lowercase=True)``, 13a tokenisation; signature ``case:lc``), for
comparisons with papers and tutorials that report lowercased, tokenised BLEU. ``length_ratio`` is
sacreBLEU's hypothesis length over reference length (in 13a tokens), whose shortfall below 1 the
brevity penalty charges.
"""

from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float | str]:
  """``bleu``, ``bleu_lowercase`` and ``chrf`` (0..100), ``length_ratio``, ``exact_match`` (0..1,
  whole sentences) and the signatures."""
  if len(hypotheses) != len(references):
    raise ValueError(f'{len(hypotheses)} hypotheses but {len(references)} references')
  if not references:
    raise ValueError('no sentences to score')
  bleu, bleu_lowercase, chrf = BLEU(), BLEU(lowercase=True), CHRF()
  hypotheses, reference_sets = list(hypotheses), [list(references)]
  bleu_score = bleu.corpus_score(hypotheses, reference_sets)
  return {
    'bleu': float(bleu_score.score),
    'length_ratio': float(bleu_score.sys_len / bleu_score.ref_len) if bleu_score.ref_len else 0.0,
    'bleu_lowercase': float(bleu_lowercase.corpus_score(hypotheses, reference_sets).score),
    'chrf': float(chrf.corpus_score(hypotheses, reference_sets).score),
    'exact_match': sum(h == r for h, r in zip(hypotheses, references)) / len(references),
    'bleu_signature': str(bleu.get_signature()),
    'bleu_lowercase_signature': str(bleu_lowercase.get_signature()),
    'chrf_signature': str(chrf.get_signature()),
  }
