#!/bin/bash
# Train on a Cloud TPU VM slice (a pod slice has several hosts; the same command runs on each):
#
#   launch/tpu_pod.sh TPU_NAME ZONE configs/vit_b16_imagenet.py gs://BUCKET/runs/vit_b16 --config.mesh.fsdp=16
#
# Arguments: the TPU VM's name and zone, the config file, the workdir, then any --config.*
# overrides. Every host trains one process (`train.py --distributed`: jax.distributed.initialize()
# finds the slice's hosts from the TPU VM's metadata) that drives its local chips and reads its
# own rows of every batch. The workdir must be a folder every host writes to: a gs:// bucket
# (docs/trainer.md, "Workdirs in a bucket"; tested against a local emulator with one host, not
# yet on a pod) or a file system mounted on every host (e.g. Filestore over NFS).
# Before the first run, copy the repository onto every host and install (once):
#   gcloud compute tpus tpu-vm scp --recurse . TPU_NAME:~/attention --zone=ZONE --worker=all
#   gcloud compute tpus tpu-vm ssh TPU_NAME --zone=ZONE --worker=all \
#     --command='cd ~/attention && python3 -m venv .venv && .venv/bin/pip install -r requirements-tpu.txt'
# Check first that the step fits the slice's chips: python -m benchmarks.compile_for --topology ...
# (see its docstring). Rerunning the same command resumes from the latest checkpoint.

set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 TPU_NAME ZONE CONFIG WORKDIR [--config.field=value ...]" >&2
  exit 2
fi
name=$1
zone=$2
config=$3
workdir=$4
shift 4
overrides=$(printf ' %q' "$@")

gcloud compute tpus tpu-vm ssh "$name" --zone="$zone" --worker=all --command="cd ~/attention && \
  .venv/bin/python train.py --distributed --config $(printf %q "$config") \
  --workdir $(printf %q "$workdir")$overrides"
