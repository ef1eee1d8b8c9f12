#!/usr/bin/env bash
# One call on the remote GPU host for the real search, from the repo root there. The host takes one
# command per call, with a time limit per call (600 s) and a limit on what a call carries (64 MiB:
# scripts/gpu/carry.py); it may be released 30 s after a call, so a later call can find a fresh host.
#   carry: .gpu/kit (site.tar.xz from scripts/gpu/build_kit.sh)
#   command: [STATE=.gpu/state] bash scripts/gpu/device.sh CALL_S [PLAN_S]
#   (STATE: the last call's results.tar.gz and mlruns.tar.gz, carried, so that a fresh host resumes)
# The multi-GPU plans (two H200s, eight H200s; docs/gpu-validation.md, "Multi-GPU runs") are this
# call with another plan and other model shapes:
#   AUTOTUNE_GPU_PLAN=scripts/gpu/plan_x2.sh AUTOTUNE_GPU_MODELS=llama-8b bash scripts/gpu/device.sh ...
#   AUTOTUNE_GPU_PLAN=scripts/gpu/plan_x8.sh AUTOTUNE_GPU_MODELS=kimi-k2.5 bash scripts/gpu/device.sh ...
# The first call on a fresh host unpacks the kit, writes the model configs, checks the imports
# and starts scripts/gpu/plan.sh in its own session (setsid), so the plan outlives the call. This
# call and any later call made while the host is still up only watch it: each returns after
# CALL_S seconds (or when the plan ends) with a snapshot of everything so far in $OUT (the folder
# whose files come back with the call). A host released between calls loses the rest of the
# plan, never what a snapshot brought back.
set -uo pipefail
CALL_S=${1:-560}
PLAN_S=${2:-1500}
T0=$(date +%s)
OUT=${OUT:-/tmp/out}
RES=/tmp/autotune-gpu
PLAN=${AUTOTUNE_GPU_PLAN:-scripts/gpu/plan.sh}
MODELS=${AUTOTUNE_GPU_MODELS:-llama-8b qwen3-30b-a3b}
mkdir -p "$OUT" "$RES"
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# tvm_ffi finds xgrammar's bindings through the wheel RECORD the kit drops, else on this path.
export LD_LIBRARY_PATH=/tmp/site/xgrammar${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

snapshot() { bash scripts/gpu/state.sh snapshot "$RES" "$OUT"; }

if [ ! -f "$RES/started" ]; then
  # A fresh host after one that was released: carry the last call's files in $STATE (results.tar.gz,
  # mlruns.tar.gz) and the plan resumes there instead of starting over.
  if [ -n "${STATE:-}" ] && ls "$STATE"/results.tar.?z >/dev/null 2>&1; then bash scripts/gpu/state.sh restore "$RES" "$STATE" || exit 1; fi
  { python3 scripts/gpu/prepare_kit.py "${KIT:-.gpu/kit/site.tar.xz}"
    python3 scripts/gpu/make_models.py .gpu/models $MODELS
    # The configs travel with the results: the comparison scripts read the layer count from them.
    for d in .gpu/models/*/*/; do r=${d#.gpu/models/}; mkdir -p "$RES/models/$r" && cp "$d/config.json" "$RES/models/$r"; done
  } > "$RES/prepare.log" 2>&1
  { date -u; nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
    nvidia-smi topo -m 2>/dev/null | head -12  # how the GPUs of a multi-GPU host are linked
    python3 --version; nproc; free -g | head -2
    # Read back by collect_search.py: the records' log paths under it become <results>/...
    echo "results_dir $RES"
    python3 -c "import sglang.srt.server_args, sglang, torch, ray, optuna, mlflow, sqlalchemy, alembic, httpx; from ray import tune; from ray.tune.search.optuna import OptunaSearch; print('sglang', sglang.__version__, 'torch', torch.__version__, 'ray', ray.__version__, 'optuna', optuna.__version__, 'mlflow', mlflow.__version__, 'cuda', torch.version.cuda)"
  } > "$RES/facts.txt" 2>&1
  cat "$RES/prepare.log" "$RES/facts.txt"
  if ! grep -q "^sglang " "$RES/facts.txt"; then
    echo "== kit import check failed; nothing started"; snapshot; exit 1
  fi
  date +%s > "$RES/started"
  echo "== set-up took $(( $(date +%s) - T0 )) s; plan gets ${PLAN_S} s"
  setsid nohup bash "$PLAN" "$RES" "$PLAN_S" > "$RES/plan.log" 2>&1 < /dev/null &
  echo $! > "$RES/plan.pid"
fi

last=0
while [ $(( $(date +%s) - T0 )) -lt "$CALL_S" ] && [ ! -f "$RES/plan.done" ]; do
  sleep 10
  if [ $(( $(date +%s) - last )) -ge 90 ]; then snapshot; last=$(date +%s); fi
done
snapshot
echo "== call ended after $(( $(date +%s) - T0 )) s; plan done: $([ -f "$RES/plan.done" ] && echo yes || echo no)"
tail -n 25 "$RES/plan.log"
