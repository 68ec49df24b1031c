"""Pictures of attention and of position embeddings, shared by every family's pictures, the
ablation plots and the explorer page (``explore``): similarity maps, attention rollout, heat maps,
and a figure saved as a file or rendered to pixels.

Nothing here knows a model family; a task's reporting (``draw_pictures``) composes these into its pictures.
Only what draws imports this module (and matplotlib): the families' ``pictures`` modules, lazily.
Each picture is a function returning a ``Figure`` (``*_figure``), which ``plot_*`` saves.
"""

import contextlib
import pathlib

import numpy as np
from matplotlib import rcParams
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def save(figure: Figure, path: pathlib.Path) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  with path.open('wb') as file:  # a file object: the path may be in a bucket
    figure.savefig(file, format=path.suffix.lstrip('.') or 'png', dpi=110, bbox_inches='tight')
  return path


def first_eval_example(task, feature: str) -> tuple[np.ndarray, int]:
  """The first example of ``task``'s evaluation split that a picture shows: its ``feature`` as a
  batch of one, and its label."""
  config = task.config
  batches = task.eval_batches(
    config.eval_split, batch_size=config.eval_batch_size, process_index=0, process_count=1
  )
  with contextlib.closing(batches):
    batch = next(iter(batches))
  return np.asarray(batch[feature][:1]), int(batch['label'][0])


PIXELS_DPI = 90


def pixels(figure: Figure, tight: bool = True) -> np.ndarray:
  """The figure rendered as uint8 RGB ``[H, W, 3]`` at ``PIXELS_DPI`` (what the explorer page shows);
  ``tight=False`` keeps the figure's own extent, so that its data coordinates map to known pixels.

  One Agg draw, cropped to the drawn artists plus ``savefig.pad_inches`` (what ``savefig``'s
  ``bbox_inches='tight'`` keeps, without its second layout pass and its PNG round trip)."""
  original_dpi = figure.dpi
  figure.set_dpi(PIXELS_DPI)
  try:
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3]
    if tight:
      box = figure.get_tightbbox(canvas.get_renderer()).padded(rcParams['savefig.pad_inches'])
      left, bottom, right, top = np.round(box.extents * PIXELS_DPI).astype(int)
      height = image.shape[0]
      image = image[max(height - top, 0) : height - max(bottom, 0), max(left, 0) : right]
    return image.copy()
  finally:
    figure.set_dpi(original_dpi)


def cosine_similarity(table: np.ndarray) -> np.ndarray:
  """``[positions, dim]`` -> ``[positions, positions]`` cosine similarities of the rows."""
  unit = table / np.maximum(np.linalg.norm(table, axis=-1, keepdims=True), 1e-12)
  return unit @ unit.T


def plot_similarity(
  table: np.ndarray, grid: tuple[int, int] | None, title: str, path: pathlib.Path
) -> pathlib.Path:
  return save(similarity_figure(table, grid, title), path)


def similarity_figure(table: np.ndarray, grid: tuple[int, int] | None, title: str) -> Figure:
  """The cosine similarity of each row of ``table`` to every other.

  Without ``grid``, one matrix; with a ``(height, width)`` grid (rows in row-major order),
  one tile per row laid out on the grid (Dosovitskiy et al. 2021, Figure 7, centre).
  """
  similarity = cosine_similarity(table)
  if grid is None:
    figure = Figure(figsize=(5, 4.3))
    ax = figure.subplots()
    image = ax.imshow(similarity, vmin=-1, vmax=1, cmap='viridis')
    ax.set(xlabel='position', ylabel='position')
    ax.set_title(title, fontsize=10)
    figure.colorbar(image, ax=ax, label='cosine similarity')
    return figure
  height, width = grid
  figure = Figure(figsize=(0.8 * width + 1.6, 0.8 * height + 0.9))
  tiles = figure.subplots(height, width, squeeze=False)
  for row in range(height):
    for column in range(width):
      ax = tiles[row, column]
      image = ax.imshow(
        similarity[row * width + column].reshape(height, width), vmin=-1, vmax=1, cmap='viridis'
      )
      ax.set_xticks([])
      ax.set_yticks([])
      if column == 0:
        ax.set_ylabel(str(row + 1), rotation=0, ha='right', va='center', fontsize=8)
      if row == height - 1:
        ax.set_xlabel(str(column + 1), fontsize=8)
  figure.supxlabel('input patch column', fontsize=10)
  figure.supylabel('input patch row', fontsize=10)
  figure.suptitle(title, fontsize=10)
  figure.colorbar(image, ax=tiles, shrink=0.8, label='cosine similarity')
  return figure


def attention_rollout(weights: list[np.ndarray]) -> list[np.ndarray]:
  """Abnar & Zuidema (2020): per layer ``[heads, T, T]`` -> the rollout ``[T, T]`` up to each layer.

  Each layer's weights are averaged over heads, the identity is added for the residual path,
  rows are renormalised, and the layers are multiplied from the first up.
  """
  rollout, result = None, []
  for layer in weights:
    mixed = layer.mean(axis=0) + np.eye(layer.shape[-1])
    mixed = mixed / mixed.sum(axis=-1, keepdims=True)
    rollout = mixed if rollout is None else mixed @ rollout
    result.append(rollout)
  return result


def plot_token_attention(
  layers: list[np.ndarray],
  columns: list[str],
  rows: list[str],
  title: str,
  path: pathlib.Path,
  *,
  xlabel: str,
  ylabel: str,
) -> pathlib.Path:
  return save(token_attention_figure(layers, columns, rows, title, xlabel=xlabel, ylabel=ylabel), path)


def token_attention_figure(
  layers: list[np.ndarray],
  columns: list[str],
  rows: list[str],
  title: str,
  *,
  xlabel: str,
  ylabel: str,
  headings: list[str] | None = None,
) -> Figure:
  """One heat map per panel (by default one per layer, heads averaged), ``[len(rows), len(columns)]``
  each, on one colour scale, labelled by token; ``headings`` names the panels otherwise."""
  headings = headings or [f'layer {layer + 1} (mean of heads)' for layer in range(len(layers))]
  panel = (0.8 + 0.22 * len(columns), 0.8 + 0.22 * len(rows))
  figure = Figure(figsize=(panel[0] * len(layers) + 2.0, panel[1] + 1.2), layout='constrained')
  axes = figure.subplots(1, len(layers), squeeze=False, sharey=True)
  top = max(float(weights.max()) for weights in layers)
  for layer, (ax, weights) in enumerate(zip(axes[0], layers)):
    image = ax.imshow(weights, cmap='viridis', vmin=0, vmax=top, aspect='auto')
    ax.set_xticks(range(len(columns)), columns, rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.tick_params(axis='y', labelleft=layer == 0)
    ax.set_title(headings[layer], fontsize=8)
    ax.set_xlabel(xlabel)
  axes[0, 0].set_ylabel(ylabel)
  figure.colorbar(image, ax=axes[0].tolist(), shrink=min(0.8, 4.0 / panel[1]), label='attention weight')
  figure.suptitle(title, fontsize=8)
  return figure
