#!/usr/bin/env bash
# One device call (one H200, at most 9 minutes): the lean start's before/after on the 8B shape.
#   carry: .gpu/kit (site.tar.xz from scripts/gpu/build_kit.sh)
#   command: bash scripts/gpu/startup_ab.sh [BUDGET_S]   (timeout_s 560; results in $OUT)
# The set-up and the run: scripts/gpu/ab_call.sh (scripts/gpu/startup_ab.py, log startup-ab.log).
exec bash "$(dirname "$0")/ab_call.sh" startup_ab "$@"
