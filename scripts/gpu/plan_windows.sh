#!/usr/bin/env bash
# Windows sized for batch (issue 34, Deliver 2) on one H200, in ONE device call of at most 9 minutes:
#   run(kind=nvidia-h200, carry=[".gpu/kit"], timeout_s=570,
#       command="AUTOTUNE_GPU_PLAN=scripts/gpu/plan_windows.sh AUTOTUNE_GPU_MODELS=llama-8b bash scripts/gpu/device.sh 540 450")
# or by hand on any GPU machine: bash scripts/gpu/plan_windows.sh RESULTS_DIR PLAN_S
# One config's repeats at concurrency 16 and 64 (scripts/gpu/batch_repeats.py) on a workload sized to
# 6 waves of 64 (384 requests x 256 tokens), with the steady window: per level, the objective's
# repeats and load, then the whole-window and steady figures side by side (median, spread, range).
# Figures to reach (issue 34): the objective's range <= 2% and robust spread <= 1% at 16 and at 64.
# Dry run on the emulator: AUTOTUNE_WINDOWS_SPACE=scripts/gpu/sim-llama-8b-windows.yaml \
#   PYTHON=.venv/bin/python bash scripts/gpu/plan_windows.sh /tmp/windows-res 1800
set -uo pipefail
PLAN_S_DEFAULT=450
source "$(dirname "$0")/plan_common.sh" "$@"
SPACE=${AUTOTUNE_WINDOWS_SPACE:-scripts/gpu/h200-llama-8b-windows.yaml}
PARAMS='{"speculative_num_steps": 3, "speculative_num_draft_tokens": 4}'
mkdir -p "$RES"

timeout -k 15 $(( $(left) - 10 )) "$PY" "$HERE/scripts/gpu/batch_repeats.py" "$SPACE" "$PARAMS" \
  "$RES/windows-repeats.json" > "$RES/windows-repeats.log" 2>&1
echo "== windows rc=$?, $(left) s left"; tail -n 9 "$RES/windows-repeats.log"
echo "== plan done after $(( $(date +%s) - T0 )) s"
touch "$RES/plan.done"
