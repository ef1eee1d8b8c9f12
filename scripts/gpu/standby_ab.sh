#!/usr/bin/env bash
# One device call (one H200, at most 9 minutes): measure.standby on the 8B shape (scripts/gpu/standby_ab.py).
#   carry: .gpu/kit (site.tar.xz from scripts/gpu/build_kit.sh)
#   command: bash scripts/gpu/standby_ab.sh [BUDGET_S]   (timeout_s 560; results in $OUT)
# The set-up and the run: scripts/gpu/ab_call.sh (scripts/gpu/standby_ab.py, log standby-ab.log).
exec bash "$(dirname "$0")/ab_call.sh" standby_ab "$@"
