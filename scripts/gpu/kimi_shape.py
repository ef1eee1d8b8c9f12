"""Kimi-K2.5's text model, per layer, as a config-only target for 8 H200s (the eight-GPU plan), and its
EAGLE3 draft; with the arithmetic that says how many layers fit.

    python3 scripts/gpu/kimi_shape.py [--gpu-gib G] [--mem-fraction F] [--kv-gib K] [--tp T]

prints the per-GPU bytes of each part and the layer count :func:`fit_layers` picks.

The shape (``SHAPE``; where each figure comes from):

- Moonshot's own model summary (MoonshotAI/Kimi-K2 ``README.md``, "Model Summary"): 61 layers of
  which 1 dense, attention hidden 7168, MoE hidden 2048 per expert, 64 attention heads, 384 experts,
  8 selected per token, 1 shared expert, MLA attention, SwiGLU, vocabulary "160K".
- The ``text_config`` of Kimi-K2.5's ``config.json`` as quoted in public test fixtures (HF's own file
  was not reachable from here): ``model_type kimi_k2``, q_lora_rank 1536, kv_lora_rank 512,
  qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, num_key_value_heads 64,
  intermediate_size 18432 (the dense layer), first_k_dense_replace 1, n_group 1, topk_group 1,
  topk_method noaux_tc, scoring_func sigmoid, norm_topk_prob, routed_scaling_factor 2.827,
  vocab_size 163840, yarn rope scaling (factor 64 over 4096). The same fixtures give 1.03T
  parameters for 61 layers, which :func:`weight_bytes` reproduces (``tests/gpu_kit/test_gpu_multi_prep.py``).
- SGLang serves Kimi K2 with its DeepSeek-V3 model (``DeepseekV3ForCausalLM``); ``model_type``
  ``deepseek_v3`` is written instead of ``kimi_k2`` so that transformers' own DeepseekV3Config loads
  it without the checkpoint's remote code (which a config-only folder does not have).

Kimi-K2.5 ships INT4 expert weights; ``--load-format dummy`` here makes them bf16, so a layer is
about four times the bytes it has in the real checkpoint, and a forward streams four times the
expert bytes: the per-layer *shape* is Kimi's, the per-layer *cost* is a bf16 model's.

How many layers fit (:func:`fit_layers`): SGLang keeps ``mem_fraction_static`` of the GPU's total
memory for weights plus KV cache, and the rest for activations, CUDA graphs and NCCL buffers. So
the weights a GPU holds must leave ``kv_gib`` of that fraction for the KV pool. Per GPU at TP 8 the
target's parts shard as SGLang's DeepSeek-V2/V3 model shards them: the MLA down-projections
(``fused_qkv_a_proj_with_mqa``), the norms and the router are replicated, everything else is split
eight ways; the absorbed MLA copies ``w_kc``/``w_vc`` of ``kv_b_proj`` are counted as a second copy.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

GIB = float(1 << 30)
BF16 = 2
#: An H200's total memory as nvidia-smi reports it on the remote host (facts.txt of every H200 call:
#: 143771 MiB).
H200_GIB = 143771 / 1024
#: SGLang's static share (weights + KV) and the KV pool the weights must leave inside it. 0.85
#: leaves about 21 GiB a GPU for activations, CUDA graphs (decode bs <= 4), NCCL and the MoE kernels'
#: workspace; 4 GiB of MLA cache is about 110k tokens at 29 layers, far more than 4 prompts need.
MEM_FRACTION = 0.85
KV_GIB = 4.0
TP = 8

SHAPE: dict[str, Any] = dict(
    hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_attention_heads=64,
    num_key_value_heads=64, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
    v_head_dim=128, n_routed_experts=384, n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=1,
    moe_layer_freq=1, n_group=1, topk_group=1, topk_method="noaux_tc", scoring_func="sigmoid",
    norm_topk_prob=True, routed_scaling_factor=2.827, vocab_size=163840)
#: The EAGLE3 draft: one Llama layer at the target's hidden size (GQA with 8 KV heads of 128, the
#: dense layer's FFN width), its own full-vocabulary head, as the other shapes' drafts have.
DRAFT_KV_HEADS = 8
DRAFT_HEAD_DIM = 128


def weight_bytes(layers: int, tp: int = TP) -> dict[str, float]:
    """Bytes of bf16 weights one GPU of ``tp`` holds, by part (target layers, embeddings, draft)."""
    s = SHAPE
    h, heads, e = s["hidden_size"], s["num_attention_heads"], s["n_routed_experts"]
    qk = s["qk_nope_head_dim"] + s["qk_rope_head_dim"]
    # MLA: replicated down-projections and their norms; q_b, kv_b (twice: w_kc/w_vc) and o sharded.
    attn_rep = h * (s["q_lora_rank"] + s["kv_lora_rank"] + s["qk_rope_head_dim"]) + s["q_lora_rank"] + s["kv_lora_rank"]
    attn_shard = (s["q_lora_rank"] * heads * qk
                  + 2 * s["kv_lora_rank"] * heads * (s["qk_nope_head_dim"] + s["v_head_dim"])
                  + heads * s["v_head_dim"] * h)
    norms = 2 * h
    # Routed experts and the shared one (SGLang may fuse it into the MoE as one more expert): w13 + w2.
    moe_shard = (e + s["n_shared_experts"]) * 3 * s["moe_intermediate_size"] * h
    router = h * e + e
    dense_shard = 3 * s["intermediate_size"] * h
    dense = min(s["first_k_dense_replace"], layers)
    moe = layers - dense
    per_moe = BF16 * (attn_rep + norms + router + (attn_shard + moe_shard) / tp)
    per_dense = BF16 * (attn_rep + norms + (attn_shard + dense_shard) / tp)
    embed = BF16 * (2 * s["vocab_size"] * h / tp + h)  # embedding, untied lm_head, final norm
    q_out = (heads + 2 * DRAFT_KV_HEADS) * DRAFT_HEAD_DIM
    draft = BF16 * ((2 * h * q_out + heads * DRAFT_HEAD_DIM * h + 3 * s["intermediate_size"] * h
                     + 2 * s["vocab_size"] * h) / tp
                    + 3 * h * h + 4 * h)  # fc (3 hidden states -> 1) is a plain, replicated Linear
    return {"moe_layers": moe * per_moe, "dense_layers": dense * per_dense, "embeddings": embed,
            "draft": draft, "per_moe_layer": per_moe}


def per_gpu_gib(layers: int, tp: int = TP) -> float:
    """Target and draft weights on one GPU, GiB."""
    parts = weight_bytes(layers, tp)
    return (parts["moe_layers"] + parts["dense_layers"] + parts["embeddings"] + parts["draft"]) / GIB


def total_params(layers: int = 61) -> float:
    """The target's parameter count at ``layers`` (no draft): per-GPU bytes at TP 1 over bf16."""
    parts = weight_bytes(layers, tp=1)
    return (parts["moe_layers"] + parts["dense_layers"] + parts["embeddings"]) / BF16


def fit_layers(gpu_gib: float = H200_GIB, mem_fraction: float = MEM_FRACTION, kv_gib: float = KV_GIB,
               tp: int = TP) -> int:
    """The most target layers whose weights (with the draft's) leave ``kv_gib`` of the static share.

    Raises:
        ValueError: Not even the dense first layer and one MoE layer fit.
    """
    budget = gpu_gib * mem_fraction - kv_gib
    layers = 2
    if per_gpu_gib(layers, tp) > budget:
        raise ValueError(f"two layers need {per_gpu_gib(layers, tp):.1f} GiB a GPU at TP {tp}, "
                         f"more than the {budget:.1f} GiB left")
    while per_gpu_gib(layers + 1, tp) <= budget:
        layers += 1
    return layers


def configs(layers: int, common: dict[str, Any]) -> tuple[dict, dict]:
    """The target's and the draft's config.json at ``layers`` target layers."""
    s = SHAPE
    # max_position_embeddings 4096 x 64, as Kimi ships it: yarn derives its factor from the pair.
    target = dict(common, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", **s,
                  max_position_embeddings=4096 * 64,
                  num_hidden_layers=layers, num_nextn_predict_layers=0, rms_norm_eps=1e-5,
                  rope_theta=50000.0, ep_size=1, aux_loss_alpha=0.001, seq_aux=True,
                  rope_scaling={"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0})
    # No eagle_config: SGLang's DeepSeek model then taps the hidden states at [2, L // 2, L - 3]
    # (0.5.23's set_eagle3_layers_to_capture), which at 61 layers is the seed's [2, 30, 58] and
    # keeps the same relative depths at L. An explicit list would be read differently by releases
    # (0.5.23 shifts it by one only when it starts at 1).
    draft = dict(common, architectures=["LlamaForCausalLMEagle3"], model_type="llama",
                 hidden_size=s["hidden_size"], intermediate_size=s["intermediate_size"],
                 num_attention_heads=s["num_attention_heads"], num_key_value_heads=DRAFT_KV_HEADS,
                 head_dim=DRAFT_HEAD_DIM, vocab_size=s["vocab_size"], draft_vocab_size=s["vocab_size"],
                 target_hidden_size=s["hidden_size"], num_hidden_layers=1, rms_norm_eps=1e-5,
                 rope_theta=50000.0, mlp_bias=False)
    return target, draft


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-gib", type=float, default=H200_GIB)
    parser.add_argument("--mem-fraction", type=float, default=MEM_FRACTION)
    parser.add_argument("--kv-gib", type=float, default=KV_GIB)
    parser.add_argument("--tp", type=int, default=TP)
    args = parser.parse_args(argv)
    layers = fit_layers(args.gpu_gib, args.mem_fraction, args.kv_gib, args.tp)
    parts = weight_bytes(layers, args.tp)
    budget = args.gpu_gib * args.mem_fraction - args.kv_gib
    print(f"GPU {args.gpu_gib:.1f} GiB x mem_fraction_static {args.mem_fraction} = "
          f"{args.gpu_gib * args.mem_fraction:.1f} GiB static; less {args.kv_gib:g} GiB KV: "
          f"{budget:.1f} GiB for weights")
    print(f"per GPU at TP {args.tp}: {parts['per_moe_layer'] / GIB:.3f} GiB per MoE layer, "
          f"{parts['dense_layers'] / GIB:.3f} dense layer(s), {parts['embeddings'] / GIB:.3f} embeddings + lm_head, "
          f"{parts['draft'] / GIB:.3f} EAGLE3 draft")
    print(f"layers: {layers} ({per_gpu_gib(layers, args.tp):.1f} GiB a GPU; {layers + 1} would need "
          f"{per_gpu_gib(layers + 1, args.tp):.1f}); the full 61 would need {per_gpu_gib(61, args.tp):.1f}")
    print(f"target parameters at {layers} layers: {total_params(layers) / 1e9:.0f}B (61 layers: "
          f"{total_params(61) / 1e9:.0f}B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
