#!/usr/bin/env bash
# The two-GPU plan on a remote host with two H200s (nvidia-h200-x2), started by scripts/gpu/device.sh
# (AUTOTUNE_GPU_PLAN=scripts/gpu/plan_x2.sh AUTOTUNE_GPU_MODELS=llama-8b) or by hand:
#   bash scripts/gpu/plan_x2.sh RESULTS_DIR PLAN_S
# 1. The TP search (scripts/gpu/h200x2-llama-8b-tp.yaml: TP 1/2, custom all-reduce, NCCL protocol,
#    the NCCL pre-screen at 3 rounds first), then the side-by-side sweep of the TP 1 and TP 2
#    configs the search did not measure (h200x2-llama-8b-tp.sweep.json), on one machine, one workload.
# 2. Two trials at once, one GPU each (h200x2-llama-8b-conc2.yaml), then each config alone on the
#    GPU its trial had (real_search.py --alone). It is kept CONC_RESERVE_S of the plan, so a TP
#    search that runs long is cut (and resumed on the next host) rather than this step lost.
# Prepared on the CPU machine and rehearsed on the emulator (tests/gpu_kit/test_gpu_multi_prep.py); not
# run on GPUs yet. Every step bounds itself by the time left.
set -uo pipefail
PLAN_S_DEFAULT=1650
source "$(dirname "$0")/plan_common.sh" "$@"
TP_SPACE=${AUTOTUNE_GPU_TP_SPACE:-$HERE/scripts/gpu/h200x2-llama-8b-tp.yaml}
TP_SWEEP=${AUTOTUNE_GPU_TP_SWEEP:-$HERE/scripts/gpu/h200x2-llama-8b-tp.sweep.json}
CONC_SPACE=${AUTOTUNE_GPU_CONC_SPACE:-$HERE/scripts/gpu/h200x2-llama-8b-conc2.yaml}
# The concurrency step: a baseline (~120 s), the two trials side by side (~130 s), the search's
# finalist beside a fresh baseline (~240 s), each config alone (~250 s); 8B servers of the
# single-H200 runs took 110-130 s each, start-up included.
CONC_RESERVE_S=${AUTOTUNE_GPU_CONC_RESERVE_S:-780}
mkdir -p "$RES"
CONC_OUT="$RES/rs-$(basename "$CONC_SPACE" .yaml)"
# A plan resumed after step 2 finished on an earlier machine keeps nothing back for it.
if "$PY" - "$CONC_OUT/plan.json" <<'PY'
import json, sys
try:
    steps = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(1)
want = [s["to_measure"] for s in steps if s.get("step") == "alone-plan"]
done = [s for s in steps if s.get("step") == "alone" and (s.get("rc") == 0 or s.get("kept"))]
sys.exit(0 if want and len(done) >= want[-1] else 1)
PY
then CONC_RESERVE_S=0; echo "== two-at-once step done on an earlier machine: nothing kept back for it"; fi

"$PY" "$HERE/scripts/gpu/real_search.py" "${RESUME[@]}" --out "$RES/rs-$(basename "$TP_SPACE" .yaml)" \
  --deadline-s $(( $(left) - CONC_RESERVE_S )) --sweep "$TP_SWEEP" "$TP_SPACE"
echo "== TP search and side-by-side done, $(left) s left"
"$PY" "$HERE/scripts/gpu/real_search.py" "${RESUME[@]}" --out "$CONC_OUT" \
  --deadline-s $(( $(left) - 20 )) --no-sweep --alone "$CONC_SPACE"
echo "== plan done after $(( $(date +%s) - T0 )) s"
touch "$RES/plan.done"
