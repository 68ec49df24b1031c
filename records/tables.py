"""The results tables of docs/results.md, docs/results/*.md, docs/ablations.md and the README, made from the
records: ``python -m records.tables``.

  python -m records.tables          # says which tables differ from the records (exit 1 if any)
  python -m records.tables --write  # rewrites them

A table sits in its page between ``<!-- results table: NAME ... -->`` and ``<!-- end of results table -->``;
everything else on the page is written by hand. ``TABLES`` says, for each table, its columns and its
records (``results/*.json``, records/store.py), one row each. A cell is the record's own text for
that column (``cells``, in which ``{metric}`` and ``{metric:format}`` stand for its numbers, and
``{pattern|mean:format}``, ``{pattern|median:format}``, ``{pattern|sd:format}`` and
``{pattern|each:format}`` for the mean, the median, the sample standard deviation and the list of
the numbers whose names match a pattern with ``*``, such as an ablation's seeds:
``runs.decay=0.0,seed=*.metrics.accuracy``; ``{metric|gib:format}`` and ``{metric|millions:format}``
for a number in GiB of its bytes, or in millions), or, for the columns every record can fill, made from
its fields: ``what``, ``command``, ``time`` (wall and CPU seconds, load), ``machine`` and ``recorded
at`` (commit and date; "transcribed" where the record was copied from the page of before records), and,
for the short lines of the headline page, ``config`` (the ``--config`` file of its command), ``wall time``
(the wall-clock time alone) and ``machine kind`` (the machine in a word: CPU-A, CPU-B, a GPU's name; the
names docs/glossary.md defines).

One command may measure several rows (a chain such as benchmarks/mnist_to_digits.py): its record's
``parts`` maps a part's name to that row's own ``what`` and ``cells``, and a table names the row
``RECORD/PART``.
"""

import argparse
import dataclasses
import difflib
import fnmatch
import pathlib
import re
import statistics
import sys
from typing import Any

from records import store
from records.reproduce import accelerator_names, duration

START = re.compile(r'^<!-- results table: ([\w.-]+)\b.*-->$')
END = '<!-- end of results table -->'
PLACEHOLDER = re.compile(r'\{([\w.\-/=,*]+)(?:\|(\w+))?(?::([^{}]*))?\}')
AGGREGATES = {
  'mean': statistics.mean,
  'median': statistics.median,
  'sd': statistics.stdev,
}
UNITS = {'gib': 2**30, 'millions': 1e6}  # {metric|gib:.2f}: a count of bytes in GiB


@dataclasses.dataclass(frozen=True)
class Table:
  page: str
  columns: tuple[str, ...]
  rows: tuple[str, ...]


STANDARD = ('what', 'command', 'result', 'time', 'machine', 'recorded at')
MULTI30K_DECODINGS = (
  'beam1_alpha0p6',
  'beam4_alpha0p6',
  'beam4_alpha1',
  'beam4_alpha1p4',
)  # choose_decoding's grid
RNN_SCORES = ('none', 'dot', 'scaled_dot', 'cosine', 'additive')  # the parts of the RNN score sweeps' records
VIDEO_LAYOUTS = (
  'spacetime',
  'factorised_encoder',
  'divided',
  'factorised_dot_product',
)  # records video_layouts_digits and video_layouts_one_frame
SCAN_POSEMBS = (
  'none',
  'learn1d',
  'sincos1d',
  'relative',
  'rope',
)  # the parts of the SCAN Table 3 (E) records
CPU_SETTINGS = (  # the rows of the CPU settings table (record cpu_settings_avx512)
  'defaults',
  'micro_batches',
  'eigen',
  'eigen_micro_batches',
  'no_huge_pages',
  'timm',
)
# The rows and columns of the ViT Table 8 sweep's two tables (record table8_digits).
TABLE8_POSEMBS = ('none', 'learn1d', 'learn2d', 'sincos2d', 'relative')
TABLE8_INJECTIONS = ('stem', 'every_layer', 'every_layer_shared')
# The rows of the TPU compile table (records compile_NAME), in the order of its numbers.
TPU_COMPILE_ROWS = (
  ('vit_g14_v5e_replicated', 'vit_g14_v5e_fsdp', 'vit_h14_v5e', 'vit_b16_v5e_batch4096')
  + ('vit_b16_v5e_batch4096_accum4', 'transformer_base_v5e', 'vit_l16_v5e_unrolled', 'vit_l16_v5e_scanned')
  + ('vit_l16_v5e_scanned_remat_full', 'vit_l16_v5e_scanned_remat_dots', 'vit_g14_v4_scanned')
  + ('transformer_big_v5p', 'vit_g14_v4_scanned_remat_full', 'tiny_vit_v5e_scanned', 'tiny_vit_v5e_unrolled')
  + ('vit_g14_v5e_fsdp_remat_full', 'vit_g14_v5e_fsdp_heads13', 'tiny_vit_v5e_fsdp_one_layer')
  + ('vit_g14_v5e_fsdp_scanned_remat_full',)
)
HEADLINE_RUNS = ('vit_digits', 'mnist_to_digits/finetune', 'mnist_to_digits/scratch', 'vit_mnist') + (
  'transformer_scan',
  'transformer_multi30k',
  'transformer_multi30k_long/chosen',
  'rnn_scan',
  'rnn_multi30k',
  'rnn_multi30k_long/chosen',
  'video_digits',
)


def _video_layouts_table(sweep: str) -> Table:
  """A video layout sweep's table on the ablations page: one row per attention layout."""
  columns = (
    'model.attention',
    'accuracy',
    'digit accuracy',
    'direction accuracy',
    'GFLOPs / clip',
    'train clips/s',
  )
  return Table('docs/ablations.md', columns, tuple(f'{sweep}/{layout}' for layout in VIDEO_LAYOUTS))


SHORT = ('config', 'result', 'wall time', 'machine kind')  # the headline page's columns: short lines
TABLES = {
  'readme': Table(
    'README.md',
    ('model and data', 'result', 'time', 'machine kind', 'more'),
    ('vit_digits', 'mnist_to_digits/finetune', 'mnist_to_digits/scratch', 'transformer_scan')
    + ('transformer_multi30k_long/chosen', 'rnn_scan', 'rnn_multi30k', 'rnn_multi30k_long/chosen')
    + ('video_digits',),
  ),
  'headline': Table('docs/results.md', SHORT, HEADLINE_RUNS),
  'headline-gpu': Table(
    'docs/results.md',
    ('model', 'throughput', 'MFU', 'machine kind'),
    ('h100_vit_b16_bf16', 'h200_vit_b16_bf16', 'h100_transformer_base_bf16')
    + ('h200_transformer_base_bf16_len1024', 'h200_transformer_base_bf16_len1024_explicit'),
  ),
  'headline-cpu': Table(
    'docs/results.md',
    ('setting', 'median', 'of the defaults'),
    tuple(f'cpu_settings_avx512/{name}' for name in CPU_SETTINGS),
  ),
  'vit-runs': Table(
    'docs/results/vit.md',
    STANDARD,
    ('vit_digits', 'vit_digits_avx512', 'vit_digits_eigen_avx512', 'vit_digits_seed1', 'vit_digits_seed2')
    + ('mnist_to_digits/finetune', 'mnist_to_digits/scratch', 'vit_mnist'),
  ),
  'translation-runs': Table(
    'docs/results/translation.md',
    STANDARD,
    ('transformer_scan', 'transformer_scan_550de58', 'transformer_multi30k', 'transformer_multi30k_long/end')
    + (
      'transformer_multi30k_long/chosen',
      'rnn_scan',
      'rnn_multi30k',
      'rnn_multi30k_long/end',
      'rnn_multi30k_long/chosen',
    ),
  ),
  'decode-speed': Table(
    'docs/results/translation.md', STANDARD, ('decode_speed_beam', 'decode_speed_greedy')
  ),
  'video-runs': Table('docs/results/video.md', STANDARD, ('video_digits',)),
  'history-runs': Table(
    'docs/results/history.md',
    STANDARD,
    ('vit_digits_b2ea671', 'vit_digits_0.2_cpu_a', 'vit_digits_0.2_cpu_b', 'vit_digits_old_decay')
    + ('vit_digits_old_decay_1d94d24', 'vit_digits_finetune_0.2', 'vit_digits_scratch_0.2', 'vit_mnist_0.2')
    + ('transformer_scan_b2ea671', 'transformer_scan_c77cbdf', 'transformer_scan_0.2_cpu_a')
    + ('transformer_scan_0.2_cpu_b', 'transformer_multi30k_0.2', 'transformer_multi30k_0.1')
    + ('transformer_multi30k_long_0.2', 'rnn_scan_0.2', 'rnn_multi30k_0.2', 'video_digits_b2ea671')
    + ('video_digits_d3fc74a', 'video_digits_0.2', 'video_digits_0.2_shared', 'decode_speed_beam_0.2')
    + ('decode_speed_greedy_0.2',),
  ),
  'predict-startup': Table(
    'docs/results/speed.md',
    ('what', 'first answer', 'end of the process', 'CPU seconds', 'machine', 'recorded at'),
    ('predict_latency', 'predict_latency_cd5290c', 'predict_latency_3343a56'),
  ),
  'explore-speed': Table(
    'docs/results/speed.md',
    ('what', 'first start', 'later start', 'its CPU seconds', 'cold start', 'new image', 'patch click')
    + ('checkpoint (ViT)', 'new sentence', 'checkpoint (translator)', 'time', 'machine', 'recorded at'),
    ('explore_speed',),
  ),
  'predict-phases': Table(
    'docs/results/speed.md',
    ('what', 'import JAX', 'import Flax', 'import the trainer', 'load the workdir', 'first answer')
    + ('to the first answer', 'second answer', 'the whole process', 'CPU seconds', 'machine', 'recorded at'),
    ('predict_phases', 'predict_phases_collect_garbage'),
  ),
  'cpu-settings': Table(
    'docs/results/speed.md',
    ('setting', 'the run', 'images/s in rounds 1, 2, 3', 'median', 'of the defaults'),
    tuple(f'cpu_settings_avx512/{name}' for name in CPU_SETTINGS),
  ),
  'cpu-step': Table(
    'docs/results/speed.md',
    STANDARD,
    (
      'vit_throughput_profile',
      'vit_throughput_scratch',
      'cpu_settings_bf16_avx512',
      'vit_throughput_bf16_profile',
    ),
  ),
  'throughput': Table(
    'docs/results/speed.md',
    ('what', 'command', 'images/s', 'machine', 'recorded at'),
    ('vit_timm_rounds/ours', 'vit_timm_rounds/timm')
    + ('vit_throughput', 'timm_vit_throughput', 'vit_throughput_defaults', 'vit_throughput_accum4')
    + ('vit_throughput_eigen', 'vit_throughput_eigen_accum4', 'vit_throughput_no_huge_pages')
    + ('vit_throughput_0.2', 'vit_throughput_accum4_0.2')
    + ('vit_throughput_eigen_0.2', 'vit_throughput_eigen_accum4_0.2', 'vit_throughput_no_huge_pages_0.2')
    + ('timm_vit_throughput_0.2',),
  ),
  'tpu-compile': Table(
    'docs/results/compile.md',
    ('#', 'model', 'slice', 'batch', 'mesh', 'layers, remat', 'parameters', 'params + optimizer per chip')
    + ('XLA per chip: arguments, temporaries, total of HBM', 'fits', 'FLOPs per step (XLA)')
    + ('collectives per step', 'compile', 'machine', 'recorded at'),
    tuple(f'compile_{name}' for name in TPU_COMPILE_ROWS),
  ),
  'gpu': Table(
    'docs/results/speed.md',
    ('what', 'command', 'throughput', 'ms/step', 'cuDNN attention calls', 'time', 'machine', 'recorded at'),
    ('vit_b16_gpu_bf16_explicit', 'vit_b16_gpu_bf16', 'vit_b16_gpu_f32')
    + ('transformer_base_gpu_bf16', 'transformer_base_gpu_bf16_explicit'),
  ),
  'gpu-2': Table(
    'docs/results/speed.md',
    (
      'what',
      'command',
      'throughput',
      'ms/step',
      'MFU',
      'cuDNN attention calls',
      'time',
      'machine',
      'recorded at',
    ),
    ('h100_vit_b16_bf16', 'h200_vit_b16_bf16', 'h100_transformer_base_bf16')
    + ('h200_transformer_base_bf16_len256', 'h200_transformer_base_bf16_len256_explicit')
    + ('h200_transformer_base_bf16_len1024', 'h200_transformer_base_bf16_len1024_explicit')
    + ('h200_vit_b16_bf16_batch512', 'h200_vit_b16_bf16_cudnn_layer_norm'),
  ),
  'gpu-flops': Table(
    'docs/results/speed.md',
    ('what', 'FLOPs per step', 'parameters', 'machine', 'recorded at'),
    ('gpu_model_flops/vit_b16', 'gpu_model_flops/transformer_base', 'posemb_cifar10_model_flops'),
  ),
  'input-pipeline': Table(
    'docs/results/speed.md',
    ('what', 'command', 'images/s', 'machine', 'recorded at'),
    ('input_pipeline_folder', 'input_pipeline_grain_per_record', 'input_pipeline_randaugment')
    + ('input_pipeline_records_1_thread', 'input_pipeline_records_2_threads'),
  ),
  'mixed-precision': Table(
    'docs/results/vit.md',
    STANDARD,
    ('vit_digits_bfloat16_seed0', 'vit_digits_bfloat16_seed1', 'vit_digits_bfloat16_seed2')
    + ('vit_digits_dropout', 'transformer_scan_bfloat16')
    + ('vit_digits_bfloat16_0.2_seed0', 'vit_digits_bfloat16_0.2_seed1', 'vit_digits_bfloat16_0.2_seed2')
    + ('transformer_scan_bfloat16_0.2', 'vit_digits_dropout_0.2'),
  ),
  'pretrained': Table(
    'docs/results/vit.md',
    STANDARD,
    ('mnist_to_digits', 'mnist_to_digits/pretrain', 'mnist_to_digits/export', 'mnist_to_digits/finetune')
    + ('mnist_to_digits/scratch', 'mnist_to_digits/probe')
    + ('vit_mnist_pretrain', 'vit_mnist_pretrain_0.2', 'vit_mnist_export', 'vit_digits_finetune_0.2')
    + ('vit_digits_scratch_0.2', 'vit_digits_probe', 'vit_digits_probe_0.2'),
  ),
  'fewshot': Table(
    'docs/results/vit.md',
    ('what', '1-shot', '5-shot', '10-shot', '25-shot', 'machine', 'recorded at'),
    (
      'mnist_to_digits/fewshot_digits',
      'mnist_to_digits/fewshot_mnist',
      'mnist_to_digits/fewshot_finetuned',
      'mnist_to_digits/fewshot_scratch',
      'mnist_to_digits/fewshot_probe',
      'fewshot_mnist_to_digits_0.2',
      'fewshot_mnist_0.2',
      'fewshot_finetuned_0.2',
      'fewshot_scratch_0.2',
      'fewshot_probe',
    ),
  ),
  'multi30k-long': Table(
    'docs/results/translation.md',
    ('what', 'sacreBLEU', 'lowercased BLEU', 'chrF', 'length ratio', 'perplexity', 'machine', 'recorded at'),
    ('transformer_multi30k_long/end', 'transformer_multi30k_long/chosen')
    + ('multi30k_long_vocab8000/end', 'multi30k_long_vocab8000/chosen')
    + ('transformer_multi30k_long_005573a/end', 'transformer_multi30k_long_005573a/chosen')
    + ('transformer_multi30k_long_6942fd8/end', 'transformer_multi30k_long_6942fd8/average_last_5')
    + ('transformer_multi30k_long_0.2', 'transformer_multi30k_long_avg5_0.2'),
  ),
  'multi30k-vocabulary': Table(
    'docs/results/translation.md',
    ('what', 'sacreBLEU', 'lowercased BLEU', 'chrF', 'length ratio'),
    (
      'transformer_multi30k_long_005573a/holdout_avg1_beam4_alpha1',
      'transformer_multi30k_long_005573a/holdout_avg1_beam4_alpha1p4',
    )
    + tuple(f'multi30k_long_vocab8000/holdout_alpha{alpha}' for alpha in ('1', '1p4', '1p8', '2p2'))
    + ('multi30k_screen_vocab12000/holdout',),
  ),
  'multi30k-length-penalty': Table(
    'docs/results/translation.md',
    ('what', 'sacreBLEU', 'lowercased BLEU', 'chrF', 'length ratio'),
    tuple(f'transformer_multi30k_long/holdout_alpha{alpha}' for alpha in ('1p4', '1p8', '2p2', '2p6', '3')),
  ),
  'multi30k-equal-time': Table(
    'docs/results/translation.md',
    ('what', 'sacreBLEU', 'lowercased BLEU', 'chrF', 'length ratio'),
    (
      'multi30k_long_vocab8000/holdout_alpha1_depth',
      'multi30k_long_decoder3/holdout',
      'multi30k_long_mlp1024/holdout',
      'multi30k_long_batch12/holdout',
    )
    + (
      'multi30k_long_vocab8000/val_alpha1',
      'multi30k_long_decoder3/val',
      'multi30k_long_mlp1024/val',
      'multi30k_long_batch12/val',
    ),
  ),
  'multi30k-width': Table(
    'docs/results/translation.md',
    ('what', 'sacreBLEU', 'lowercased BLEU', 'chrF', 'length ratio'),
    (
      'multi30k_screen_baseline/holdout',
      'multi30k_screen_encoder4/holdout',
      'multi30k_screen_mlp1024/holdout',
      'multi30k_screen_batch12/holdout',
    ),
  ),
  'multi30k-long-holdout': Table(
    'docs/results/translation.md',
    ('what', 'sacreBLEU', 'lowercased BLEU', 'chrF', 'length ratio'),
    tuple(
      f'transformer_multi30k_long_005573a/holdout_avg{n}_{decoding}'
      for n in (1, 3, 6)
      for decoding in MULTI30K_DECODINGS
    ),
  ),
  'recipes': Table(
    'docs/results/vit.md',
    ('what', 'command', 'without', 'with', 'time', 'machine', 'recorded at'),
    ('recipes_ema', 'recipes_ema_warmup', 'recipes_ema_7db6a83')
    + ('recipes_cutmix', 'recipes_cutmix_90003c6', 'recipes_erasing', 'recipes_repeats', 'recipes_distill'),
  ),
  'posemb-resample': Table(
    'docs/vit.md',
    ('what', 'largest value', 'torch_bicubic vs bicubic', 'torch_bicubic_aa vs bicubic')
    + ('torch_bicubic vs bilinear', 'torch_bicubic_aa vs bilinear', 'machine', 'recorded at'),
    tuple(
      f'posemb_resample/{change}_{table}'
      for change in ('vit_b16_224_to_384', 'dinov2_b14_518_to_224')
      for table in ('normal', 'sincos')
    ),
  ),
  'recipe-step': Table(
    'docs/results/vit.md',
    ('command', 'the student alone', 'with EMA', 'with its teacher', 'machine', 'recorded at'),
    ('recipe_step',),
  ),
  'packing': Table(
    'docs/results/translation.md',
    STANDARD,
    ('packing_multi30k', 'transformer_multi30k', 'transformer_multi30k_packed'),
  ),
  'scan-recipe': Table(
    'docs/results/translation.md',
    ('what', 'command', 'held-out exact match, seeds 0, 1, 2', 'test exact match, seeds 0, 1, 2')
    + ('time', 'machine', 'recorded at'),
    ('transformer_scan_steps',),
  ),
  'one-reduction': Table(
    'docs/results/compile.md',
    (
      'mesh',
      'command',
      'collectives in the compiled step',
      'machine',
      'recorded at',
    ),
    ('compile_one_reduction_data', 'compile_one_reduction_fsdp')
    + ('compile_one_reduction_data_8b41664', 'compile_one_reduction_fsdp_8b41664'),
  ),
  'table8-accuracy': Table(
    'docs/ablations.md',
    ('model.posemb', *TABLE8_INJECTIONS),
    tuple(f'table8_digits/{posemb}' for posemb in TABLE8_POSEMBS),
  ),
  'table8-5shot': Table(
    'docs/ablations.md',
    ('model.posemb', *TABLE8_INJECTIONS),
    tuple(f'table8_digits/{posemb}_5shot' for posemb in TABLE8_POSEMBS),
  ),
  **{
    f'scan-posemb-{split}': Table(
      'docs/ablations.md',
      ('model.posemb', 'test exact match', 'each seed', 'test BLEU', 'test PPL'),
      tuple(f'transformer_scan_posemb_{split}/{posemb}' for posemb in SCAN_POSEMBS),
    )
    for split in ('simple', 'length')
  },
  'rnn-scores-scan': Table(
    'docs/ablations.md',
    ('model.attention_score', 'test PPL', 'test BLEU', 'test exact match', 'seeds 0, 1, 2 (exact match)'),
    tuple(f'rnn_scores_scan/{score}' for score in RNN_SCORES),
  ),
  'rnn-scores-scan-length': Table(
    'docs/ablations.md',
    ('model.attention_score', 'test PPL', 'test BLEU', 'test exact match'),
    tuple(f'rnn_scores_scan_length/{score}' for score in RNN_SCORES),
  ),
  'rnn-scores-multi30k': Table(
    'docs/ablations.md',
    ('model.attention_score', 'val PPL', 'val BLEU', 'val exact match'),
    tuple(f'rnn_scores_multi30k/{score}' for score in RNN_SCORES),
  ),
  'weights-against-torch': Table('docs/results/vit.md', STANDARD, ('weights_against_torch',)),
  'video-layouts-digits': _video_layouts_table('video_layouts_digits'),
  'linear-probe-step': Table(
    'docs/results/vit.md',
    ('what', 'FLOPs per step (XLA)', 'ms per step', 'against the probe', 'machine', 'recorded at'),
    ('linear_probe_step/frozen', 'linear_probe_step/trained'),
  ),
  'ablation-sweeps': Table(
    'docs/ablations.md',
    ('what', 'time', 'machine', 'recorded at'),
    ('table8_digits', 'transformer_scan_posemb_simple', 'transformer_scan_posemb_length', 'rnn_scores_scan')
    + ('rnn_scores_scan_length', 'rnn_scores_multi30k', 'video_tubelet_time', 'video_layouts_digits')
    + ('video_layouts_one_frame', 'video_temporal_posemb_one_frame'),
  ),
  'multi30k-rate': Table('docs/results/translation.md', STANDARD, ('multi30k_long_rate_3918e38',)),
  'remat-before-fix': Table(
    'docs/results/compile.md', STANDARD, ('compile_vit_g14_v5e_fsdp_remat_full_e8646e7',)
  ),
  'video-layouts-one-frame': _video_layouts_table('video_layouts_one_frame'),
  'video-temporal-posemb-one-frame': Table(
    'docs/ablations.md',
    ('model.temporal_posemb', 'accuracy', 'digit accuracy', 'direction accuracy, each seed', 'GFLOPs / clip'),
    tuple(f'video_temporal_posemb_one_frame/{posemb}' for posemb in ('none', 'learn1d', 'sincos1d')),
  ),
  'video-tubelet-time': Table(
    'docs/ablations.md',
    ('model.temporal_posemb', 'accuracy', 'digit accuracy', 'direction accuracy'),
    ('video_tubelet_time/sincos1d', 'video_tubelet_time/none'),
  ),
  'video-first-recipe': Table(
    'docs/results/video.md',
    ('what', 'command', 'accuracy', 'digit', 'direction', 'time', 'machine', 'recorded at'),
    ('video_divided_sincos_0.2', 'video_divided_learn1d_0.2', 'video_spacetime_learn1d_0.2'),
  ),
}


class TableError(ValueError):
  """A table that names a missing record or metric, or a page without a table's markers."""


def render(template: str, numbers: dict[str, Any], name: str) -> str:
  def number(match: re.Match) -> str:
    metric, aggregate, spec = match.group(1), match.group(2), match.group(3) or ''
    if '*' not in metric:
      if aggregate and aggregate not in UNITS:
        raise TableError(
          f'record {name}: {{{metric}|{aggregate}}} needs a pattern with * to aggregate '
          f'(a single number takes a unit: {", ".join(UNITS)})'
        )
      if metric not in numbers:
        raise TableError(f'record {name}: its text names {{{metric}}}, which is not among its numbers')
      return format(numbers[metric] / UNITS[aggregate] if aggregate else numbers[metric], spec)
    values = [numbers[key] for key in sorted(numbers) if fnmatch.fnmatchcase(key, metric)]
    if not values:
      raise TableError(f'record {name}: no number of its matches {{{metric}}}')
    if aggregate == 'each':
      return ', '.join(format(value, spec) for value in values)
    if aggregate not in AGGREGATES:
      raise TableError(f'record {name}: {{{metric}}} needs |mean, |median, |sd or |each, got {aggregate!r}')
    if aggregate == 'sd' and len(values) < 2:
      raise TableError(f'record {name}: {{{metric}|sd}} matches one number only')
    return format(AGGREGATES[aggregate](values), spec)

  return PLACEHOLDER.sub(number, template)


def machine_cell(machine: dict[str, Any]) -> str:
  if machine.get('label'):
    return machine['label']
  if not machine.get('cpu'):
    return 'not stated'
  flags = machine.get('flags') or []
  simd = (
    'AVX-512' if any(flag.startswith('avx512') for flag in flags) else 'AVX2' if 'avx2' in flags else None
  )
  parts = [machine['cpu'], f'{machine["cores"]} cores' if machine.get('cores') else None, simd]
  host = ', '.join(part for part in parts if part)
  return f'{accelerator_names(machine["accelerator"])} (host: {host})' if machine.get('accelerator') else host


def time_cell(record: dict[str, Any]) -> str:
  if record['wall_seconds'] is None:
    return record.get('conditions') or ''
  details = []
  if record.get('cpu_seconds') is not None:
    details.append(f'{duration(record["cpu_seconds"])} of CPU')
  load = record.get('load_average')
  if load:
    details.append(f'load average {load["min"]:g}-{load["max"]:g}')
  if record.get('conditions'):
    details.append(record['conditions'])
  return duration(record['wall_seconds']) + (f' ({"; ".join(details)})' if details else '')


def machine_kind_cell(machine: dict[str, Any]) -> str:
  """The machine in a word (docs/glossary.md): its label, its GPU, or the 2-core CPU kind by SIMD level."""
  if machine.get('label'):
    return machine['label']
  if machine.get('accelerator'):
    return accelerator_names(machine['accelerator'])
  if not (machine.get('cpu') or '').startswith('AMD EPYC') or machine.get('cores') != 2:
    return machine_cell(machine)
  flags = machine.get('flags') or []
  if any(flag.startswith('avx512') for flag in flags):
    return 'CPU-A'
  return 'CPU-B' if 'avx2' in flags else machine_cell(machine)


def wall_time_cell(record: dict[str, Any]) -> str:
  return duration(record['wall_seconds']) if record['wall_seconds'] is not None else 'not stated'


def config_cell(record: dict[str, Any]) -> str:
  """The config file the record's command (or its part's command) trains."""
  command = (record.get('cells') or {}).get('command') or record['command']
  match = re.search(r'--config[ =](configs/[\w.]+\.py)', command)
  if not match:
    raise TableError(f'record {record["name"]}: its command names no --config configs/NAME.py')
  return f'`{match.group(1)}`'


def recorded_cell(record: dict[str, Any]) -> str:
  commit = f'`{record["commit"][:7]}`' if record['commit'] else 'commit not stated'
  date = (record['date'] or '')[:10]
  if record['source'] == 'transcribed':
    return f'{commit} (transcribed)'
  return f'{commit}, {date}' + (' (uncommitted changes)' if record.get('uncommitted_changes') else '')


def cell(record: dict[str, Any], column: str) -> str:
  cells = record.get('cells') or {}
  if column in cells:
    text = render(cells[column], record['numbers'], record['name'])
  elif column == 'what':
    text = record.get('what') or record['name']
  elif column == 'command':  # as ``records.reproduce`` runs it: moved modules by today's names
    text = f'`{store.command_today(record["command"])}`'
  elif column == 'time':
    text = time_cell(record)
  elif column == 'machine':
    text = machine_cell(record['machine'])
  elif column == 'recorded at':
    text = recorded_cell(record)
  elif column == 'config':
    text = config_cell(record)
  elif column == 'wall time':
    text = (
      render(cells['time'], record['numbers'], record['name']) if 'time' in cells else wall_time_cell(record)
    )
  elif column == 'machine kind':
    text = machine_kind_cell(record['machine'])
  elif column == 'result':
    text = ', '.join(f'{metric} {value:g}' for metric, value in record['numbers'].items())
  else:
    raise TableError(f'record {record["name"]} has no text for the column {column!r}')
  return text.replace('|', '\\|').replace('\n', ' ')


def row_record(row: str, by_name: dict[str, dict[str, Any]]) -> dict[str, Any]:
  """The record a row shows: ``NAME``, or ``NAME/PART`` with that part's ``what`` and ``cells``."""
  name, _, part = row.partition('/')
  if name not in by_name:
    raise TableError(f'a table names the record {name}, which is not in {store.RESULTS}')
  record = by_name[name]
  if not part:
    return record
  parts = record.get('parts') or {}
  if part not in parts:
    raise TableError(f'a table names the part {part!r} of record {name}, which has parts {sorted(parts)}')
  return dict(record, what=parts[part].get('what') or row, cells=parts[part].get('cells') or {})


def markdown(table: Table, by_name: dict[str, dict[str, Any]]) -> str:
  lines = ['| ' + ' | '.join(table.columns) + ' |', '|' + '---|' * len(table.columns)]
  for row in table.rows:
    record = row_record(row, by_name)
    lines.append('| ' + ' | '.join(cell(record, column) for column in table.columns) + ' |')
  return '\n'.join(lines)


def with_tables(text: str, tables: dict[str, str], page: str) -> str:
  """``text`` with each marked table replaced by ``tables[name]``."""
  out, lines, index, seen = [], text.split('\n'), 0, set()
  while index < len(lines):
    out.append(lines[index])
    match = START.match(lines[index].strip())
    index += 1
    if not match:
      continue
    name = match.group(1)
    if name not in tables:
      raise TableError(f'{page}: a marker names the table {name!r}, which records/tables.py lacks')
    end = next((i for i in range(index, len(lines)) if lines[i].strip() == END), None)
    if end is None:
      raise TableError(f'{page}: the table {name!r} has no closing {END}')
    out.extend([tables[name], lines[end]])
    seen.add(name)
    index = end + 1
  missing = set(tables) - seen
  if missing:
    raise TableError(f'{page}: no marker for the table(s) {", ".join(sorted(missing))}')
  return '\n'.join(out)


def pages(root: pathlib.Path = store.ROOT) -> dict[str, tuple[str, str]]:
  """page -> (its text, its text with the tables made from the records)."""
  by_name = {record['name']: record for record in store.load_all()}
  result = {}
  for page in sorted({table.page for table in TABLES.values()}):
    tables = {name: markdown(table, by_name) for name, table in TABLES.items() if table.page == page}
    text = (root / page).read_text()
    result[page] = (text, with_tables(text, tables, page))
  return result


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--write', action='store_true', help='rewrite the tables in their pages')
  args = parser.parse_args(argv)
  try:
    made = pages()
  except (TableError, store.RecordError) as error:
    raise SystemExit(str(error)) from None
  differ = [page for page, (text, new) in made.items() if text != new]
  for page in differ:
    if args.write:
      (store.ROOT / page).write_text(made[page][1])
      print(f'wrote the tables of {page}')
    else:
      text, new = made[page]
      sys.stdout.writelines(
        difflib.unified_diff(text.splitlines(True), new.splitlines(True), page, 'from records')
      )
  if differ and not args.write:
    print(f'\n{", ".join(differ)}: the tables differ from the records; python -m records.tables --write')
    sys.exit(1)
  if not differ:
    print('the tables match the records')


if __name__ == '__main__':
  main(sys.argv[1:])
