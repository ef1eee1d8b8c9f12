#!/usr/bin/env bash
# The whole real-GPU batch in one call on a remote host with two H200s (nvidia-h200-x2), from the repo root:
#   carry: .gpu/site_min.tar.xz .gpu/prepare_overlay.py .gpu/make_tiny_models.py
#   command: bash scripts/gpu/run.sh
# 1. the NCCL probe over both GPUs; 2. two lanes of real-SGLang trials, one per GPU, each
# with its own baseline. Results are bundled into at most 8 files under $OUT (the folder whose
# files come back with the call).
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
python3 .gpu/prepare_overlay.py .gpu/site_min.tar.xz >/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 .gpu/make_tiny_models.py .gpu/models >/dev/null
{ date -u; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  nvidia-smi topo -m
  python3 -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), 'cuda', torch.version.cuda)"
  python3 --version; nproc; } > "$OUT/facts.txt" 2>&1
cat "$OUT/facts.txt"
echo "== setup done at $(( $(date +%s) - T0 )) s"

if [ "${SKIP_PROBE:-0}" != 1 ]; then
  P0=$(date +%s)
  timeout 150 python3 -m autotune.nccl_probe --tp 2 --hidden 7168 --tokens 1,4,8,16,64,512 \
    --candidates autotune/space/examples/nccl-candidates-2xh200.yaml --backend nccl --out "$OUT/nccl-probe-2xh200.json" --workdir /tmp/results/probe-logs
  echo "== probe rc=$? took $(( $(date +%s) - P0 )) s"
fi

LANE_S=${LANE_S:-470}
LANES=/tmp/results/lanes
CUDA_VISIBLE_DEVICES=0 timeout -k 20 "$LANE_S" python3 scripts/gpu/lane.py "$LANES/gpu0" \
  ${LANE0:-plain 1-1-2@1.8 3-1-4@3 5-1-6@3.5} > "$OUT/lane0.log" 2>&1 &
A=$!
CUDA_VISIBLE_DEVICES=1 timeout -k 20 "$LANE_S" python3 scripts/gpu/lane.py "$LANES/gpu1" \
  ${LANE1:-plain full:plain 2-1-3@2.5 3-4-8@3} > "$OUT/lane1.log" 2>&1 &
B=$!
wait $A; echo "== lane gpu0 rc=$?"; wait $B; echo "== lane gpu1 rc=$?"
cat "$OUT/lane0.log" "$OUT/lane1.log"
tar -czf "$OUT/results.tar.gz" -C /tmp/results .
echo "== total $(( $(date +%s) - T0 )) s"
