#!/usr/bin/env bash
# One call on the remote GPU host of measurements that are not the search (the repeat spread and
# the device timer's cost), from the repo root on the host, .gpu/kit carried:
#   [STEPS="probe timer"] [GRAPHS="fast-start full-graphs"] bash scripts/gpu/diagnose.sh CALL_S
# probe: where the MoE repeat spread comes from: scripts/gpu/spread_probe.py on SGLang's default
#        chain (3-1-4), workload variants $VARIANTS rotated on one server, once per $GRAPHS mode
#        (fast-start: as the space's trials start, no prefill CUDA graphs; full-graphs: with them);
# timer: the device timer's cost on the 8B shape, $PAIRS interleaved pairs with paired acceptance
#        draws (benchmarks.profile_overhead --timer-only; both servers get the same --random-seed),
#        with prefill CUDA graphs when $TIMER_GRAPHS is full-graphs.
# Steps run in the order of $STEPS, each bounded by the time left of CALL_S; what each wrote is in $OUT
# (the folder whose files come back with the call).
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

probe() {
  for mode in ${GRAPHS:-fast-start full-graphs}; do
    flag=(); [ "$mode" = full-graphs ] && flag=(--full-graphs)
    [ "$(left)" -gt 150 ] || { echo "== probe $mode skipped: $(left) s left"; continue; }
    timeout -s INT -k 20 $(( $(left) - 15 )) python3 scripts/gpu/spread_probe.py \
      --space scripts/gpu/h200-qwen3-30b-a3b.yaml --params "$CHAIN" --variants "${VARIANTS:-8x192,4x384}" \
      --rounds "${ROUNDS:-4}" --warm-rounds 1 "${flag[@]}" --json "$OUT/spread-probe-moe-$mode.json" \
      --log "$OUT/spread-probe-moe-$mode-server.log" > "$OUT/spread-probe-moe-$mode.log" 2>&1
    echo "== spread probe $mode rc=$?, $(left) s left"; tail -n 3 "$OUT/spread-probe-moe-$mode.log"
  done
}

timer() {
  flag=(); [ "${TIMER_GRAPHS:-fast-start}" = full-graphs ] && flag=(--full-graphs)
  [ "$(left)" -gt 140 ] || { echo "== timer skipped: $(left) s left"; return; }
  limit=$(( $(left) - 20 )); [ "$limit" -gt "${TIMER_S:-1000}" ] && limit=$TIMER_S
  timeout -s INT -k 20 "$limit" python3 -m benchmarks.profile_overhead --space scripts/gpu/h200-llama-8b.yaml \
    --params "$CHAIN" --timer-only --mem-fraction 0.3 --pairs "${PAIRS:-6}" "${flag[@]}" \
    --json "$OUT/timer-overhead.json" > "$OUT/timer-overhead.txt" 2>&1
  echo "== timer rc=$?, $(left) s left"; tail -n 8 "$OUT/timer-overhead.txt"
}

for step in ${STEPS:-probe timer}; do "$step"; done
