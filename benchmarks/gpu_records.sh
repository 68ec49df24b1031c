#!/bin/bash
# The accelerator's records, one after another: bash benchmarks/gpu_records.sh [RECORD ...]
#
# Each is a benchmarks.record of a throughput benchmark on one GPU, named after the GPU's model
# (h100_vit_b16_bf16 on an H100, h200_vit_b16_bf16 on an H200; gpu_... on others), most telling first:
#   TAG_vit_b16_bf16                          ViT-B/16 at 224, bfloat16, batch 256: images/s and MFU, with
#                                             the default attention_kernel auto (cuDNN where it takes the inputs)
#   TAG_transformer_base_bf16                 the Transformer-base translator, bfloat16, 384 x (64 + 64) tokens
#   TAG_transformer_base_bf16_len256          the same tokens per step as 96 x (256 + 256)
#   TAG_transformer_base_bf16_len256_explicit the same with the attention as explicit einsums
#   TAG_transformer_base_bf16_len1024         24 x (1024 + 1024)
#   TAG_transformer_base_bf16_len1024_explicit
#   TAG_vit_b16_bf16_explicit                 the ViT step with the explicit einsums
#   TAG_transformer_base_bf16_explicit        the translator's step at 64 tokens with the explicit einsums
#   TAG_vit_b16_f32                           the ViT step in float32, which cuDNN's kernel does not take
# Give record names to run only those (with the tag or without it). The tables of docs/results.md
# ("Training throughput on a GPU") are made from them.
set -euo pipefail
cd "$(dirname "$0")/.."

VIT='python -m benchmarks.vit_throughput --variant B/16 --image_size 224 --num_classes 1000 --batch_size 256 --steps 50'
TRANSFORMER='python -m benchmarks.transformer_throughput --variant base --steps 30 --dtype bfloat16'
declare -A COMMANDS=(
  [vit_b16_bf16]="$VIT --dtype bfloat16"
  [transformer_base_bf16]="$TRANSFORMER --batch_size 384 --length 64"
  [transformer_base_bf16_len256]="$TRANSFORMER --batch_size 96 --length 256"
  [transformer_base_bf16_len256_explicit]="$TRANSFORMER --batch_size 96 --length 256 --attention_kernel explicit"
  [transformer_base_bf16_len1024]="$TRANSFORMER --batch_size 24 --length 1024"
  [transformer_base_bf16_len1024_explicit]="$TRANSFORMER --batch_size 24 --length 1024 --attention_kernel explicit"
  [vit_b16_bf16_explicit]="$VIT --dtype bfloat16 --attention_kernel explicit"
  [transformer_base_bf16_explicit]="$TRANSFORMER --batch_size 384 --length 64 --attention_kernel explicit"
  [vit_b16_f32]="$VIT --dtype float32"
)
ORDER=(
  vit_b16_bf16 transformer_base_bf16 transformer_base_bf16_len256 transformer_base_bf16_len256_explicit
  transformer_base_bf16_len1024 transformer_base_bf16_len1024_explicit vit_b16_bf16_explicit
  transformer_base_bf16_explicit vit_b16_f32
)

if (($#)); then names=("$@"); else names=("${ORDER[@]}"); fi
for i in "${!names[@]}"; do
  names[i]=${names[i]#h100_}
  names[i]=${names[i]#h200_}
  names[i]=${names[i]#gpu_}
  if [[ -z "${COMMANDS[${names[i]}]:-}" ]]; then
    echo "unknown record ${names[i]}; these are, each after the GPU's tag: ${ORDER[*]}" >&2
    exit 2
  fi
done
if ! gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1) || [[ -z $gpu ]]; then
  echo 'no NVIDIA GPU here (nvidia-smi finds none): these records are of a GPU' >&2
  exit 2
fi
case $gpu in
  *H100*) tag=h100 ;;
  *H200*) tag=h200 ;;
  *) tag=gpu ;;
esac
for name in "${names[@]}"; do
  echo "=== ${tag}_$name on $gpu: ${COMMANDS[$name]}"
  python -m benchmarks.record "${tag}_$name" -- "${COMMANDS[$name]}" || echo "${tag}_$name failed; going on"
done
