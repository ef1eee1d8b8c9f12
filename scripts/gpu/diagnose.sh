#!/usr/bin/env bash
# One device call of measurements that are not the search (issue 13's spread and timer goals),
# from the repo root on the device, .gpu/kit carried:
#   bash scripts/gpu/diagnose.sh CALL_S
# 1. where the MoE repeat spread comes from: scripts/gpu/spread_probe.py on SGLang's default chain
#    (3-1-4), the space's workload against fewer and longer requests, on one server started as the
#    space's trials are (no prefill CUDA graphs) and on one with them;
# 2. the device timer's cost on the 8B shape, interleaved pairs with paired acceptance draws
#    (benchmarks.profile_overhead --timer-only; both servers get the same --random-seed).
# Every step is bounded by the time left of CALL_S; what each wrote is in $OUT.
set -uo pipefail
CALL_S=${1:-580}
T0=$(date +%s)
left() { echo $(( CALL_S - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/tmp/site/xgrammar${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ ! -d /tmp/site ]; then
  { python3 scripts/gpu/prepare_kit.py "${KIT:-.gpu/kit/site.tar.xz}"
    python3 scripts/gpu/make_models.py .gpu/models llama-8b qwen3-30b-a3b; } > "$OUT/prepare.log" 2>&1 || { tail "$OUT/prepare.log"; exit 1; }
fi
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/facts.txt" 2>&1
echo "== set-up took $(( $(date +%s) - T0 )) s"

CHAIN='{"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}'
PROBE_S=${PROBE_S:-210}
# The space's trials start without prefill CUDA graphs (measure.fast_start); the second probe has them.
for mode in fast-start full-graphs; do
  flag=(); [ "$mode" = full-graphs ] && flag=(--full-graphs)
  [ "$(left)" -gt 150 ] || { echo "== probe $mode skipped: $(left) s left"; continue; }
  timeout -s INT -k 20 $(( $(left) < PROBE_S ? $(left) : PROBE_S )) python3 scripts/gpu/spread_probe.py \
    --space scripts/gpu/h200-qwen3-30b-a3b.yaml --params "$CHAIN" --variants "${VARIANTS:-8x192,4x384}" \
    --rounds "${ROUNDS:-4}" --warm-rounds 1 "${flag[@]}" --json "$OUT/spread-probe-moe-$mode.json" \
    --log "$OUT/spread-probe-moe-$mode-server.log" > "$OUT/spread-probe-moe-$mode.log" 2>&1
  echo "== spread probe $mode rc=$?, $(left) s left"; tail -n 3 "$OUT/spread-probe-moe-$mode.log"
done

if [ "$(left)" -gt 140 ]; then
  timeout -s INT -k 20 $(( $(left) - 25 )) python3 -m benchmarks.profile_overhead --space scripts/gpu/h200-llama-8b.yaml \
    --params "$CHAIN" --timer-only --mem-fraction 0.3 --pairs "${PAIRS:-6}" --json "$OUT/timer-overhead.json" \
    > "$OUT/timer-overhead.log" 2>&1
  echo "== timer rc=$?, $(left) s left"; tail -n 6 "$OUT/timer-overhead.log"
fi
