"""Encoder-decoder Transformer translation: data, tokenizers and model."""
