#!/usr/bin/env bash
# The NCCL probe again: twice over the acceptance candidates (how stable is the ranking?) and once
# over per-collective Tree. Needs only the GPU host image's torch. Usage: bash scripts/gpu/probe_repeat.sh
# BATCH=1 times each eager call alone (the first runs' method); the default, 10, times back-to-back
# calls after the ranks meet.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=${BATCH:-10}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
for i in 1 2; do
  timeout 100 python3 -m autotune.nccl_probe --tp 2 --hidden 7168 --tokens 1,4,8,16,64,512 --batch "$B" \
    --candidates autotune/space/examples/nccl-candidates-2xh200.yaml --backend nccl --out "$OUT/nccl-probe-2xh200-batch$B-run$i.json"
done
timeout 60 python3 -m autotune.nccl_probe --tp 2 --hidden 7168 --tokens 1,4,8,16,64,512 --batch "$B" \
  --candidates scripts/gpu/nccl-candidates-tree.yaml --backend nccl --out "$OUT/nccl-probe-2xh200-batch$B-tree.json"
