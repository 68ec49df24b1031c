"""The translation data sets that the Transformer and the RNN configs share: how each is read,
batched and evaluated. A config spreads one into its ``experiment`` (``**SCAN``) and adds its model.
"""

# SCAN's simple split, embedded (no files): word-level vocabularies, one per language; the whole test
# split (4,182 pairs) decoded greedily in one batch, so one shape is compiled.
SCAN = dict(
  eval_batch_size=4224,
  best_metric='exact_match',
  data=dict(max_source_length=16, pad_to_multiple=1, tokenizer=dict(kind='word', shared=False)),
  decode=dict(beam_size=1),
)

# Multi30k German->English, from the gzipped files of data/multi30k (`python -m pipelines.download
# multi30k`); a shared SentencePiece vocabulary of 4,000 pieces trained on the training split;
# evaluated on test (test_2016_flickr) where the folder has it, else on val.
MULTI30K = dict(
  batch_size=64,
  best_metric='bleu',
  eval_split='test|val',
  data=dict(
    source='parallel',
    path='data/multi30k',
    src_lang='de',
    tgt_lang='en',
    pad_to_multiple=1,
    tokenizer=dict(vocab_size=4000),
  ),
)
