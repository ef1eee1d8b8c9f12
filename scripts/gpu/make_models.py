"""Config-only target models with EAGLE3 drafts and local tokenizers, for ``--load-format dummy``.

Usage (on the remote GPU host or here): ``python3 scripts/gpu/make_models.py OUTDIR [SHAPE[:LAYERS] ...]``
with SHAPE among ``llama-8b`` (Llama-3.1-8B: hidden 4096, 32 layers, vocab 128256),
``qwen3-30b-a3b`` (Qwen3-30B-A3B MoE: 48 layers, 128 experts, top-8), ``kimi-k2.5`` (Kimi-K2.5's
text model per layer, DeepSeek-V3 architecture: MLA, 384 experts, top-8; as many layers as fit 8
H200s, see kimi_shape.py) and ``tiny`` (8 layers, hidden 2048). ``:LAYERS`` overrides the target's
layer count. Each shape gets ``OUTDIR/SHAPE/target`` and ``OUTDIR/SHAPE/draft``. Only the
shapes matter: the weights are random, so acceptance is forced (autotune.space.synthetic).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kimi_shape  # noqa: E402

COMMON = dict(max_position_embeddings=8192, hidden_act="silu", torch_dtype="bfloat16", bos_token_id=1,
              eos_token_id=2, pad_token_id=0, tie_word_embeddings=False, attention_bias=False)


def _llama(hidden: int, layers: int, vocab: int, ffn: int, kv: int) -> tuple[dict, dict]:
    base = dict(COMMON, hidden_size=hidden, intermediate_size=ffn, num_attention_heads=hidden // 128,
                num_key_value_heads=kv, head_dim=128, vocab_size=vocab, rms_norm_eps=1e-5,
                rope_theta=500000.0, mlp_bias=False, model_type="llama")
    target = dict(base, architectures=["LlamaForCausalLM"], num_hidden_layers=layers)
    draft = dict(base, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                 draft_vocab_size=vocab, target_hidden_size=hidden)
    return target, draft


def _qwen3_moe(layers: int = 48) -> tuple[dict, dict]:
    vocab, hidden = 151936, 2048
    target = dict(COMMON, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=hidden,
                  intermediate_size=6144, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
                  norm_topk_prob=True, num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4,
                  head_dim=128, vocab_size=vocab, rms_norm_eps=1e-6, rope_theta=1000000.0,
                  decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False,
                  router_aux_loss_coef=0.001, sliding_window=None, use_sliding_window=False)
    draft = dict(COMMON, architectures=["LlamaForCausalLMEagle3"], model_type="llama", hidden_size=hidden,
                 intermediate_size=6144, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                 vocab_size=vocab, draft_vocab_size=vocab, target_hidden_size=hidden, num_hidden_layers=1,
                 rms_norm_eps=1e-6, rope_theta=1000000.0, mlp_bias=False)
    return target, draft


# Each shape takes its target's layer count (None: the shape's own).
SHAPES = {
    "llama-8b": lambda layers=None: _llama(4096, layers or 32, 128256, 14336, 8),
    "qwen3-30b-a3b": lambda layers=None: _qwen3_moe(layers or 48),
    "kimi-k2.5": lambda layers=None: kimi_shape.configs(layers or kimi_shape.fit_layers(), COMMON),
    "tiny": lambda layers=None: _llama(2048, layers or 8, 32000, 8192, 4),
}


def parse_shape(text: str) -> tuple[str, int | None]:
    """``SHAPE`` or ``SHAPE:LAYERS`` -> (shape, layers or None)."""
    name, sep, layers = text.partition(":")
    if not sep:
        return name, None
    if not layers.isdigit() or int(layers) < 1:
        raise ValueError(f"{text!r}: the layer count after ':' must be a positive integer")
    return name, int(layers)


def write_tokenizer(folder: str, vocab: int) -> None:
    """A word-level tokenizer over ``w4 .. w{vocab-1}``: any text tokenizes, any id decodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    words.update({f"w{i}": i for i in range(4, vocab)})
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as fh:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": 8192,
                   "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}"}, fh, indent=1)


def cfg_layers(out: str, shape: str) -> int:
    with open(os.path.join(out, shape, "target", "config.json")) as fh:
        return json.load(fh)["num_hidden_layers"]


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    out = argv[0]
    try:
        shapes = [parse_shape(s) for s in argv[1:]] or [(s, None) for s in SHAPES]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    unknown = [s for s, _ in shapes if s not in SHAPES]
    if unknown:
        print(f"error: unknown shape {unknown[0]!r}; choose from {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    for shape, layers in shapes:
        for name, cfg in zip(("target", "draft"), SHAPES[shape](layers), strict=True):
            folder = os.path.join(out, shape, name)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "config.json"), "w") as fh:
                json.dump(cfg, fh, indent=1)
            with open(os.path.join(folder, "generation_config.json"), "w") as fh:
                json.dump({"bos_token_id": 1, "eos_token_id": 2}, fh)
            if not os.path.exists(os.path.join(folder, "tokenizer.json")):
                write_tokenizer(folder, cfg["vocab_size"])
        print(f"wrote {os.path.join(out, shape)} ({cfg_layers(out, shape)} target layers)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
