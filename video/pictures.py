"""The video family's pictures of one trained model (``VideoReporting.draw_pictures``).

``video_attention_<run>.png``, for the first evaluation clip: its frames; the last layer's
spatial attention in each frame (what the class token, or the average query, attends to among
the frame's patches, heads averaged); the temporal attention between frames (heads and patch
positions averaged); and the attention rollout (Abnar & Zuidema 2020) over all space-time
tokens, shown as each patch's share of the output in each frame.

For the rollout every layout's attention is written as one dense matrix over the tokens
(time-major, a class-token column per frame where the layout has one): a temporal or spatial
sublayer attends within its axis, ``factorised_dot_product`` mixes both halves equally, and
``factorised_encoder`` rolls out its spatial encoder per frame and its temporal encoder over
the frames.
"""

import pathlib

import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from attention import drawing


def draw(model, task, out_dir: pathlib.Path, name: str, title: str) -> list[pathlib.Path]:
  clip, label = drawing.first_eval_example(task, 'clip')
  predicted = int(np.argmax(model(jnp.asarray(clip))[0][0]))
  caption = f'label {label}\npredicted {predicted}'
  return [plot_clip_attention(model, clip, caption, title, out_dir / f'video_attention_{name}.png')]


def plot_clip_attention(
  model, clip: np.ndarray, caption: str, title: str, path: pathlib.Path
) -> pathlib.Path:
  """One model input ``[1, T, H, W, C]``: its frames, the spatial attention in each frame, the temporal
  attention between frames and the rollout (see the module docstring); ``caption`` beside them."""
  _, intermediates = model(jnp.asarray(clip), return_weights=True)
  return drawing.save(clip_attention_figure(model, clip, intermediates, caption, title), path)


def clip_attention_figure(model, clip: np.ndarray, intermediates: dict, caption: str, title: str) -> Figure:
  """The picture of ``plot_clip_attention`` from the model's ``intermediates`` (``return_weights=True``)."""
  layers = [
    {axes: np.asarray(w[0], np.float32) for axes, w in layer.items()}
    for layer in intermediates['attention_weights']
  ]
  steps, rows, cols = intermediates['grid']
  space_map, time_map, rollout = attention_summaries(
    model.attention, layers, steps, rows * cols, model.pool == 'cls'
  )
  figure = Figure(figsize=(1.6 * (steps + 1), 1.6 * 3 + 0.6))
  axes = figure.subplots(3, steps + 1, squeeze=False)
  for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
  for step in range(steps):
    frame = clip[0, step * model.tubelet_embedding.tubelet[0]]
    axes[0, step].imshow(frame[..., 0] if frame.shape[-1] == 1 else _unit(frame), cmap='gray')
    axes[0, step].set_title(f'frame {step}', fontsize=8)
    axes[1, step].imshow(space_map[step].reshape(rows, cols), cmap='inferno', interpolation='nearest')
    axes[2, step].imshow(
      rollout[step].reshape(rows, cols), cmap='inferno', interpolation='nearest', vmin=0, vmax=rollout.max()
    )
  axes[0, steps].axis('off')
  axes[0, steps].text(0, 0.5, caption, fontsize=8)
  axes[1, steps].imshow(time_map, cmap='inferno', interpolation='nearest')
  axes[1, steps].set_title('time: query x key frame', fontsize=7)
  axes[2, steps].axis('off')
  axes[1, 0].set_ylabel('spatial (last layer)', fontsize=8)
  axes[2, 0].set_ylabel('rollout', fontsize=8)
  figure.suptitle(f'{title}: {model.attention} attention', fontsize=10)
  return figure


def attention_summaries(layout: str, layers: list[dict], steps: int, patches: int, has_cls: bool):
  """(spatial ``[steps, patches]`` of the last layer, temporal ``[steps, steps]``, rollout ``[steps, patches]``)."""
  prefix = 1 if has_cls else 0
  if layout == 'spacetime':
    last = layers[-1]['spacetime'].mean(0)
    tokens = last[prefix:, prefix:].reshape(steps, patches, steps, patches)
    if has_cls:
      space = last[0, prefix:].reshape(steps, patches)
    else:
      space = np.stack([tokens[t, :, t].mean(0) for t in range(steps)])
    time = tokens.sum(axis=(1, 3)) / patches
    matrices = [layer['spacetime'] for layer in layers]
    rollout = drawing.attention_rollout(matrices)[-1]
    output = rollout[0] if has_cls else rollout.mean(0)
    return space, time, output[prefix:].reshape(steps, patches)
  if layout == 'factorised_encoder':
    spatial = [layer['space'] for layer in layers if 'space' in layer]  # [steps, heads, S, S]
    temporal = [layer['frames'] for layer in layers if 'frames' in layer]
    space = np.stack([_reader(spatial[-1][t].mean(0), prefix) for t in range(steps)])
    time = temporal[-1].mean(0)[prefix:, prefix:] if temporal else np.eye(steps)
    per_frame = np.stack(
      [_reader(drawing.attention_rollout([w[t] for w in spatial])[-1], prefix) for t in range(steps)]
    )
    frames = (
      _reader(drawing.attention_rollout(temporal)[-1], prefix) if temporal else np.full(steps, 1 / steps)
    )
    return space, time, per_frame * frames[:, None]
  # divided and factorised_dot_product: a class column per frame
  width = prefix + patches
  space = np.stack([_reader(layers[-1]['space'][t].mean(0), prefix) for t in range(steps)])
  time = layers[-1]['time'].mean(axis=(0, 1))
  matrices = []
  for layer in layers:
    space_dense, time_dense = (
      _dense_space(layer['space'], steps, width),
      _dense_time(layer['time'], steps, width),
    )
    if layout == 'divided':
      matrices += [time_dense[None], space_dense[None]]
    else:
      matrices.append((0.5 * (space_dense + time_dense))[None])
  rollout = drawing.attention_rollout(matrices)[-1].reshape(steps, width, steps, width)
  output = rollout[:, 0].mean(0) if has_cls else rollout.mean(axis=(0, 1))  # [steps, width]
  return space, time, output[:, prefix:]


def _reader(matrix: np.ndarray, prefix: int) -> np.ndarray:
  """The class token's row without the prefix, or the average query's."""
  return matrix[0, prefix:] if prefix else matrix.mean(0)


def _dense_space(weights: np.ndarray, steps: int, width: int) -> np.ndarray:
  """``[steps, heads, S, S]`` -> ``[steps * S, steps * S]`` (heads averaged), block-diagonal over frames."""
  dense = np.zeros((steps * width, steps * width))
  for t in range(steps):
    dense[t * width : (t + 1) * width, t * width : (t + 1) * width] = weights[t].mean(0)
  return dense


def _dense_time(weights: np.ndarray, steps: int, width: int) -> np.ndarray:
  """``[S, heads, T, T]`` -> ``[steps * S, steps * S]``: each position attends to itself in other frames."""
  dense = np.zeros((steps, width, steps, width))
  mean = weights.mean(1)
  for position in range(width):
    dense[:, position, :, position] = mean[position]
  return dense.reshape(steps * width, steps * width)


def _unit(frame: np.ndarray) -> np.ndarray:
  return (frame - frame.min()) / max(float(frame.max() - frame.min()), 1e-12)
