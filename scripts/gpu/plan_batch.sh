#!/usr/bin/env bash
# Measurement at batch (issue 34) on one H200, in ONE device call of at most 9 minutes:
#   run(kind=nvidia-h200, carry=[".gpu/kit"], timeout_s=570,
#       command="AUTOTUNE_GPU_PLAN=scripts/gpu/plan_batch.sh AUTOTUNE_GPU_MODELS=llama-8b bash scripts/gpu/device.sh 540 450")
# or by hand on any GPU machine: bash scripts/gpu/plan_batch.sh RESULTS_DIR PLAN_S
# 1. one config's repeats at concurrency 16 and 64 with the load tracking (scripts/gpu/batch_repeats.py):
#    SGLang caps a speculative config at 48 running, so every c64 window must be flagged, no c16 one;
# 2. the agreement benchmark (benchmarks.agreement): autotune's client against sglang.bench_serving on
#    identical requests at concurrency 1, 16 and 64, interleaved, cache flushed.
# Dry run on the emulator: AUTOTUNE_BATCH_SPACE=scripts/gpu/sim-llama-8b-batch.yaml PYTHON=.venv/bin/python \
#   SGLANG_PYTHON=.venv-sglang-data/bin/python bash scripts/gpu/plan_batch.sh /tmp/batch-res 1800
set -uo pipefail
PLAN_S_DEFAULT=450
source "$(dirname "$0")/plan_common.sh" "$@"
SPACE=${AUTOTUNE_BATCH_SPACE:-scripts/gpu/h200-llama-8b-batch.yaml}
PARAMS='{"speculative_num_steps": 3, "speculative_num_draft_tokens": 4}'
SGLANG_PY=${SGLANG_PYTHON:-$PY}
mkdir -p "$RES"

timeout -k 15 $(( $(left) - 150 )) "$PY" "$HERE/scripts/gpu/batch_repeats.py" "$SPACE" "$PARAMS" \
  "$RES/batch-repeats.json" > "$RES/batch-repeats.log" 2>&1
echo "== repeats rc=$?, $(left) s left"; tail -n 5 "$RES/batch-repeats.log"

if [ "$(left)" -gt 120 ]; then
  # sglang.bench_serving's dataset package imports `datasets` at import time: the kit's stand-in.
  PYTHONPATH="$PYTHONPATH:/tmp/site/_standins" timeout -k 15 $(( $(left) - 10 )) "$PY" -m benchmarks.agreement --space "$SPACE" --params "$PARAMS" \
    --concurrency 1 16 64 --rounds 3 --sglang-python "$SGLANG_PY" --json "$RES/agreement.json" \
    > "$RES/agreement.log" 2>&1
  echo "== agreement rc=$?, $(left) s left"; tail -n 8 "$RES/agreement.log"
else
  echo "== agreement skipped: $(left) s left"
fi
echo "== plan done after $(( $(date +%s) - T0 )) s"
touch "$RES/plan.done"
