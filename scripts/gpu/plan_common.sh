# Sourced by every GPU plan (plan.sh, plan_x2.sh, plan_x8.sh) after it sets PLAN_S_DEFAULT:
#   source "$(dirname "$0")/plan_common.sh" "$@"
# One clock and one resume rule for all of them: RES and PLAN_S from the arguments (RESULTS_DIR
# [PLAN_S]); left, the seconds of the plan still to go; PY; HERE, the repository, on PYTHONPATH;
# RESUME, --resume for real_search.py when scripts/gpu/state.sh restored an earlier host's state.
RES=$1
PLAN_S=${2:-$PLAN_S_DEFAULT}
T0=$(date +%s)
left() { echo $(( PLAN_S - ($(date +%s) - T0) )); }
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
RESUME=(); [ -f "$RES/resumed" ] && RESUME=(--resume)
