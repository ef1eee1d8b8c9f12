"""How long the emulator's start-up spends capturing prefill CUDA graphs: SGLang 0.5.17 captures
one graph per token size of its list (:mod:`autotune.sglang.graph_sizes`), so a launch that caps
the list (``--cuda-graph-max-bs-prefill``, the trial's lean start) spends that share of a full
capture's time, and one without prefill graphs none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.sglang.graph_sizes import prefill_graph_token_sizes

__all__ = ["DEFAULT_PREFILL_MAX_TOKENS", "prefill_capture_share", "prefill_graph_sizes", "prefill_graphs_on"]


def prefill_graphs_on(args: Mapping[str, Any]) -> bool:
    """Whether this launch captures prefill CUDA graphs at start-up (SGLang's default)."""
    return not (args.get("disable_prefill_cuda_graph") or args.get("disable_cuda_graph")
                or args.get("cuda_graph_backend_prefill") == "disabled")


#: The prefill capture's ``max_bs`` when a launch sets neither it nor ``chunked_prefill_size``:
#: SGLang 0.5.17's ``chunked_prefill_size`` on an H100 or H200, the GPUs the profiles model.
DEFAULT_PREFILL_MAX_TOKENS = 8192


def prefill_graph_sizes(args: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """(the prefill token sizes this launch captures, those a default launch captures)."""
    chunk = args.get("chunked_prefill_size")
    default = int(chunk) if chunk is not None and int(chunk) > 0 else DEFAULT_PREFILL_MAX_TOKENS
    cap = args.get("cuda_graph_max_bs_prefill")
    full = prefill_graph_token_sizes(default)
    return (full if cap is None else prefill_graph_token_sizes(min(int(cap), default))), full


def prefill_capture_share(args: Mapping[str, Any]) -> float:
    """The share of a default prefill capture's time this launch spends: one graph per token
    size, so the sizes it captures over those it would capture by default."""
    sizes, full = prefill_graph_sizes(args)
    return len(sizes) / len(full) if full else 1.0
