"""The ViT's pictures of one trained model (``ImageReporting.draw_pictures``).

``attention_<run>.png``          one evaluation image, then per layer and head which patches the
                                 class token attends to (the average query without a class token),
                                 and the attention rollout up to each layer
``posemb_similarity_<run>.png``  for learned tables (``learn1d``, ``learn2d``, ...): the cosine similarity
                                 of each patch's embedding to every other's, one tile per patch laid
                                 out on the patch grid (ViT paper Figure 7, centre)
"""

import pathlib

import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from attention import drawing
from attention.positional import kinds

LEARNED_TABLES = kinds(adds_table=True, learned=True)


def draw(model, task, out_dir: pathlib.Path, name: str, title: str) -> list[pathlib.Path]:
  paths = []
  positional = model.encoder.positional
  if positional.kind in LEARNED_TABLES:
    where = 'encoder, first layer' if len(positional.tables) > 1 else 'encoder'
    paths.append(
      drawing.plot_similarity(
        np.asarray(positional.tables[0](), np.float32),
        model.grid,
        f'{title}: {positional.kind} position embedding similarity ({where})',
        out_dir / f'posemb_similarity_{name}.png',
      )
    )
  image, label = drawing.first_eval_example(task, 'image')
  predicted = int(np.argmax(model(jnp.asarray(image))[0][0]))
  caption = f'label {label}, predicted {predicted}'
  paths.append(plot_attention_maps(model, image, caption, title, out_dir / f'attention_{name}.png'))
  return paths


def patch_map(attention: np.ndarray, grid: tuple[int, int], query: int | None = None) -> np.ndarray:
  """``[T, T]`` -> ``grid``: the row of patch ``query`` (row-major on the grid), or without one the
  class token's row, or without prefix tokens the average query's."""
  num_prefix = attention.shape[-1] - grid[0] * grid[1]
  if query is not None:
    row = attention[num_prefix + query, num_prefix:]
  else:
    row = attention[0, num_prefix:] if num_prefix else attention.mean(axis=0)
  return row.reshape(grid)


def _show_image(ax, image: np.ndarray) -> None:
  image = (image - image.min()) / max(float(image.max() - image.min()), 1e-12)
  if image.shape[-1] == 1:
    ax.imshow(image[..., 0], cmap='gray')
  else:
    ax.imshow(image)


def plot_attention_maps(
  model, image: np.ndarray, caption: str, title: str, path: pathlib.Path
) -> pathlib.Path:
  """One model input ``[1, H, W, C]`` (``caption`` above it), its attention per layer and head, and the rollout."""
  _, intermediates = model(jnp.asarray(image), return_weights=True)
  return drawing.save(attention_figure(attention_arrays(intermediates), image, caption, title), path)


def attention_arrays(intermediates: dict) -> dict:
  """The attention of one input from the model's ``intermediates`` (``return_weights=True``): ``weights``
  (per layer ``[heads, T, T]``), ``grid``, ``rollouts`` (per layer ``[T, T]``) and, with a MAP head,
  ``probe`` (its query's attention ``[T]``, heads averaged)."""
  weights = [np.asarray(layer[0], np.float32) for layer in intermediates['attention_weights']]
  arrays = {
    'weights': weights,
    'grid': tuple(int(side) for side in intermediates['grid']),
    'rollouts': drawing.attention_rollout(weights),
  }
  if 'pool_attention_weights' in intermediates:  # the MAP head's probe, after the last layer
    arrays['probe'] = np.asarray(intermediates['pool_attention_weights'][0], np.float32).mean(axis=0)[0]
  return arrays


def attention_figure(
  arrays: dict, image: np.ndarray, caption: str, title: str, query: int | None = None
) -> Figure:
  """The input ``[1, H, W, C]``, the rollout on it, and per layer and head the attention of the class
  token (the average query without one) to each patch, or of patch ``query`` when given."""
  weights, grid, rollouts = arrays['weights'], arrays['grid'], arrays['rollouts']
  depth, heads = len(weights), weights[0].shape[0]
  figure = Figure(figsize=(1.5 * (heads + 2), 1.5 * (depth + 1) + 0.4))
  axes = figure.subplots(depth + 1, heads + 2, squeeze=False)
  for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
  _show_image(axes[0, 0], image[0])
  axes[0, 0].set_title(caption, fontsize=8)
  _show_image(axes[0, 1], image[0])
  height, width = image.shape[1:3]
  axes[0, 1].imshow(
    patch_map(rollouts[-1], grid, query),
    cmap='inferno',
    alpha=0.6,
    interpolation='nearest',
    extent=(-0.5, width - 0.5, height - 0.5, -0.5),
  )
  axes[0, 1].set_title('rollout on the image', fontsize=8)
  for ax in axes[0, 2:]:
    ax.axis('off')
  if 'probe' in arrays:
    axes[0, 2].axis('on')
    axes[0, 2].imshow(arrays['probe'].reshape(grid), cmap='inferno', interpolation='nearest')
    axes[0, 2].set_title('MAP probe (mean of heads)', fontsize=8)
  for layer in range(depth):
    maps = [weights[layer][head] for head in range(heads)] + [weights[layer].mean(axis=0), rollouts[layer]]
    for column, attention in enumerate(maps):
      axes[layer + 1, column].imshow(
        patch_map(attention, grid, query), cmap='inferno', interpolation='nearest'
      )
    axes[layer + 1, 0].set_ylabel(f'layer {layer + 1}', fontsize=8)
  for column, heading in enumerate(
    [f'head {head + 1}' for head in range(heads)] + ['mean of heads', 'rollout']
  ):
    axes[1, column].set_title(heading, fontsize=8)
  if query is not None:
    reader = f'patch {query} (row {query // grid[1] + 1}, column {query % grid[1] + 1})'
  else:
    reader = 'class token' if weights[0].shape[-1] > grid[0] * grid[1] else 'average query'
  figure.suptitle(
    f'{title}: attention of the {reader} to each patch (each tile scaled to its maximum)', fontsize=10
  )
  return figure
