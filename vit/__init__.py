"""Vision Transformer: model, input pipeline and training entry points."""
