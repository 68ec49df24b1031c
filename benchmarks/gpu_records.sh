#!/bin/bash
# The accelerator's records, one after another: bash benchmarks/gpu_records.sh [--print] [RECORD ...]
#
# Each is a records.record on one GPU, named after the GPU's model (h100_vit_b16_bf16 on an H100,
# h200_vit_b16_bf16 on an H200; gpu_... on others), most telling first:
#   TAG_posemb_cifar10                        the positional-embedding table on CIFAR-10: ablate.py over
#                                             model.posemb with configs/vit_cifar10_posemb.py, one seed each
#   TAG_vit_b16_bf16_pad2                     ViT-B/16 at 224, bfloat16, batch 256, its 197 tokens padded to
#                                             198 in the attention call, so that cuDNN's kernel takes them
#   TAG_vit_b16_bf16_pad64                    the same padded to 256
#   TAG_vit_b16_bf16                          unpadded: images/s and MFU with the default attention_kernel auto
#                                             (cuDNN where it takes the inputs; it refuses 197 tokens)
#   TAG_vit_b16_bf16_pad64_profile            the padded step with a jax.profiler trace: its costliest kernels
#   TAG_vit_b16_bf16_profile                  the unpadded step's
#   TAG_transformer_base_bf16                 the Transformer-base translator, bfloat16, 384 x (64 + 64) tokens
#   TAG_transformer_base_bf16_len256          the same tokens per step as 96 x (256 + 256)
#   TAG_transformer_base_bf16_len256_explicit the same with the attention as explicit einsums
#   TAG_transformer_base_bf16_len1024         24 x (1024 + 1024)
#   TAG_transformer_base_bf16_len1024_explicit
#   TAG_vit_b16_bf16_explicit                 the ViT step with the explicit einsums
#   TAG_transformer_base_bf16_explicit        the translator's step at 64 tokens with the explicit einsums
#   TAG_vit_b16_f32                           the ViT step in float32, which cuDNN's kernel does not take
# and, last, not a record:
#   xla_dump                                  the padded ViT-B/16 step's optimised HLO (XLA's dump, as text)
#                                             and a profile trace, into runs/gpu_profile/, to read by hand
# Give names to run only those (with the tag or without it); --print prints their commands and runs
# nothing. posemb_cifar10 reads the image folder data/cifar10; where it lacks train/, the script first
# unpacks CIFAR10_ARCHIVE (default: the shared data's cifar10-jpg.tar.gz beside or inside the checkout)
# there. The tables of docs/results.md ("Training throughput on a GPU") are made from the records.
set -euo pipefail
cd "$(dirname "$0")/.."

VIT='python -m benchmarks.vit_throughput --variant B/16 --image_size 224 --num_classes 1000 --batch_size 256 --steps 50'
TRANSFORMER='python -m benchmarks.transformer_throughput --variant base --steps 30 --dtype bfloat16'
POSEMB='python ablate.py --config configs/vit_cifar10_posemb.py --workdir runs/posemb_cifar10 --axis model.posemb=none,learn1d,learn2d,sincos2d,relative'
DUMP=runs/gpu_profile
declare -A COMMANDS=(
  [posemb_cifar10]="$POSEMB"
  [vit_b16_bf16_pad2]="$VIT --dtype bfloat16 --attention_pad_multiple 2"
  [vit_b16_bf16_pad64]="$VIT --dtype bfloat16 --attention_pad_multiple 64"
  [vit_b16_bf16]="$VIT --dtype bfloat16"
  [vit_b16_bf16_pad64_profile]="$VIT --dtype bfloat16 --attention_pad_multiple 64 --profile_dir runs/trace"
  [vit_b16_bf16_profile]="$VIT --dtype bfloat16 --profile_dir runs/trace"
  [transformer_base_bf16]="$TRANSFORMER --batch_size 384 --length 64"
  [transformer_base_bf16_len256]="$TRANSFORMER --batch_size 96 --length 256"
  [transformer_base_bf16_len256_explicit]="$TRANSFORMER --batch_size 96 --length 256 --attention_kernel explicit"
  [transformer_base_bf16_len1024]="$TRANSFORMER --batch_size 24 --length 1024"
  [transformer_base_bf16_len1024_explicit]="$TRANSFORMER --batch_size 24 --length 1024 --attention_kernel explicit"
  [vit_b16_bf16_explicit]="$VIT --dtype bfloat16 --attention_kernel explicit"
  [transformer_base_bf16_explicit]="$TRANSFORMER --batch_size 384 --length 64 --attention_kernel explicit"
  [vit_b16_f32]="$VIT --dtype float32"
  [xla_dump]="XLA_FLAGS=\"\${XLA_FLAGS:-} --xla_dump_to=$DUMP/xla --xla_dump_hlo_as_text --xla_dump_hlo_module_re=jit_step\" $VIT --dtype bfloat16 --attention_pad_multiple 64 --profile_dir $DUMP/trace > $DUMP/vit_b16_bf16_pad64.txt"
)
declare -A NUMBERS_FILES=([posemb_cifar10]=runs/posemb_cifar10/results.json)
ORDER=(
  posemb_cifar10 vit_b16_bf16_pad2 vit_b16_bf16_pad64 vit_b16_bf16 vit_b16_bf16_pad64_profile vit_b16_bf16_profile
  transformer_base_bf16 transformer_base_bf16_len256 transformer_base_bf16_len256_explicit
  transformer_base_bf16_len1024 transformer_base_bf16_len1024_explicit vit_b16_bf16_explicit
  transformer_base_bf16_explicit vit_b16_f32 xla_dump
)

print=0
if [[ ${1:-} == --print ]]; then
  print=1
  shift
fi
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
if ((print)); then
  for name in "${names[@]}"; do echo "${COMMANDS[$name]}"; done
  exit 0
fi
if ! gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1) || [[ -z $gpu ]]; then
  echo 'no NVIDIA GPU here (nvidia-smi finds none): these records are of a GPU' >&2
  exit 2
fi
case $gpu in
  *H100*) tag=h100 ;;
  *H200*) tag=h200 ;;
  *) tag=gpu ;;
esac
if [[ " ${names[*]} " == *" posemb_cifar10 "* && ! -d data/cifar10/train ]]; then
  archive=${CIFAR10_ARCHIVE:-}
  for candidate in ../shared/data/cifar10/cifar10-jpg.tar.gz shared/data/cifar10/cifar10-jpg.tar.gz; do
    [[ -z $archive && -f $candidate ]] && archive=$candidate
  done
  if [[ -z $archive || ! -f $archive ]]; then
    echo "posemb_cifar10 needs CIFAR-10 in data/cifar10 (python -m pipelines.download cifar10), or CIFAR10_ARCHIVE=PATH/cifar10-jpg.tar.gz" >&2
    exit 2
  fi
  echo "=== unpacking $archive into data/cifar10"
  mkdir -p data/cifar10
  tar xzf "$archive" -C data/cifar10
fi
for name in "${names[@]}"; do
  if [[ $name == xla_dump ]]; then
    echo "=== $name on $gpu into $DUMP: ${COMMANDS[$name]}"
    mkdir -p "$DUMP"
    sh -c "${COMMANDS[$name]}" || echo "$name failed; going on"
    continue
  fi
  numbers=()
  if [[ -n "${NUMBERS_FILES[$name]:-}" ]]; then numbers=(--numbers_file "${NUMBERS_FILES[$name]}"); fi
  echo "=== ${tag}_$name on $gpu: ${COMMANDS[$name]}"
  python -m records.record "${tag}_$name" "${numbers[@]}" -- "${COMMANDS[$name]}" || echo "${tag}_$name failed; going on"
done
