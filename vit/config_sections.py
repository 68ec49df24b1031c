"""The ViT family's config sections and their defaults (``ImageClassification.config_sections``).

``data`` (``vit.input_pipeline`` says what each field does) with its ``augment`` section, and the
optional ``init_from`` (``vit.pretrained``), ``fewshot`` and ``distill`` (``vit.distillation``)
sections, which stay absent unless a config writes them. The ``model`` section's defaults are
``vit.model``'s, completed from the weights ``init_from`` names.
"""

import dataclasses
from typing import Literal

from trainer.config_sections import optional, section_reader


@dataclasses.dataclass(frozen=True)
class Augment:
  crop_padding: int = 0  #: pad by this many pixels, then crop a random window (0 = off)
  crop_pad_mode: Literal['reflect', 'constant'] = 'reflect'
  flip: bool = False
  randaugment_layers: int = 0  #: RandAugment ops per image (0 = off)
  randaugment_magnitude: int = 10
  mixup_alpha: float = 0.0
  crop_scale: tuple | None = None  #: random resized crop's area fraction; None = off
  crop_ratio: tuple = (3 / 4, 4 / 3)
  cutmix_alpha: float = 0.0  #: CutMix; with mixup too, mix_switch_prob picks per row
  mix_switch_prob: float = 0.5
  erase_prob: float = 0.0  #: random erasing (timm's default when on: 0.25)
  repeats: int = 1  #: repeated augmentation (DeiT: 3)


@dataclasses.dataclass(frozen=True)
class ImageData:
  source: Literal['digits', 'tfds', 'folder', 'idx', 'records'] = 'digits'
  name: str | None = None
  data_dir: str | None = None
  random_access: bool | None = None
  streaming: bool | None = None
  path: str | None = None
  cache_dir: str | None = None
  image_size: tuple | None = None
  mean: tuple | None = None
  std: tuple | None = None
  prefetch_batches: int = 4
  num_threads: int = 2
  augment: Augment = Augment()


@dataclasses.dataclass(frozen=True)
class InitFrom:
  path: str = ''  #: a checkpoint, .npz or safetensors file to start from ('' = none)
  checkpoint: str | int = 'latest'  #: of a workdir: 'latest', 'best' or a step
  strict: bool = True
  init_head: bool = True
  resample: str = ''  #: how the position table is resampled to another grid; '': as the source's library
  arch: str = ''  #: a bare timm .safetensors: its architecture name


@dataclasses.dataclass(frozen=True)
class FewShot:
  shots: tuple = ()  #: k per class; () = off
  seeds: int = 3
  held_out_per_class: int = 10
  train_examples: int | None = 5000


@dataclasses.dataclass(frozen=True)
class Distill:
  teacher: str = ''  #: a workdir of train.py, a timm or transformers folder or file, or an .npz; '' = off
  checkpoint: str | int = 'latest'
  arch: str = ''  #: a bare timm .safetensors teacher's architecture (e.g. deit_base_patch16_224)
  kind: Literal['soft', 'hard'] = 'soft'  #: soft: T^2 KL at the temperature; hard: the teacher's argmax
  temperature: float = 1.0
  alpha: float = 0.5  #: loss = (1 - alpha) * label loss + alpha * distillation loss


def model_section(section, config=None):
  """The complete ``model`` section: ``vit.model``'s defaults with ``section``'s values over them. Where
  ``config`` (the whole config) starts from timm or Hugging Face weights (``init_from``), the fields the
  file decides first fill those ``section`` leaves unset, in place (``vit.weights.file_options``)."""
  # pylint: disable=g-import-not-at-top  (JAX: not for configs)
  from vit.model import model_section as complete
  from vit.weights.file_options import complete_model_config

  if config is not None and section is not None:
    complete_model_config(section, config.get('init_from'))
  return complete(section)


SECTIONS = {
  'model': model_section,
  'data': section_reader(ImageData, 'data'),
  'init_from': optional(section_reader(InitFrom, 'init_from')),
  'fewshot': optional(section_reader(FewShot, 'fewshot')),
  'distill': optional(section_reader(Distill, 'distill')),
}
