"""Names and built-in rules shared by the search-space modules.

SGLang's own rules for the EAGLE family (from ``sglang/srt/arg_groups/speculative_hook.py``,
0.5.23): steps, topk and draft tokens are set together or not at all; topk 1 forces draft
tokens to steps + 1; trtllm_mha needs topk 1; topk > 1 with page_size > 1 needs flashinfer, fa3
or triton. Nothing in SGLang checks draft tokens <= steps * topk + 1, so autotune prunes it.
Nor does SGLang check that a tree (topk > 1) has at least steps + 1 draft tokens, yet its EAGLE
worker v2 (``eagle_worker_common._compact_accept_to_front``, 0.5.17 and 0.5.23) writes the accepted
path, ``steps + 1`` wide, into a block of ``num_draft_tokens`` slots, so a smaller block crashes the
server at its first verify (seen on an H200 with 4-4-4 and 5-4-4, SGLang 0.5.17): autotune prunes
that too.
"""

from __future__ import annotations

# SGLang's own facts (EAGLE_FAMILY, PAGED_TREE_BACKENDS) live in autotune.sglang.speculative; these are
# the space's names for the parameters those rules read.

ALGO = "speculative_algorithm"
STEPS = "speculative_num_steps"
TOPK = "speculative_eagle_topk"
DRAFT = "speculative_num_draft_tokens"
TRIPLE = (STEPS, TOPK, DRAFT)
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
NEEDS_DRAFT_MODEL = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})
ATTENTION_ARGS = ("attention_backend", "decode_attention_backend", "prefill_attention_backend")
#: Server flags that make SGLang set environment variables itself.
ARG_IMPLIED_ENV: dict[str, dict[str, str]] = {"enable_symm_mem": {"NCCL_NVLS_ENABLE": "1"},
                                               "enable_nccl_nvls": {"NCCL_NVLS_ENABLE": "1"}}
#: Server args a space may not set, and why.
RESERVED = {
    "model_path": "set the top-level model_path instead",
    "speculative_draft_model_path": "set the top-level draft_model_path instead",
    "host": "autotune binds each trial's server itself",
    "port": "autotune picks a free port for each trial",
}

#: Built-in rules, all on by default; ``rules: {name: false}`` turns one off.
RULES: dict[str, str] = {
    "topk1_draft_tokens": "speculative_eagle_topk == 1 sets speculative_num_draft_tokens to "
                          "steps + 1, as SGLang forces; the value is derived, not searched",
    "draft_tokens_max": "speculative_num_draft_tokens <= steps * topk + 1 (a draft tree has no "
                        "more nodes); the searched range follows steps and topk",
    "draft_tokens_min": "speculative_num_draft_tokens >= 2",
    "tree_draft_tokens_depth": "speculative_eagle_topk > 1 needs speculative_num_draft_tokens >= "
                               "steps + 1: SGLang's EAGLE worker copies the accepted path (steps + 1 "
                               "slots) into each request's block of draft tokens and crashes at the "
                               "first verify when the block is smaller",
    "trtllm_mha_topk1": "attention backend trtllm_mha supports only topk 1, so topk is set to 1",
    "paged_tree_backends": "topk > 1 with page_size > 1 needs attention_backend flashinfer, fa3 "
                           "or triton; with another explicit backend topk is set to 1",
}
