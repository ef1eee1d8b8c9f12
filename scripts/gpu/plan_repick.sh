#!/usr/bin/env bash
# The cost surface's proof (issue 37, deliverable 5) as a GPU plan for scripts/gpu/device.sh, one H200,
# one call:
#   AUTOTUNE_GPU_PLAN=scripts/gpu/plan_repick.sh AUTOTUNE_GPU_MODELS=llama-8b bash scripts/gpu/device.sh 540 480
# (carry .gpu/kit). It measures the configs of scripts/gpu/repick-configs.jsonl at acceptance A (the
# space's synthetic_acceptance) and B (REPICK_RATES_B), a pair at a time while a pair still fits
# (REPICK_PAIR_S), predicts B from A's cost surface and repicks (scripts/gpu/repick_proof.py).
# Results: $RES/repick/{a,b}.jsonl, surface_a.json, proof.json, proof.log.
# Dry run on the emulator: AUTOTUNE_GPU_REPICK_SPACE=<a sim space> bash scripts/gpu/plan_repick.sh DIR 400
set -uo pipefail
PLAN_S_DEFAULT=480
source "$(dirname "$0")/plan_common.sh" "$@"
SPACE=${AUTOTUNE_GPU_REPICK_SPACE:-$HERE/scripts/gpu/h200-llama-8b-repick.yaml}
CONFIGS=${AUTOTUNE_GPU_REPICK_CONFIGS:-$HERE/scripts/gpu/repick-configs.jsonl}
RATES_B=${REPICK_RATES_B:-"[0.60, 0.50, 0.42, 0.35, 0.30]"}
# A pair is two server starts (50-75 s each on the H200) and two short measurements.
PAIR_S=${REPICK_PAIR_S:-170}
# Configs measured at B only (their prediction interpolated), after the pairs as time allows.
B_ONLY=(); [ -n "${REPICK_B_ONLY:-}" ] && B_ONLY=(--b-only "$REPICK_B_ONLY")
mkdir -p "$RES/repick"
"$PY" "$HERE/scripts/gpu/repick_proof.py" --space "$SPACE" --configs "$CONFIGS" --rates-b "$RATES_B" \
  --out "$RES/repick" --deadline-s $(( $(left) - 15 )) --pair-s "$PAIR_S" "${B_ONLY[@]}" 2>&1 | tee "$RES/repick/proof.log"
echo "== repick proof rc=${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s"
touch "$RES/plan.done"
