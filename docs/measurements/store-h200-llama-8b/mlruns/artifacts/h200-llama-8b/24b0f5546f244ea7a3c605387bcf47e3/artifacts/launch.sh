#!/usr/bin/env bash
export HF_HUB_OFFLINE=1
export NCCL_NVLS_ENABLE=0
export NVSHMEM_DISABLE_NVLS=1
export SGLANG_ENABLE_METRICS_DEVICE_TIMER=1
export SGLANG_SIMULATE_ACC_LEN=2.975
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export TRANSFORMERS_OFFLINE=1
# trial-only (what this trial ran; never exported): --disable-prefill-cuda-graph
python -m sglang.launch_server \
  --model-path /work/main/.gpu/models/llama-8b/target \
  --speculative-draft-model-path /work/main/.gpu/models/llama-8b/draft \
  --host 127.0.0.1 \
  --attention-backend triton \
  --context-length 4096 \
  --cuda-graph-max-bs-decode 4 \
  --disable-prefill-cuda-graph \
  --enable-metrics \
  --grammar-backend none \
  --load-format dummy \
  --mem-fraction-static 0.6 \
  --sampling-backend pytorch \
  --speculative-algorithm EAGLE3 \
  --speculative-eagle-topk 4 \
  --speculative-num-draft-tokens 8 \
  --speculative-num-steps 2 \
  --tp-size 1
