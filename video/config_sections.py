"""The video family's config sections and their defaults (``VideoClassification.config_sections``).

``data`` (``video.input_pipeline`` says what each field does) with its ``augment`` section. The
``model`` section's defaults are ``video.model``'s.
"""

import dataclasses
from typing import Literal

from trainer.config_sections import section_reader


@dataclasses.dataclass(frozen=True)
class Augment:
  crop_padding: int = 0
  flip: bool = False


@dataclasses.dataclass(frozen=True)
class VideoData:
  source: Literal['moving_digits', 'folder', 'tfds'] = 'moving_digits'
  digits: Literal['digits', 'mnist'] = 'digits'
  num_frames: int = 8
  frame_size: int = 32
  digit_scale: int = 2
  speed: int = 2
  jitter: int = 4
  clips_per_digit: int = 4
  test_clips_per_digit: int = 2
  clip_seed: int = 0
  path: str | None = None
  name: str | None = None
  data_dir: str | None = None
  augment: Augment = Augment()


def model_section(section, config=None):
  """The complete ``model`` section: ``video.model``'s defaults with ``section``'s values over them."""
  from video.model import model_section as complete  # pylint: disable=g-import-not-at-top  (JAX: not for configs)

  del config  # the section alone decides

  return complete(section)


SECTIONS = {'model': model_section, 'data': section_reader(VideoData, 'data')}
