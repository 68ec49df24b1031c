"""Where a ViT's initial parameters come from: ``config.init_from`` (an ``.npz`` or a workdir of ours).

Fields: ``path`` (an ``.npz`` in the official or big_vision layout, see ``vit.checkpoint_npz``,
or a workdir written by ``train.py``; '' trains from scratch), ``checkpoint`` (for a workdir:
'latest', 'best' or a step), ``strict`` (False lists missing, left-over and wrong-shape keys
instead of failing), ``init_head`` (False: a zero head even when the class count matches),
``resample`` (for a learned position table of another grid: 'bilinear', the default, or 'bicubic',
both ``jax.image.resize``, which antialiases when shrinking; or 'scipy_zoom', the original ViT
code's and big_vision's ``scipy.ndimage.zoom(order=1)``; see ``attention.resample``).
A workdir's model is read through the same official layout that ``vit.export_npz`` writes.
"""

import pathlib

import ml_collections
import numpy as np

from attention.resample import RESAMPLE_METHODS
from trainer.errors import ConfigError
from vit import checkpoint_npz


def default_init_from_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(
    dict(path='', checkpoint='latest', strict=True, init_head=True, resample='bilinear')
  )


def check_init_from(config: ml_collections.ConfigDict | None) -> None:
  if config is None:
    return
  if config.resample not in RESAMPLE_METHODS:
    raise ConfigError(
      f'config.init_from.resample is {config.resample!r}; allowed values: {", ".join(RESAMPLE_METHODS)}.'
    )


def read_canonical(config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
  """The source's arrays in ``checkpoint_npz``'s canonical form; prints one line counting the
  arrays of an ``.npz`` outside its image tower (a trainer checkpoint's optimizer, a text tower)."""
  path = pathlib.Path(config.path)
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
    model, canonical, strict=config.strict, init_head=config.init_head, resample_method=config.resample
  )
  return f'init_from {config.path}: {report.summary()}'
