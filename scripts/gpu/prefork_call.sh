#!/usr/bin/env bash
# One device call (one GPU, at most 9.5 minutes): which of SGLang's scheduler imports come before CUDA's
# first initialisation (scripts/gpu/prefork_probe.py), then the fork server's A/B with those modules
# imported ahead (scripts/gpu/standby_ab.py --prefork --prefork-modules).
#   carry: .gpu/kit (site.tar.xz from scripts/gpu/build_kit.sh)
#   command: bash scripts/gpu/prefork_call.sh [BUDGET_S]   (timeout_s 580; results in $OUT)
# Judged by: python3 scripts/gpu/prefork_verdict.py $OUT/standby-ab.json
# Without the probe (about 100 s less of a call), the fork server imports the children's top modules
# whole, in their own order, with the device questions answered; its status names the first CUDA
# initialisation if one still happens:
#   bash scripts/gpu/ab_call.sh standby_ab 450 --prefork --prefork-modules scripts/gpu/prefork-top-modules.txt
set -uo pipefail
T0=$(date +%s)
BUDGET_S=${1:-545}
OUT=${OUT:-/tmp/out}
HERE=$(dirname "$0")
bash "$HERE/ab_call.sh" prefork_probe 150 || exit 1
[ -s "$OUT/prefork-modules.txt" ] || { echo "the probe found no import before CUDA's initialisation"; exit 1; }
bash "$HERE/ab_call.sh" standby_ab $(( BUDGET_S - ($(date +%s) - T0) )) --prefork --prefork-modules "$OUT/prefork-modules.txt"
