"""Where a ViT's initial parameters come from: ``config.init_from`` (an ``.npz`` or a workdir of ours).

Fields: ``path`` (an ``.npz`` in the official or big_vision layout, see ``vit.weights.checkpoint_npz``,
or a workdir written by ``train.py``; '' trains from scratch), ``checkpoint`` (for a workdir:
'latest', 'best' or a step), ``strict`` (False lists missing, left-over and wrong-shape keys
instead of failing), ``init_head`` (False: a zero head even when the class count matches),
``resample`` (for a learned position table of another grid: 'bilinear' or 'bicubic', both
``jax.image.resize``, which antialiases when shrinking; 'scipy_zoom', the original ViT code's and
big_vision's ``scipy.ndimage.zoom(order=1)``; 'torch_bicubic' or 'torch_bicubic_aa', PyTorch's
bicubic without or with antialiasing; see ``attention.resample``). Unset (''), a timm source is
resampled as timm does it ('torch_bicubic_aa'), a transformers one as transformers does
('torch_bicubic'), and an ``.npz`` or a workdir with 'bilinear'.
A workdir's model is read through the same official layout that ``vit.weights.export_npz`` writes.

``path`` may also be a timm or Hugging Face transformers folder, or a bare timm ``.safetensors`` with
``arch`` (its timm architecture name), read by ``vit.weights.sources``. The model options such a file decides
(``vit.weights.file_options``) fill the fields the config's ``model`` section leaves out or leaves unset
(``configs.common.unset``), when the config is completed; a field set to something else is an error
listing every difference. ``distill_token`` is taken from the file when unset, but a config may set
it either way: ``False`` fine-tunes a distilled DeiT without its distillation token and head (they are
dropped), ``True`` adds a fresh pair to any file (DeiT's distillation from a teacher).
"""

import json
import pathlib

import ml_collections
import numpy as np

from attention.resample import RESAMPLE_METHODS, SOURCE_RESAMPLE
from trainer.config_sections import to_section
from trainer.errors import ConfigError
from vit import config_sections
from vit.weights import checkpoint_npz, sources


def default_init_from_config() -> ml_collections.ConfigDict:
  """Every ``init_from`` field with its default (``vit.config_sections.InitFrom``)."""
  return to_section(config_sections.InitFrom())


def check_init_from(config: ml_collections.ConfigDict | None) -> None:
  if config is None:
    return
  if not isinstance(config.get('arch', ''), str):
    raise ConfigError(f'config.init_from.arch must be a timm architecture name, got {config.arch!r}.')
  if config.resample and config.resample not in RESAMPLE_METHODS:
    raise ConfigError(
      f'config.init_from.resample is {config.resample!r}; allowed values: {", ".join(RESAMPLE_METHODS)}.'
    )


def read_canonical(config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
  """The source's arrays in ``checkpoint_npz``'s canonical form; prints one line counting the
  arrays of an ``.npz`` outside its image tower (a trainer checkpoint's optimizer, a text tower)."""
  path = pathlib.Path(config.path)
  if sources.is_weights_path(path):
    source = sources.read_weights(path, config.get('arch', ''))
    print(f'init_from {path}: {source.source} weights ({source.arch or "transformers"})', flush=True)
    return source.canonical
  if path.is_dir():
    return checkpoint_npz.to_canonical(_workdir_arrays(path, config.checkpoint))
  arrays = checkpoint_npz.read_npz(path)
  ignored = checkpoint_npz.ignored_summary(arrays)
  if ignored:
    print(f'init_from {path}: {ignored}', flush=True)
  return checkpoint_npz.to_canonical(arrays)


def _workdir_arrays(workdir: pathlib.Path, checkpoint: str) -> dict[str, np.ndarray]:
  from trainer.evaluation import restore_checkpoint  # pylint: disable=g-import-not-at-top  (import cycle)

  which = int(checkpoint) if str(checkpoint).isdigit() else checkpoint
  _, parts, params, _ = restore_checkpoint(workdir, which, read_data=False)
  return checkpoint_npz.model_to_official(parts.merge(params))


def load_into(model, config: ml_collections.ConfigDict, canonical: dict[str, np.ndarray]) -> str:
  """Writes the source into ``model``; returns a one-line summary of what was loaded and adapted."""
  report = checkpoint_npz.canonical_to_model(
    model,
    canonical,
    strict=config.strict,
    init_head=config.init_head,
    resample_method=resample_method(config),
  )
  return f'init_from {config.path}: {report.summary()}'


def resample_method(config: ml_collections.ConfigDict) -> str:
  """``config.resample``, or where it is unset the method of the source's own library."""
  if config.resample:
    return config.resample
  library = _weights_library(pathlib.Path(config.path), config.get('arch', ''))
  return SOURCE_RESAMPLE[library] if library else 'bilinear'


def _weights_library(path: pathlib.Path, arch: str) -> str | None:
  """'timm' or 'transformers' for weights ``vit.weights.sources`` reads, None for an ``.npz`` or a workdir."""
  if not sources.is_weights_path(path):
    return None
  if path.is_file() or arch:
    return 'timm'
  declared = json.loads((path / 'config.json').read_text()) if (path / 'config.json').is_file() else {}
  return 'transformers' if 'model_type' in declared and 'architecture' not in declared else 'timm'
