"""A ViT's weights in and out: timm and Hugging Face folders (``sources``, ``timm_layout``,
``transformers_layout``, ``timm_architectures``), ``.npz`` files (``checkpoint_npz``, ``export_npz``),
our ViT written as timm or transformers folders (``export``), and a predictor of a weights folder
(``predictor``)."""
