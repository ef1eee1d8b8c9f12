#!/usr/bin/env bash
# The agreement benchmark alone (issue 34, Deliver 4) on one H200, in ONE device call, at the window the
# product now sizes by default for batch (6 waves of the concurrency; plan_batch.sh ran 2 waves):
#   AUTOTUNE_GPU_PLAN=scripts/gpu/plan_agreement.sh AUTOTUNE_GPU_MODELS=llama-8b bash scripts/gpu/device.sh 540 420
# or by hand on any GPU machine: bash scripts/gpu/plan_agreement.sh RESULTS_DIR PLAN_S
# AGREEMENT_LEVELS (default "1 16 64") and AGREEMENT_ROUNDS (3) narrow it; AUTOTUNE_BATCH_SPACE another space.
# Dry run on the emulator: AUTOTUNE_BATCH_SPACE=scripts/gpu/sim-llama-8b-batch.yaml PYTHON=.venv/bin/python \
#   SGLANG_PYTHON=.venv-sglang-data/bin/python bash scripts/gpu/plan_agreement.sh /tmp/agree-res 1800
set -uo pipefail
PLAN_S_DEFAULT=420
source "$(dirname "$0")/plan_common.sh" "$@"
SPACE=${AUTOTUNE_BATCH_SPACE:-scripts/gpu/h200-llama-8b-batch.yaml}
PARAMS='{"speculative_num_steps": 3, "speculative_num_draft_tokens": 4}'
SGLANG_PY=${SGLANG_PYTHON:-$PY}
WAVES=${AGREEMENT_WAVES:-6}
mkdir -p "$RES"
# sglang.bench_serving's dataset package imports `datasets` at import time: the kit's stand-in.
PYTHONPATH="$PYTHONPATH:/tmp/site/_standins" timeout -k 15 $(( $(left) - 10 )) "$PY" -m benchmarks.agreement --space "$SPACE" --params "$PARAMS" \
  --concurrency ${AGREEMENT_LEVELS:-1 16 64} --rounds ${AGREEMENT_ROUNDS:-3} --waves "$WAVES" --sglang-python "$SGLANG_PY" --json "$RES/agreement.json" \
  > "$RES/agreement.log" 2>&1
echo "== agreement rc=$?, $(left) s left"; tail -n 8 "$RES/agreement.log"
echo "== plan done after $(( $(date +%s) - T0 )) s"
touch "$RES/plan.done"
