#!/usr/bin/env bash
# The cost-per-answer run (issue 33): the 8B space's search with the product's defaults (measurement
# in rounds, the stop rule, lean start), and no sweep: the sweep it is held against is the eighth
# GPU run's, the same space measured config by config (docs/measurements/raw/real-search-h200-8/).
#   AUTOTUNE_GPU_PLAN=scripts/gpu/plan_cost.sh AUTOTUNE_GPU_MODELS=llama-8b bash scripts/gpu/device.sh CALL_S PLAN_S
set -uo pipefail
PLAN_S_DEFAULT=1100
source "$(dirname "$0")/plan_common.sh" "$@"
SPACE=${AUTOTUNE_GPU_SPACES:-scripts/gpu/h200-llama-8b.yaml}
"$PY" "$HERE/scripts/gpu/real_search.py" "${RESUME[@]}" --no-sweep --out "$RES/rs-$(basename "$SPACE" .yaml)" \
  --deadline-s $(( $(left) - 20 )) "$SPACE"
echo "== plan done after $(( $(date +%s) - T0 )) s"
touch "$RES/plan.done"
