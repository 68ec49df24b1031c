"""Training-time augmentation of uint8 image batches: random resized crop, random crop, flip,
RandAugment; the settings and random draws of random erasing, mixup and CutMix (done on float
pixels by ``vit.batch_augmentation``) and of repeated augmentation (done by the sampler).

The randomness for a whole global batch is drawn at once (`Augmentation.draw`); `apply`
then augments any subset of its rows with their share of that draw. So each process
augments only its own rows and still gets exactly the pixels a single process would.

The random resized crop ("Inception crop", Szegedy et al. 2015) takes a window of a random
area fraction in `crop_scale` and aspect ratio (width / height, log-uniform) in `crop_ratio`
and resizes it to the image size: up to 10 candidate (area, ratio) pairs are drawn per row, the
first that fits the image is used, else a central crop of the whole image at the nearest
allowed ratio. The draw does not depend on the image size, so a disk-backed source can crop
its stored, larger image before resizing (`crop_box`) and an in-memory one crops its
resized image; both see the same fractions.

Crop and flip are numpy over the batch (no per-pixel Python). RandAugment (Cubuk et al.
2019) applies `randaugment_layers` ops, each picked uniformly from `RANDAUGMENT_OPS`, per
image with PIL. Its magnitude runs 0..30; 10 is the usual strength (rotate 30 degrees,
shear 0.3, translate 45% of the side, enhance factor 1 +- 0.9, posterize to 4 bits,
solarize above 128) and other values scale those linearly, as in big_vision. Mixup itself
is done by the input pipeline on float pixels, using `mix_partner` and the drawn `mix_weight`;
each row's partner is the row at the mirrored place of the global batch, row `B - 1 - i`, as timm
pairs a batch with its flip (`x.flip(0)`), so no row is its own partner (an even batch size, and
with `repeats` a multiple of twice it, so that no row is paired with a copy of itself). So are
CutMix (`cutmix_alpha`, `mix_switch_prob`) and random erasing (`erase_prob`), see
`vit.batch_augmentation`. Repeated augmentation (`repeats`, Hoffer et al. 2020) puts each
example `repeats` times in a global batch, each copy augmented by its own row's draws
(`pipelines.steps.repeated_example_ids`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import ml_collections
import numpy as np
from PIL import Image, ImageEnhance, ImageOps

from trainer.errors import ConfigError
from vit.batch_augmentation import ERASE_AREA, ERASE_RATIO, ERASE_TRIES, cutmix_box, erase_box

_GREY = 128
_CROP_TRIES = 10
_BILINEAR = Image.Resampling.BILINEAR


def _grey(image: Image.Image) -> tuple[int, ...]:
  return (_GREY,) * len(image.getbands())


def _affine(image: Image.Image, coefficients: tuple[float, ...]) -> Image.Image:
  return image.transform(
    image.size,
    Image.Transform.AFFINE,
    coefficients,
    resample=_BILINEAR,
    fillcolor=_grey(image),
  )


def _enhance(enhancer: type) -> Callable:
  return lambda image, level, sign: enhancer(image).enhance(max(0.0, 1 + sign * 0.9 * level))


# Each op takes (PIL image, level = magnitude / 10, random sign +1 or -1).
RANDAUGMENT_OPS = {
  'identity': lambda image, level, sign: image,
  'auto_contrast': lambda image, level, sign: ImageOps.autocontrast(image),
  'equalize': lambda image, level, sign: ImageOps.equalize(image),
  'rotate': lambda image, level, sign: image.rotate(
    sign * 30 * level, resample=_BILINEAR, fillcolor=_grey(image)
  ),
  'solarize': lambda image, level, sign: ImageOps.solarize(image, threshold=int(256 - 128 * min(level, 2.0))),
  'posterize': lambda image, level, sign: ImageOps.posterize(image, max(1, 8 - int(4 * level))),
  'color': _enhance(ImageEnhance.Color),
  'contrast': _enhance(ImageEnhance.Contrast),
  'brightness': _enhance(ImageEnhance.Brightness),
  'sharpness': _enhance(ImageEnhance.Sharpness),
  'shear_x': lambda image, level, sign: _affine(image, (1, sign * 0.3 * level, 0, 0, 1, 0)),
  'shear_y': lambda image, level, sign: _affine(image, (1, 0, 0, sign * 0.3 * level, 1, 0)),
  'translate_x': lambda image, level, sign: _affine(
    image, (1, 0, sign * 0.45 * level * image.width, 0, 1, 0)
  ),
  'translate_y': lambda image, level, sign: _affine(
    image, (1, 0, 0, 0, 1, sign * 0.45 * level * image.height)
  ),
}
_OP_FUNCTIONS = tuple(RANDAUGMENT_OPS.values())


def check_mixing_batch(batch_size: int, augment) -> None:
  """A ``ConfigError`` unless mixup's and CutMix's pairing of row ``i`` with row ``batch_size - 1 - i``
  pairs every row with another example: an even batch size, and with ``repeats`` (copies
  ``batch_size / repeats`` rows apart) a multiple of ``2 * repeats``."""
  alphas = (augment.get('mixup_alpha', 0.0), augment.get('cutmix_alpha', 0.0))
  repeats = augment.get('repeats', 1)
  if not all(isinstance(a, (int, float)) for a in alphas) or max(alphas) <= 0 or not isinstance(repeats, int):
    return
  multiple = 2 * max(repeats, 1)
  if batch_size % multiple:
    because = (
      f' and data.augment.repeats {repeats} puts copies {batch_size // repeats} rows apart'
      if repeats > 1
      else ''
    )
    raise ConfigError(
      f'batch_size ({batch_size}) must be a multiple of {multiple}: mixup and CutMix mix row i with row '
      f"batch_size - 1 - i (timm's flipped batch){because}, so that no row is mixed with its own example."
    )


@dataclasses.dataclass(frozen=True)
class AugmentationDraw:
  """Random choices for every row of one global batch; None where that part is off."""

  crop_offsets: np.ndarray | None = None  # int [B, 2]: top and left of the crop
  flips: np.ndarray | None = None  # bool [B]
  randaugment_ops: np.ndarray | None = None  # int [B, layers]: indices into the ops
  randaugment_signs: np.ndarray | None = None  # +1/-1 [B, layers]
  mix_partner: np.ndarray | None = None  # int [B]: each row's partner, B - 1 - row (timm's flip)
  mix_weight: np.ndarray | None = None  # float32 [B]: the weight of a row's own image
  crop_areas: np.ndarray | None = None  # float [B, 10]: candidate area fractions
  crop_log_ratios: np.ndarray | None = None  # float [B, 10]: candidate log(width / height)
  crop_positions: np.ndarray | None = None  # float [B, 2] in [0, 1): top and left of the window
  cutmix_rows: np.ndarray | None = None  # bool [B]: the rows mixed by CutMix (the others by mixup)
  cutmix_lam: np.ndarray | None = None  # float [B]: CutMix's Beta draw, before the box is clipped
  cutmix_centres: np.ndarray | None = None  # float [B, 2] in [0, 1): the box centre
  erase_rows: np.ndarray | None = None  # bool [B]: the rows random erasing tries to erase
  erase_areas: np.ndarray | None = None  # float [B, 10]: candidate area fractions
  erase_log_ratios: np.ndarray | None = None  # float [B, 10]: candidate log(height / width)
  erase_positions: np.ndarray | None = None  # float [B, 2] in [0, 1): top and left of the box
  erase_seeds: np.ndarray | None = None  # int [B]: each row's stream of erasing values


@dataclasses.dataclass(frozen=True)
class Augmentation:
  """The training augmentation settings: the data config's `augment` fields."""

  crop_padding: int = 0
  crop_pad_mode: str = 'reflect'
  flip: bool = False
  randaugment_layers: int = 0
  randaugment_magnitude: int = 10
  mixup_alpha: float = 0.0
  crop_scale: tuple[float, float] | None = None
  crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
  cutmix_alpha: float = 0.0
  mix_switch_prob: float = 0.5
  erase_prob: float = 0.0
  repeats: int = 1

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> Augmentation:
    augmentation = cls(
      crop_padding=int(config.crop_padding),
      crop_pad_mode=config.crop_pad_mode,
      flip=bool(config.flip),
      randaugment_layers=int(config.randaugment_layers),
      randaugment_magnitude=int(config.randaugment_magnitude),
      mixup_alpha=float(config.mixup_alpha),
      crop_scale=None if config.crop_scale is None else tuple(float(value) for value in config.crop_scale),
      crop_ratio=tuple(float(value) for value in config.crop_ratio),
      cutmix_alpha=_number(config, 'cutmix_alpha'),
      mix_switch_prob=_number(config, 'mix_switch_prob'),
      erase_prob=_number(config, 'erase_prob'),
      repeats=config.repeats,
    )
    if augmentation.crop_scale is not None and augmentation.crop_padding:
      raise ConfigError('augment.crop_scale and augment.crop_padding are two kinds of crop; set only one')
    if augmentation.crop_scale is not None and (
      len(augmentation.crop_scale) != 2
      or not 0 < augmentation.crop_scale[0] <= augmentation.crop_scale[1] <= 1
    ):
      raise ConfigError(
        f'augment.crop_scale must be (low, high) with 0 < low <= high <= 1, got {config.crop_scale}'
      )
    if len(augmentation.crop_ratio) != 2 or not 0 < augmentation.crop_ratio[0] <= augmentation.crop_ratio[1]:
      raise ConfigError(
        f'augment.crop_ratio must be (low, high) with 0 < low <= high, got {config.crop_ratio}'
      )
    if augmentation.crop_padding < 0:
      raise ConfigError(f'augment.crop_padding must be >= 0, got {config.crop_padding}')
    if augmentation.crop_pad_mode not in ('reflect', 'constant'):
      raise ConfigError(
        f"augment.crop_pad_mode must be 'reflect' or 'constant', got {config.crop_pad_mode!r}"
      )
    if augmentation.randaugment_layers < 0:
      raise ConfigError(f'augment.randaugment_layers must be >= 0, got {config.randaugment_layers}')
    if not 0 <= augmentation.randaugment_magnitude <= 30:
      raise ConfigError(f'augment.randaugment_magnitude must be in 0..30, got {config.randaugment_magnitude}')
    if augmentation.mixup_alpha < 0:
      raise ConfigError(f'augment.mixup_alpha must be >= 0, got {config.mixup_alpha}')
    if augmentation.cutmix_alpha < 0:
      raise ConfigError(f'augment.cutmix_alpha must be >= 0 (0 = off), got {config.cutmix_alpha}')
    if not 0 <= augmentation.mix_switch_prob <= 1:
      raise ConfigError(f'augment.mix_switch_prob must be in [0, 1], got {config.mix_switch_prob}')
    if not 0 <= augmentation.erase_prob <= 1:
      raise ConfigError(f'augment.erase_prob must be in [0, 1] (0 = off), got {config.erase_prob}')
    if isinstance(augmentation.repeats, bool) or not isinstance(augmentation.repeats, int):
      raise ConfigError(f'augment.repeats must be an integer >= 1 (1 = off), got {config.repeats!r}')
    if augmentation.repeats < 1:
      raise ConfigError(f'augment.repeats must be >= 1 (1 = off), got {config.repeats}')
    return augmentation

  @property
  def mixup(self) -> bool:
    return self.mixup_alpha > 0

  @property
  def cutmix(self) -> bool:
    return self.cutmix_alpha > 0

  @property
  def mixes(self) -> bool:
    """Whether each row is mixed with a partner (mixup, CutMix or both)."""
    return self.mixup or self.cutmix

  def draw(self, rng: np.random.Generator, batch_size: int) -> AugmentationDraw:
    """Draws the random choices for a global batch, always in the same order."""
    choices = {}
    if self.crop_padding:
      choices['crop_offsets'] = rng.integers(0, 2 * self.crop_padding + 1, (batch_size, 2))
    if self.flip:
      choices['flips'] = rng.random(batch_size) < 0.5
    if self.randaugment_layers:
      shape = (batch_size, self.randaugment_layers)
      choices['randaugment_ops'] = rng.integers(0, len(_OP_FUNCTIONS), shape)
      choices['randaugment_signs'] = np.where(rng.random(shape) < 0.5, -1, 1)
    if self.mixes:
      if batch_size % 2:
        raise ValueError(
          f'mixup and CutMix pair the rows of a batch two by two; batch size {batch_size} is odd'
        )
      choices['mix_partner'] = np.arange(batch_size)[::-1].copy()
    if self.mixup:
      choices['mix_weight'] = rng.beta(self.mixup_alpha, self.mixup_alpha, batch_size)
      choices['mix_weight'] = choices['mix_weight'].astype(np.float32)
    if self.crop_scale is not None:  # drawn after the older draws: those stay as they were without it
      choices['crop_areas'] = rng.uniform(*self.crop_scale, (batch_size, _CROP_TRIES))
      choices['crop_log_ratios'] = rng.uniform(*np.log(self.crop_ratio), (batch_size, _CROP_TRIES))
      choices['crop_positions'] = rng.random((batch_size, 2))
    if self.cutmix:
      switch = rng.random(batch_size) < self.mix_switch_prob
      choices['cutmix_rows'] = switch if self.mixup else np.ones(batch_size, bool)
      choices['cutmix_lam'] = rng.beta(self.cutmix_alpha, self.cutmix_alpha, batch_size)
      choices['cutmix_centres'] = rng.random((batch_size, 2))
      if not self.mixup:
        choices['mix_weight'] = np.ones(batch_size, np.float32)  # replaced by each box's weight
    if self.erase_prob:
      choices['erase_rows'] = rng.random(batch_size) < self.erase_prob
      choices['erase_areas'] = rng.uniform(*ERASE_AREA, (batch_size, ERASE_TRIES))
      choices['erase_log_ratios'] = rng.uniform(*np.log(ERASE_RATIO), (batch_size, ERASE_TRIES))
      choices['erase_positions'] = rng.random((batch_size, 2))
      choices['erase_seeds'] = rng.integers(0, 2**63 - 1, batch_size)
    return AugmentationDraw(**choices)

  def cutmix_boxes(self, draw: AugmentationDraw, rows: np.ndarray, height: int, width: int) -> list:
    """CutMix's (top, bottom, left, right) box for each global row of ``rows``; None for mixup's rows."""
    if draw.cutmix_rows is None:
      return [None] * len(rows)
    return [
      cutmix_box(draw.cutmix_lam[row], draw.cutmix_centres[row], height, width)
      if draw.cutmix_rows[row]
      else None
      for row in rows
    ]

  def erase_boxes(self, draw: AugmentationDraw, rows: np.ndarray, height: int, width: int) -> list:
    """Random erasing's (top, left, height, width) box for each global row of ``rows``; None: not erased."""
    if draw.erase_rows is None:
      return [None] * len(rows)
    return [
      erase_box(draw.erase_areas[row], draw.erase_log_ratios[row], draw.erase_positions[row], height, width)
      if draw.erase_rows[row]
      else None
      for row in rows
    ]

  def crop_box(self, draw: AugmentationDraw, row: int, height: int, width: int) -> tuple[int, int, int, int]:
    """The random resized crop's window (left, top, right, bottom) for global `row` in an image of this size."""
    for area_fraction, log_ratio in zip(draw.crop_areas[row], draw.crop_log_ratios[row]):
      area, ratio = area_fraction * height * width, np.exp(log_ratio)
      crop_width, crop_height = round(np.sqrt(area * ratio)), round(np.sqrt(area / ratio))
      if 0 < crop_width <= width and 0 < crop_height <= height:
        break
    else:  # no candidate fits: the whole image, cut to the nearest allowed ratio
      ratio = np.clip(width / height, *self.crop_ratio)
      crop_width, crop_height = min(width, round(height * ratio)), min(height, round(width / ratio))
    top_fraction, left_fraction = draw.crop_positions[row]
    top = int(top_fraction * (height - crop_height + 1))
    left = int(left_fraction * (width - crop_width + 1))
    return left, top, left + crop_width, top + crop_height

  def apply(
    self, images: np.ndarray, draw: AugmentationDraw, rows: np.ndarray, *, decoded_with_crop: bool = False
  ) -> np.ndarray:
    """Crops, flips and RandAugments uint8 images [n, H, W, C], which are global `rows`
    (`decoded_with_crop`: the source did the random resized crop and the flip while decoding)."""
    if draw.crop_areas is not None and not decoded_with_crop:
      images = np.stack([self.resized_crop(image, draw, row) for image, row in zip(images, rows)])
    if draw.crop_offsets is not None:
      images = random_crop(images, draw.crop_offsets[rows], self.crop_padding, self.crop_pad_mode)
    if draw.flips is not None and not decoded_with_crop:
      images = horizontal_flip(images, draw.flips[rows])
    if draw.randaugment_ops is not None:
      images = np.stack(
        [
          randaugment(image, ops, signs, self.randaugment_magnitude)
          for image, ops, signs in zip(images, draw.randaugment_ops[rows], draw.randaugment_signs[rows])
        ]
      )
    return images

  def resized_crop(self, image: np.ndarray, draw: AugmentationDraw, row: int) -> np.ndarray:
    """The random resized crop of one uint8 [H, W, C] image, resized back to [H, W]."""
    height, width = image.shape[:2]
    pil_image = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image)
    box = self.crop_box(draw, row, height, width)
    resized = np.asarray(pil_image.resize((width, height), _BILINEAR, box=box))
    return resized[..., None] if resized.ndim == 2 else resized


def _number(config: ml_collections.ConfigDict, field: str) -> float:
  value = config[field]
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
    raise ConfigError(f'augment.{field} must be a number, got {value!r}')
  return float(value)


def random_crop(images: np.ndarray, offsets: np.ndarray, padding: int, mode: str) -> np.ndarray:
  """Pads [n, H, W, C] images by `padding` and crops [H, W] windows at (top, left) offsets."""
  height, width = images.shape[1:3]
  pad = (padding, padding)
  padded = np.pad(images, ((0, 0), pad, pad, (0, 0)), mode=mode)
  cropped = np.empty_like(images)
  # A loop of contiguous row copies beats one fancy-index gather of 3-byte pixels.
  for index, (top, left) in enumerate(offsets):
    cropped[index] = padded[index, top : top + height, left : left + width]
  return cropped


def horizontal_flip(images: np.ndarray, flips: np.ndarray) -> np.ndarray:
  """Mirrors the [n, H, W, C] images whose entry in the boolean `flips` [n] is set."""
  flipped = images.copy()
  flipped[flips] = images[flips, :, ::-1]
  return flipped


def randaugment(image: np.ndarray, ops: np.ndarray, signs: np.ndarray, magnitude: int) -> np.ndarray:
  """Applies the RandAugment ops `ops` (indices) in turn to one uint8 [H, W, C] image."""
  pil_image = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image)
  for op, sign in zip(ops, signs):
    pil_image = _OP_FUNCTIONS[op](pil_image, magnitude / 10, sign)
  augmented = np.asarray(pil_image)
  return augmented[..., None] if augmented.ndim == 2 else augmented
