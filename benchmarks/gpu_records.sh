#!/bin/bash
# The accelerator's records, one after another: bash benchmarks/gpu_records.sh [RECORD ...]
#
# Each is a benchmarks.record of a throughput benchmark on one GPU, most telling first (how long they
# took: the records, docs/results.md "Training throughput on a GPU"):
#   vit_b16_gpu_bf16                     ViT-B/16 at 224, bfloat16, batch 256: images/s and MFU, with the
#                                        default attention_kernel auto (cuDNN where it takes the inputs)
#   transformer_base_gpu_bf16            the Transformer-base translator, bfloat16, 384 x (64 + 64) tokens
#   vit_b16_gpu_bf16_explicit            the ViT step with the attention as explicit einsums (attention_kernel explicit)
#   transformer_base_gpu_bf16_explicit   the translator's step with the explicit einsums
#   vit_b16_gpu_f32                      the ViT step in float32, which cuDNN's kernel does not take
# Give record names to run only those. The tables of docs/results.md ("Training throughput on a GPU") are made from them.
set -euo pipefail
cd "$(dirname "$0")/.."

VIT='python -m benchmarks.vit_throughput --variant B/16 --image_size 224 --num_classes 1000 --batch_size 256 --steps 50'
TRANSFORMER='python -m benchmarks.transformer_throughput --variant base --batch_size 384 --length 64 --steps 30'
declare -A COMMANDS=(
  [vit_b16_gpu_bf16]="$VIT --dtype bfloat16"
  [transformer_base_gpu_bf16]="$TRANSFORMER --dtype bfloat16"
  [vit_b16_gpu_bf16_explicit]="$VIT --dtype bfloat16 --attention_kernel explicit"
  [transformer_base_gpu_bf16_explicit]="$TRANSFORMER --dtype bfloat16 --attention_kernel explicit"
  [vit_b16_gpu_f32]="$VIT --dtype float32"
)
ORDER=(vit_b16_gpu_bf16 transformer_base_gpu_bf16 vit_b16_gpu_bf16_explicit transformer_base_gpu_bf16_explicit vit_b16_gpu_f32)

if (($#)); then names=("$@"); else names=("${ORDER[@]}"); fi
for name in "${names[@]}"; do
  if [[ -z "${COMMANDS[$name]:-}" ]]; then
    echo "unknown record $name; these are: ${ORDER[*]}" >&2
    exit 2
  fi
done
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo 'no NVIDIA GPU here (nvidia-smi -L fails): these records are of a GPU' >&2
  exit 2
fi
for name in "${names[@]}"; do
  echo "=== $name: ${COMMANDS[$name]}"
  python -m benchmarks.record "$name" -- "${COMMANDS[$name]}"
done
