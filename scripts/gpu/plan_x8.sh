#!/usr/bin/env bash
# The eight-GPU plan on a remote host with eight H200s (nvidia-h200-x8), started by scripts/gpu/device.sh
# (AUTOTUNE_GPU_PLAN=scripts/gpu/plan_x8.sh AUTOTUNE_GPU_MODELS=kimi-k2.5) or by hand:
#   bash scripts/gpu/plan_x8.sh RESULTS_DIR PLAN_S
# 1. The sweep first: plain decoding and EAGLE3 chains of 1, 2, 3 and 5 steps (topk 1) of the
#    Kimi-K2.5-shaped MoE at TP 8 (h200x8-kimi-k2.5-tp8.sweep.json), each through
#    python -m autotune.trial beside the sweep's own baseline: the per-config verify share,
#    break-even and speedup that scripts/gpu/kimi_compare.py sets beside the seed and the emulator.
# 2. Then the phase-model search over the space (chains and topk-2 trees), 8 trials, whose verdict
#    kimi_compare.py holds against the sweep's.
# This takes more than 30 minutes of GPU time, more than a host may be held for (a trial of this shape
# is guessed at 4-6 minutes): carry the state (scripts/gpu/state.sh) and the plan resumes where it stopped.
# Prepared on the CPU machine and rehearsed on the emulator; not run on GPUs yet.
set -uo pipefail
PLAN_S_DEFAULT=1650
source "$(dirname "$0")/plan_common.sh" "$@"
SPACE=${AUTOTUNE_GPU_KIMI_SPACE:-$HERE/scripts/gpu/h200x8-kimi-k2.5-tp8.yaml}
SWEEP=${AUTOTUNE_GPU_KIMI_SWEEP:-$HERE/scripts/gpu/h200x8-kimi-k2.5-tp8.sweep.json}
# A step is not begun with less than this left (real_search.py): a TP-8 start of a 29-layer MoE
# is not measured yet; the single-GPU MoE shape took 104-121 s to start, 180 s a trial.
export AUTOTUNE_GPU_TRIAL_S=${AUTOTUNE_GPU_TRIAL_S:-300}
mkdir -p "$RES"

"$PY" "$HERE/scripts/gpu/real_search.py" "${RESUME[@]}" --out "$RES/rs-$(basename "$SPACE" .yaml)" \
  --deadline-s $(( $(left) - 20 )) --sweep "$SWEEP" --sweep-first "$SPACE"
echo "== plan done after $(( $(date +%s) - T0 )) s"
touch "$RES/plan.done"
