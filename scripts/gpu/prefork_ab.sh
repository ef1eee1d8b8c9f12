#!/usr/bin/env bash
# One device call (one GPU, at most 9 minutes): measure.prefork on the 8B shape (scripts/gpu/standby_ab.py --prefork).
#   carry: .gpu/kit (site.tar.xz from scripts/gpu/build_kit.sh)
#   command: bash scripts/gpu/prefork_ab.sh [BUDGET_S]   (timeout_s 560; results in $OUT)
# Judged by: python3 scripts/gpu/prefork_verdict.py $OUT/standby-ab.json (or its printed standby-ab.log).
exec bash "$(dirname "$0")/ab_call.sh" standby_ab "${1:-470}" --prefork
