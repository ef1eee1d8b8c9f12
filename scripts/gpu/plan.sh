#!/usr/bin/env bash
# The GPU plan of the real search, started by scripts/gpu/device.sh (or by hand on any GPU machine):
#   bash scripts/gpu/plan.sh RESULTS_DIR PLAN_S
# 1. the dense 8B shape: real search + the sweep of what it did not measure (real_search.py);
# 2. the device timer's cost on the real GPU (benchmarks.profile_overhead --timer-only);
# 3. the MoE shape: real search + sweep, in whatever time is left.
# Every step bounds itself by the time left, so the plan ends inside PLAN_S.
set -uo pipefail
PLAN_S_DEFAULT=1500
source "$(dirname "$0")/plan_common.sh" "$@"
SPACES=${AUTOTUNE_GPU_SPACES:-"scripts/gpu/h200-llama-8b.yaml scripts/gpu/h200-qwen3-30b-a3b.yaml"}
# Two servers start (each 50-75 s on the H200) before the 6 interleaved pairs: 170 s was too short.
TIMER_S=${AUTOTUNE_GPU_TIMER_S:-300}
# Time kept back from the first space for the timer; 0 gives the first space all of it (GPU time
# that fits one MoE search and nothing more), and the timer then runs only if time is left.
TIMER_RESERVE_S=${AUTOTUNE_GPU_TIMER_RESERVE_S:-$TIMER_S}
set -- $SPACES
first=$1; shift
# The timer's two servers share one GPU at --mem-fraction 0.3 each: the 8B shape fits, the MoE
# shape does not (SGLang asked for more than 0.42 on 2026-12-01), so name the space when the first is MoE.
TIMER_SPACE=${AUTOTUNE_GPU_TIMER_SPACE:-$first}

"$PY" "$HERE/scripts/gpu/real_search.py" "${RESUME[@]}" --out "$RES/rs-$(basename "$first" .yaml)" \
  --deadline-s $(( $(left) - TIMER_RESERVE_S )) "$first"
echo "== first space done, $(left) s left"

if [ -s "$RES/timer-overhead.json" ]; then
  echo "== timer overhead measured before; kept"
elif [ "${AUTOTUNE_GPU_TIMER_PAIRS:-6}" = 0 ]; then
  echo "== timer overhead not asked for (AUTOTUNE_GPU_TIMER_PAIRS=0)"
elif [ "$(left)" -gt 120 ]; then
  timeout -k 15 $(( $(left) < TIMER_S ? $(left) : TIMER_S )) "$PY" -m benchmarks.profile_overhead \
    --space "$TIMER_SPACE" --params '{"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}' \
    --timer-only --mem-fraction 0.3 --pairs ${AUTOTUNE_GPU_TIMER_PAIRS:-6} --json "$RES/timer-overhead.json" \
    > "$RES/timer-overhead.log" 2>&1
  echo "== timer overhead rc=$?, $(left) s left"
fi

for space in "$@"; do
  [ "$(left)" -gt 240 ] || { echo "== skipped $space: $(left) s left"; continue; }
  "$PY" "$HERE/scripts/gpu/real_search.py" "${RESUME[@]}" --out "$RES/rs-$(basename "$space" .yaml)" --deadline-s $(( $(left) - 20 )) "$space"
done
# Start-up breakdown: what SGLang's launcher imports before its first log line, and what the tool's
# own check of a launch command (SGLang's parser) costs, each in a fresh process with warm caches
# (AUTOTUNE_GPU_IMPORT_TIMES=0 skips it: the emulator rehearsals have no launcher to time).
if [ "${AUTOTUNE_GPU_IMPORT_TIMES:-1}" = 1 ] && [ "$(left)" -gt 45 ]; then
  timeout 40 "$PY" -X importtime -c "import sglang.launch_server" 2> "$RES/importtime-launch-server.txt" > /dev/null
  timeout 40 "$PY" -c "import time; t = time.perf_counter(); from autotune.sglang import flags as sglang_flags; sglang_flags.installed_flags(); print(f'installed_flags {time.perf_counter() - t:.2f} s')" > "$RES/import-parser.txt" 2>&1
  echo "== import times taken, $(left) s left"
fi
echo "== plan done after $(( $(date +%s) - T0 )) s"
touch "$RES/plan.done"
