#!/usr/bin/env bash
# Runs autotune's own trial path (launch, health wait, streaming benchmark, /metrics phase profile,
# break-even verdict) against REAL SGLang 0.5.17 on a lent H200, with the kit of shared/gpu/:
#   .gpu/site_min.tar.xz   (shared/gpu/build_site.sh .gpu)
#   .gpu/models/{target,draft}  (shared/gpu/make_tiny_models.py .gpu/models)
#   .gpu/tiny.yaml         (a space with backend: sglang over those models)
# Usage on the device, from the repo root:  bash scripts/gpu_trial.sh STEPS...
set -uo pipefail
python3 .gpu/prepare_overlay.py .gpu/site_min.tar.xz >/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__)"
python3 scripts/gpu_trials.py .gpu/tiny.yaml "$OUT" "$@"
