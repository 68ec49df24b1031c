"""Encoder-decoder Transformer translation: data sources, tokenizers, batches, model, decoding and the task."""
