#!/usr/bin/env bash
# One device call (one GPU, at most 9.5 minutes): a fork-server A/B on the 8B shape
# (scripts/gpu/standby_ab.py --prefork; AB_BUDGET_S 0 skips it), then stack-sampled warm launches of
# the same config (scripts/gpu/launcher_profile.py: where the launcher's seconds before its scheduler
# starts go), PROFILES of them (default 2), with the backend's main_block imported first where
# PROFILE_ARGS=--main-block.
#   carry: .gpu/kit (site.tar.xz from scripts/gpu/build_kit.sh)
#   command: bash scripts/gpu/launcher_call.sh [AB_BUDGET_S]   (timeout_s 590; results in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/out}
HERE=$(dirname "$0")
if [ "${1:-380}" -gt 0 ]; then bash "$HERE/ab_call.sh" standby_ab "${1:-380}" --prefork; else [ -d /tmp/site ] || python3 scripts/gpu/prepare_kit.py .gpu/kit/site.tar.xz; python3 scripts/gpu/make_models.py .gpu/models llama-8b; fi
rc=$?
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/tmp/site/xgrammar${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The config and environment of the last prefork run of the 2026-12-06 A/B (3-1-4, lean start).
tar -xJf docs/measurements/raw/h100-2026-12-06b/prefork-ab/runs.tar.xz -C /tmp ./run-04-prefork.json
for i in $(seq "${PROFILES:-2}"); do
  timeout 200 setsid -w python3 scripts/gpu/launcher_profile.py --run-json /tmp/run-04-prefork.json \
    --out "$OUT" --label "$i" ${PROFILE_ARGS:-} > "$OUT/launcher-profile-$i.log" 2>&1
  echo "== profile $i (rc $?)"; cat "$OUT/launcher-profile-$i.txt" 2>/dev/null || tail -n 30 "$OUT/launcher-profile-$i.log"
done
( cd "$OUT" && tar -cJf launcher-profile.tar.xz launcher-profile-* && rm -f launcher-profile-*.log launcher-profile-*.json )
ls "$OUT"
exit "$rc"
