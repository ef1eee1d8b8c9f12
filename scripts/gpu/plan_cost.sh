#!/usr/bin/env bash
# The cost-per-answer run (issue 33): the 8B space's search with the product's defaults (measurement
# in rounds, the stop rule, lean start), and no sweep: the sweep it is held against is the eighth
# GPU run's, the same space measured config by config (docs/measurements/raw/real-search-h200-8/).
#   AUTOTUNE_GPU_PLAN=scripts/gpu/plan_cost.sh AUTOTUNE_GPU_MODELS=llama-8b bash scripts/gpu/device.sh CALL_S PLAN_S
# With AUTOTUNE_STANDBY_AB_S=S the plan first runs the standby A/B (scripts/gpu/standby_ab.py, S
# seconds, AUTOTUNE_STANDBY_AB_CYCLES cycles at most, default 3) on the same GPU, and the search runs
# with measure.standby on where scripts/gpu/standby_verdict.py passes it and off where it fails
# (the space's copy says which, over SGLang's default of on): one device call answers both, without
# a person deciding between calls (a host is given back 30 s after a call).
# With AUTOTUNE_STANDBY=on or off instead, the search runs with measure.standby so and no A/B; with
# it on, its records and server logs carry the checks the verdict would make (the standby's CPU
# over each measurement, its launches, the KV pool sizes).
set -uo pipefail
PLAN_S_DEFAULT=1100
source "$(dirname "$0")/plan_common.sh" "$@"
SPACE=${AUTOTUNE_GPU_SPACES:-scripts/gpu/h200-llama-8b.yaml}
OUTDIR=$RES/rs-$(basename "$SPACE" .yaml)  # named for the shipped space, with a standby or not
# The space's copy beside it with measure.standby True or False (scripts/gpu/standby_verdict.py).
standby_copy() {
  "$PY" -c 'import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1])
from standby_verdict import write_space; print(write_space(Path(sys.argv[2]), standby=sys.argv[3] == "True"))' \
    "$HERE/scripts/gpu" "$SPACE" "$1"
}
if [ -n "${AUTOTUNE_STANDBY_AB_S:-}" ]; then
  AB=$RES/standby-ab
  if [ ! -f "$AB/verdict.txt" ]; then  # a resumed plan keeps the verdict its first host gave
    mkdir -p "$AB"
    "$PY" "$HERE/scripts/gpu/standby_ab.py" --space "$SPACE" --budget-s "$AUTOTUNE_STANDBY_AB_S" \
      --cycles "${AUTOTUNE_STANDBY_AB_CYCLES:-3}" --out "$AB" > "$AB/standby-ab.log" 2>&1
    "$PY" "$HERE/scripts/gpu/standby_verdict.py" "$AB/standby-ab.json" > "$AB/verdict.txt"
  fi
  cat "$AB/verdict.txt"
  # The recorded verdict decides (not a new reading of the JSON): its first word, PASS or FAIL.
  if head -n 1 "$AB/verdict.txt" | grep -q '^PASS'; then ON=True; else ON=False; fi
  SPACE=$(standby_copy "$ON")
  echo "== the search's space: $SPACE"
elif [ -n "${AUTOTUNE_STANDBY:-}" ]; then
  case "$AUTOTUNE_STANDBY" in on) ON=True ;; off) ON=False ;;
    *) echo "AUTOTUNE_STANDBY=$AUTOTUNE_STANDBY: on or off" >&2; exit 2 ;; esac
  SPACE=$(standby_copy "$ON")
  echo "== the search's space: $SPACE (measure.standby $AUTOTUNE_STANDBY, no A/B)"
fi
"$PY" "$HERE/scripts/gpu/real_search.py" "${RESUME[@]}" --no-sweep --out "$OUTDIR" \
  --deadline-s $(( $(left) - 20 )) "$SPACE"
echo "== plan done after $(( $(date +%s) - T0 )) s"
touch "$RES/plan.done"
