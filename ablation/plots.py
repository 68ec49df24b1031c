"""Pictures of a sweep, or of one training run, from its saved workdir alone (PNG, matplotlib's Agg).

  python -m ablation.plots --workdir runs/ablation      # a workdir written by ablate.py
  python -m ablation.plots --workdir runs/vit_digits    # or by train.py

Into ``<workdir>/plots/``:
``ablation.png``            the sweep's ``best_metric`` per combination, mean ± std over seeds as
                            bars and error bars, each seed a dot (sweeps only)
``training_curves.png``     training loss and the evaluation's ``best_metric`` against the step,
                            for every run, from ``metrics.jsonl``
and for the first seed of each combination (or the one run), from its latest checkpoint:
``posemb_similarity_<run>.png``  for learned tables (``learn1d``, ``learn2d``): the cosine
                            similarity of each position's embedding to every other's, one tile
                            per patch laid out on the patch grid (ViT paper Figure 7, centre);
                            a plain matrix for 1-D sequences
``attention_<run>.png``     image models: one test image, then per layer and head which patches
                            the class token attends to (the average query without a class
                            token), and the attention rollout up to each layer
``cross_attention_<run>.png``  translators: the decoder's cross-attention (mean over heads) for
                            the first sentence of the evaluation split, greedily translated,
                            one panel per layer: source tokens across, target tokens down
"""

import contextlib
import pathlib
from typing import Any

import jax.numpy as jnp
import matplotlib
import numpy as np
from absl import app, flags
from matplotlib.figure import Figure

from ablation import tables
from trainer import workdir as workdir_lib
from trainer.errors import WorkdirError
from trainer.cli import quiet_library_logs, run_reporting_user_errors
from trainer.evaluation import restore_checkpoint
from trainer.metrics_io import read_metrics

PLOTS_DIR = 'plots'
LEARNED_TABLES = ('learn1d', 'learn2d')


def _scale(metric: str) -> float:
  return 100.0 if metric in tables.PERCENT_METRICS else 1.0


def _metric_label(split: str, metric: str) -> str:
  return f'{split} {metric}' + (' (%)' if metric in tables.PERCENT_METRICS else '')


def _save(figure, path: pathlib.Path) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  figure.savefig(path, dpi=110, bbox_inches='tight')
  return path


# The ablation and the training curves -----------------------------------------------------------

def _short(path: str) -> str:
  return path.rsplit('.', 1)[-1]


def plot_ablation(summary: dict[str, Any], path: pathlib.Path) -> pathlib.Path:
  """Bars (mean), error bars (std) and dots (seeds) of ``best_metric``; rows of the table along x."""
  metric, scale = summary['best_metric'], _scale(summary['best_metric'])
  axes = list(summary['axes'])
  groups = tables.group_runs(summary)
  # Encodings along x; the second axis of a paper-shaped sweep (injection, or SCAN's split) as colours.
  hue_axis = tables.INJECTION if tables.family(summary) == 'vit' else tables.DATA_SPLIT
  if tables.family(summary) in ('vit', 'translator'):
    positions = [(value,) for value in summary['axes'][tables.POSEMB]]
    hues = [(value,) for value in summary['axes'].get(hue_axis, [])] or [()]
    labels = [str(value) for value in summary['axes'][tables.POSEMB]]

    def combination_of(position, hue):  # in the sweep's axis order
      named = {tables.POSEMB: position[0], **({hue_axis: hue[0]} if hue else {})}
      return tuple(named[path] for path in axes)
  else:
    positions, hues = tables.all_combinations(summary), [()]
    labels = ['\n'.join(f'{_short(a)}={v}' for a, v in zip(axes, values)) for values in positions]

    def combination_of(position, hue):
      return position
  width = 0.8 / len(hues)
  figure = Figure(figsize=(max(5.0, 1.2 * len(positions) * max(1, len(hues) / 2)), 4.2))
  ax = figure.subplots()
  colors = matplotlib.colormaps['tab10'].colors
  tops, labelled = [0.0], set()
  for h, hue in enumerate(hues):
    for x, position in enumerate(positions):
      values = combination_of(position, hue)
      center = x - 0.4 + width * (h + 0.5)
      if tables.is_not_applicable(summary, values):
        ax.text(center, 0, 'N/A', ha='center', va='bottom', fontsize=8, rotation=90 if len(hues) > 2 else 0)
        continue
      seeds = [value * scale for value in tables.metric_values(groups.get(values, []), metric)]
      if not seeds:
        continue
      mean, std = tables.mean_std(seeds)
      label = str(hue[0]) if hue and hue not in labelled else None
      labelled.add(hue)
      ax.bar(center, mean, width * 0.9, yerr=std if len(seeds) > 1 else None, capsize=3,
             color=colors[h % len(colors)], label=label)
      ax.scatter([center] * len(seeds), seeds, s=9, color='black', zorder=3)
      ax.text(center, mean + std, f'{mean:.1f}' if scale > 1 else f'{mean:.3g}', ha='center', va='bottom',
              fontsize=8)
      tops.append(mean + std)
  ax.set_xticks(range(len(positions)), labels)
  ax.set_ylim(0, max(tops) * 1.12 or 1.0)
  ax.set_xlabel(tables.POSEMB if tables.family(summary) != 'generic' else 'combination')
  ax.set_ylabel(_metric_label(summary['eval_split'], metric))
  num_seeds = len(summary['seeds'])
  ax.set_title(f'{summary["task"]}: mean ± std over {num_seeds} seed{"s" if num_seeds > 1 else ""}', fontsize=10)
  if hues != [()]:
    ax.legend(title=_short(hue_axis), fontsize=8, title_fontsize=8, loc='upper left',
              bbox_to_anchor=(1.01, 1.0))
  ax.grid(axis='y', alpha=0.3)
  return _save(figure, path)


def _curve(records: list[dict[str, Any]], split: str, metric: str) -> tuple[list[int], list[float]]:
  """Steps and values of ``metric``; a step logged twice (a resumed run) keeps its last record."""
  by_step = {record['step']: record[metric] for record in records
             if record.get('split') == split and metric in record}
  steps = sorted(by_step)
  return steps, [by_step[step] for step in steps]


def plot_training_curves(runs: list[tuple[pathlib.Path, str]], metric: str, split: str,
                         path: pathlib.Path) -> pathlib.Path:
  """``runs``: (workdir, group); the runs of a group (its seeds) share a colour and a legend entry."""
  figure = Figure(figsize=(11, 4))
  loss_ax, metric_ax = figure.subplots(1, 2)
  colors = matplotlib.colormaps['tab10'].colors
  group_index: dict[str, int] = {}
  for workdir, group in runs:
    records = read_metrics(workdir)
    first = group not in group_index
    color = colors[group_index.setdefault(group, len(group_index)) % len(colors)]
    steps, losses = _curve(records, 'train', 'loss')
    loss_ax.plot(steps, losses, color=color, linewidth=1, alpha=0.8, marker='.' if len(steps) < 30 else None,
                 label=group if first else None)
    steps, values = _curve(records, 'eval', metric)
    metric_ax.plot(steps, [value * _scale(metric) for value in values], color=color, linewidth=1, marker='.',
                   alpha=0.8, label=group if first else None)
  loss_ax.set(xlabel='step', ylabel='training loss', title='training loss')
  metric_ax.set(xlabel='step', ylabel=_metric_label(split, metric), title=f'evaluation ({split})')
  for ax in (loss_ax, metric_ax):
    ax.grid(alpha=0.3)
  metric_ax.legend(fontsize=8)
  return _save(figure, path)


# Pictures of one trained model -------------------------------------------------------------------

def cosine_similarity(table: np.ndarray) -> np.ndarray:
  """``[positions, dim]`` -> ``[positions, positions]`` cosine similarities of the rows."""
  unit = table / np.maximum(np.linalg.norm(table, axis=-1, keepdims=True), 1e-12)
  return unit @ unit.T


def learned_table(model) -> tuple[np.ndarray, str] | None:
  """The first learned additive table of the model's encoder ``[positions, D]`` and its kind, or ``None``."""
  positional = getattr(getattr(model, 'encoder', None), 'positional', None)
  if positional is None or positional.kind not in LEARNED_TABLES:
    return None
  return np.asarray(positional.tables[0](), np.float32), positional.kind


def plot_posemb_similarity(table: np.ndarray, grid: tuple[int, int] | None, title: str,
                           path: pathlib.Path) -> pathlib.Path:
  similarity = cosine_similarity(table)
  if grid is None:
    figure = Figure(figsize=(5, 4.3))
    ax = figure.subplots()
    image = ax.imshow(similarity, vmin=-1, vmax=1, cmap='viridis')
    ax.set(xlabel='position', ylabel='position')
    ax.set_title(title, fontsize=10)
    figure.colorbar(image, ax=ax, label='cosine similarity')
    return _save(figure, path)
  height, width = grid
  figure = Figure(figsize=(0.8 * width + 1.6, 0.8 * height + 0.9))
  tiles = figure.subplots(height, width, squeeze=False)
  for row in range(height):
    for column in range(width):
      ax = tiles[row, column]
      image = ax.imshow(similarity[row * width + column].reshape(height, width), vmin=-1, vmax=1, cmap='viridis')
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
  return _save(figure, path)


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


def _patch_map(attention: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
  """``[T, T]`` -> ``grid``: the class token's row, or without prefix tokens the average query's."""
  num_prefix = attention.shape[-1] - grid[0] * grid[1]
  if num_prefix:
    row = attention[0, num_prefix:]
  else:
    row = attention.mean(axis=0)
  return row.reshape(grid)


def _show_image(ax, image: np.ndarray) -> None:
  image = (image - image.min()) / max(float(image.max() - image.min()), 1e-12)
  if image.shape[-1] == 1:
    ax.imshow(image[..., 0], cmap='gray')
  else:
    ax.imshow(image)


def plot_attention_maps(model, task, config, title: str, path: pathlib.Path) -> pathlib.Path:
  """One evaluation image, its attention per layer and head, and the rollout (image models)."""
  batches = task.eval_batches(config.eval_split, batch_size=config.eval_batch_size, process_index=0,
                              process_count=1)
  with contextlib.closing(batches):
    batch = next(iter(batches))
  image, label = np.asarray(batch['image'][:1]), int(batch['label'][0])
  logits, intermediates = model(jnp.asarray(image), return_weights=True)
  weights = [np.asarray(layer[0], np.float32) for layer in intermediates['attention_weights']]
  grid = tuple(intermediates['grid'])
  rollouts = attention_rollout(weights)
  depth, heads = len(weights), weights[0].shape[0]
  figure = Figure(figsize=(1.5 * (heads + 2), 1.5 * (depth + 1) + 0.4))
  axes = figure.subplots(depth + 1, heads + 2, squeeze=False)
  for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
  _show_image(axes[0, 0], image[0])
  axes[0, 0].set_title(f'label {label}, predicted {int(np.argmax(logits[0]))}', fontsize=8)
  _show_image(axes[0, 1], image[0])
  height, width = image.shape[1:3]
  axes[0, 1].imshow(_patch_map(rollouts[-1], grid), cmap='inferno', alpha=0.6, interpolation='nearest',
                    extent=(-0.5, width - 0.5, height - 0.5, -0.5))
  axes[0, 1].set_title('rollout on the image', fontsize=8)
  for ax in axes[0, 2:]:
    ax.axis('off')
  for layer in range(depth):
    maps = [weights[layer][head] for head in range(heads)] + [weights[layer].mean(axis=0), rollouts[layer]]
    for column, attention in enumerate(maps):
      axes[layer + 1, column].imshow(_patch_map(attention, grid), cmap='inferno', interpolation='nearest')
    axes[layer + 1, 0].set_ylabel(f'layer {layer + 1}', fontsize=8)
  for column, name in enumerate([f'head {head + 1}' for head in range(heads)] + ['mean of heads', 'rollout']):
    axes[1, column].set_title(name, fontsize=8)
  reader = 'class token' if weights[0].shape[-1] > grid[0] * grid[1] else 'average query'
  figure.suptitle(f'{title}: attention of the {reader} to each patch (each tile scaled to its maximum)',
                  fontsize=10)
  return _save(figure, path)


def _token_labels(tokenizer, ids: list[int], special: dict[int, str]) -> list[str]:
  return [special.get(token) or tokenizer.decode([token]) or f'#{token}' for token in ids]


def plot_cross_attention(model, task, config, title: str, path: pathlib.Path) -> pathlib.Path:
  """The cross-attention of the first evaluation sentence, greedily translated (translators)."""
  # Imported here: only translator workdirs need the seq2seq package.
  from seq2seq.decoding import translate
  from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
  special = {PAD_ID: '<pad>', UNK_ID: '<unk>', BOS_ID: '<bos>', EOS_ID: '<eos>'}
  source, reference = task.eval_pairs(config.eval_split)[0]
  source_ids = task.source_tokenizer.encode(source)[:config.data.max_source_length]
  source_array = jnp.asarray([source_ids], jnp.int32)
  output = [int(token) for token in np.asarray(
      translate(model, source_array, beam_size=1, max_extra_length=config.decode.max_extra_length))[0]]
  output = output[:output.index(EOS_ID) + 1] if EOS_ID in output else [token for token in output if token]
  decoder_input = jnp.asarray([[BOS_ID] + output[:-1]], jnp.int32)
  _, intermediates = model(source_array, decoder_input, return_weights=True)
  layers = [np.asarray(layer[0], np.float32).mean(axis=0) for layer in intermediates['cross_attention_weights']]
  source_labels = _token_labels(task.source_tokenizer, source_ids, special)
  target_labels = _token_labels(task.target_tokenizer, output, special)
  panel = (0.8 + 0.22 * len(source_labels), 0.8 + 0.22 * len(target_labels))
  figure = Figure(figsize=(panel[0] * len(layers) + 2.0, panel[1] + 1.2), layout='constrained')
  axes = figure.subplots(1, len(layers), squeeze=False, sharey=True)
  top = max(float(weights.max()) for weights in layers)
  for layer, (ax, weights) in enumerate(zip(axes[0], layers)):
    image = ax.imshow(weights, cmap='viridis', vmin=0, vmax=top, aspect='auto')
    ax.set_xticks(range(len(source_labels)), source_labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(target_labels)), target_labels, fontsize=7)
    ax.tick_params(axis='y', labelleft=layer == 0)
    ax.set_title(f'layer {layer + 1} (mean of heads)', fontsize=8)
    ax.set_xlabel('source')
  axes[0, 0].set_ylabel('translation')
  figure.colorbar(image, ax=axes[0].tolist(), shrink=min(0.8, 4.0 / panel[1]), label='attention weight')
  hypothesis = task.target_tokenizer.decode(output)
  figure.suptitle(f'{title}\nreference: {reference}\nhypothesis: {hypothesis}', fontsize=8)
  return _save(figure, path)


def plot_run_pictures(run_dir: pathlib.Path, out_dir: pathlib.Path, name: str) -> list[pathlib.Path]:
  """The pictures of one trained model from its latest checkpoint: learned tables, attention maps."""
  config = workdir_lib.load_config(run_dir)
  task, parts, params, step = restore_checkpoint(run_dir)
  model = parts.merge(params)
  paths = []
  table = learned_table(model)
  if table is not None:
    values, kind = table
    where = 'encoder, first layer' if len(model.encoder.positional.tables) > 1 else 'encoder'
    paths.append(plot_posemb_similarity(values, getattr(model, 'grid', None),
                                        f'{name}, step {step}: {kind} position embedding similarity ({where})',
                                        out_dir / f'posemb_similarity_{name}.png'))
  if config.task.startswith('vit.'):
    paths.append(plot_attention_maps(model, task, config, f'{name}, step {step}', out_dir / f'attention_{name}.png'))
  elif config.task.startswith('seq2seq.'):
    paths.append(plot_cross_attention(model, task, config, f'{name}, step {step}',
                                      out_dir / f'cross_attention_{name}.png'))
  return paths


def plot_workdir(workdir: str | pathlib.Path) -> list[pathlib.Path]:
  """Every picture of an ablation workdir (``results.json``) or a training workdir (``config.json``)."""
  workdir = pathlib.Path(workdir)
  out_dir = workdir / PLOTS_DIR
  if (workdir / tables.RESULTS_JSON).exists():
    summary = tables.read_results(workdir)
    axes = list(summary['axes'])
    runs = [(workdir / run['name'], ','.join(f'{_short(path)}={run["overrides"][path]}' for path in axes))
            for run in summary['runs']]
    paths = [plot_ablation(summary, out_dir / 'ablation.png'),
             plot_training_curves(runs, summary['best_metric'], summary['eval_split'],
                                  out_dir / 'training_curves.png')]
    for group in tables.group_runs(summary).values():
      paths += plot_run_pictures(workdir / group[0]['name'], out_dir, group[0]['name'])
    return paths
  if (workdir / workdir_lib.CONFIG_FILE).exists():
    config = workdir_lib.load_config(workdir)
    paths = [plot_training_curves([(workdir, workdir.name)], config.best_metric, config.eval_split,
                                  out_dir / 'training_curves.png')]
    return paths + plot_run_pictures(workdir, out_dir, workdir.name)
  raise WorkdirError(f'{workdir} has neither {tables.RESULTS_JSON} (written by ablate.py) nor '
                     f'{workdir_lib.CONFIG_FILE} (written by train.py).')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  quiet_library_logs()
  for path in run_reporting_user_errors(plot_workdir, flags.FLAGS.workdir):
    print(path)


if __name__ == '__main__':
  flags.DEFINE_string('workdir', None, 'A workdir written by ablate.py or train.py.')
  flags.mark_flag_as_required('workdir')
  app.run(main)
