#!/usr/bin/env bash
# One device call (one H200, at most 9 minutes) of a start-up A/B on the 8B shape:
#   bash scripts/gpu/ab_call.sh NAME [BUDGET_S [ARG...]]   (NAME: startup_ab or standby_ab, ARGs passed to it;
#   run through their wrappers)
#   carry: .gpu/kit (site.tar.xz from scripts/gpu/build_kit.sh); timeout_s 560; results in $OUT
# A call brings back at most 8 files from $OUT: the run records and server logs go into one
# runs.tar.xz, beside prepare.log, NAME's log and its JSON (a 3-cycle A/B wrote 20 and lost its JSON).
# Unpacks the kit and writes the 8B model configs (as scripts/gpu/device.sh does), then runs
# scripts/gpu/NAME.py for BUDGET_S seconds (default 470) less the set-up's time.
set -uo pipefail
T0=$(date +%s)
NAME=$1
BUDGET_S=${2:-470}
shift $(( $# < 2 ? $# : 2 ))
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/tmp/site/xgrammar${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{ [ -d /tmp/site ] || python3 scripts/gpu/prepare_kit.py "${KIT:-.gpu/kit/site.tar.xz}"
  python3 scripts/gpu/make_models.py .gpu/models llama-8b
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import sglang; print('sglang', sglang.__version__)"
} > "$OUT/prepare.log" 2>&1 || { cat "$OUT/prepare.log"; exit 1; }
tail -n 2 "$OUT/prepare.log"
LEFT=$(( BUDGET_S - ($(date +%s) - T0) ))
echo "== set-up took $(( $(date +%s) - T0 )) s; runs get ${LEFT} s"
python3 "scripts/gpu/$NAME.py" --budget-s "$LEFT" --out "$OUT" "$@" 2>&1 | tee "$OUT/${NAME//_/-}.log"
rc=${PIPESTATUS[0]}
( cd "$OUT" && shopt -s nullglob && set -- run-*.json [l]ogs && [ $# -gt 0 ] && tar -cJf runs.tar.xz "$@" && rm -rf "$@" )
ls "$OUT"
exit "$rc"
