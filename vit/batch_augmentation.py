"""Augmentations of a batch's pixels after the per-image ones: random erasing, then mixup or CutMix.

The order is timm's: an image is erased (its own transform) before the batch is mixed.

Random erasing (Zhong et al. 2020, timm's ``RandomErasing`` with ``mode='pixel'``, one box): with
probability ``erase_prob`` a row gets one rectangle of area fraction in [0.02, 1/3] and aspect ratio
(height / width, log-uniform) in [0.3, 1/0.3]; of up to 10 candidates the first strictly smaller than
the image is used (none: nothing is erased), at a uniform position. Its pixels become normal values
N(0, 1) per pixel and channel *after* normalisation; we mix before normalising, so the values are
written in pixel units, ``(value * std + mean) * 255``, which the normalisation maps back to them.

CutMix (Yun et al. 2019, timm's ``rand_bbox``): a row pasted with its partner inside a box of
side fraction ``sqrt(1 - lam)`` centred uniformly on the image and clipped to it, for ``lam`` drawn
from Beta(cutmix_alpha, cutmix_alpha); the label weight of the row's own image is then what the box
left of it, ``1 - box area / image area`` (timm's ``correct_lam``). With mixup on too, each row uses
CutMix with probability ``mix_switch_prob`` (timm's ``switch_prob``, drawn per row as timm's
``mode='elem'``), else mixup.
"""

import numpy as np

ERASE_AREA = (0.02, 1 / 3)
ERASE_RATIO = (0.3, 1 / 0.3)
ERASE_TRIES = 10


def erase_box(
  areas: np.ndarray, log_ratios: np.ndarray, position: np.ndarray, height: int, width: int
) -> tuple[int, int, int, int] | None:
  """(top, left, box height, box width) of the first candidate (``areas``, ``log_ratios``: one per
  try) that fits strictly inside an image of this size, at ``position`` (fractions in [0, 1)); or None."""
  for area_fraction, log_ratio in zip(areas, log_ratios):
    area, ratio = area_fraction * height * width, np.exp(log_ratio)
    box_height, box_width = int(round(np.sqrt(area * ratio))), int(round(np.sqrt(area / ratio)))
    if box_height < height and box_width < width:
      top = int(position[0] * (height - box_height + 1))
      left = int(position[1] * (width - box_width + 1))
      return top, left, box_height, box_width
  return None


def erase_values(seed: int, shape: tuple[int, ...]) -> np.ndarray:
  """The normal values (normalised units) that fill an erased box of ``shape`` [h, w, C]."""
  return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def random_erase(
  images: np.ndarray,
  boxes: list[tuple[int, int, int, int] | None],
  seeds: np.ndarray,
  mean: tuple[float, ...],
  std: tuple[float, ...],
) -> None:
  """Erases ``boxes[i]`` of float32 pixel images [n, H, W, C] in place (None: row left alone)."""
  scale = (np.asarray(std, np.float32) * 255)[None, None]
  shift = (np.asarray(mean, np.float32) * 255)[None, None]
  for image, box, seed in zip(images, boxes, seeds):
    if box is None:
      continue
    top, left, box_height, box_width = box
    values = erase_values(int(seed), (box_height, box_width, image.shape[-1]))
    image[top : top + box_height, left : left + box_width] = values * scale + shift


def cutmix_box(lam: float, centre: np.ndarray, height: int, width: int) -> tuple[int, int, int, int]:
  """(top, bottom, left, right) of the CutMix box for ``lam``, centred at ``centre`` (fractions in
  [0, 1) of height and width), clipped to the image."""
  side = np.sqrt(1.0 - lam)
  cut_height, cut_width = int(height * side), int(width * side)
  centre_y, centre_x = int(centre[0] * height), int(centre[1] * width)
  top, bottom = np.clip([centre_y - cut_height // 2, centre_y + cut_height // 2], 0, height)
  left, right = np.clip([centre_x - cut_width // 2, centre_x + cut_width // 2], 0, width)
  return int(top), int(bottom), int(left), int(right)


def box_weight(box: tuple[int, int, int, int], height: int, width: int) -> float:
  """The label weight of a row's own image after CutMix: the fraction outside the box."""
  top, bottom, left, right = box
  return 1.0 - (bottom - top) * (right - left) / (height * width)


def mix(
  own: np.ndarray, partner: np.ndarray, weights: np.ndarray, cut_boxes: list[tuple[int, int, int, int] | None]
) -> np.ndarray:
  """Float32 images [n, H, W, C]: row i is ``own[i]`` with ``partner[i]`` pasted into ``cut_boxes[i]``
  (CutMix), or where that is None, ``w * own + (1 - w) * partner`` with ``w = weights[i]`` (mixup)."""
  mixed = own.astype(np.float32)
  blend = np.array([box is None for box in cut_boxes])
  if blend.any():  # in place on long rows: float temporaries cost more here than the arithmetic
    rows = mixed[blend].reshape(int(blend.sum()), -1)
    partner_rows = partner[blend].reshape(len(rows), -1)
    rows -= partner_rows
    rows *= weights[blend][:, None]
    rows += partner_rows
    mixed[blend] = rows.reshape(-1, *own.shape[1:])
  for row, box in enumerate(cut_boxes):
    if box is not None:
      top, bottom, left, right = box
      mixed[row, top:bottom, left:right] = partner[row, top:bottom, left:right]
  return mixed
