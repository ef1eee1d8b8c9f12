"""The CUDA-graph sizes SGLang 0.5.17 captures at start-up, and the smallest defaults it picks.

SGLang facts, copied from ``sglang/srt/server_args.py`` of 0.5.17 (``ServerArgs``
``_generate_decode_cuda_graph_batch_sizes``, ``_generate_prefill_cuda_graph_batch_sizes`` and
``_handle_gpu_memory_settings``): the trial's lean start (:mod:`autotune.sglang.trial_start`) caps
a capture at an entry of these lists, and the emulator scales its modelled capture time by them.

A run pads a batch to the smallest captured size at or above it, and runs eagerly above the
largest. Both lists are a fixed schedule filtered by the maximum, so capping the maximum at an
entry of the list keeps that entry and every smaller one exactly as the default capture has them.
"""

from __future__ import annotations

__all__ = ["SMALLEST_DEFAULT_DECODE_MAX_BS", "SMALLEST_DEFAULT_PREFILL_MAX_TOKENS", "decode_graph_batch_sizes",
           "prefill_graph_token_sizes"]

#: The smallest decode ``max_bs`` SGLang 0.5.17 defaults to on any GPU (below 20 GB); above it a
#: narrower capture could exceed the default.
SMALLEST_DEFAULT_DECODE_MAX_BS = 8

#: The smallest prefill ``max_bs`` (tokens of one prefill forward) SGLang 0.5.17 defaults to
#: without DP attention or ``max_total_tokens``: its default is ``chunked_prefill_size``, 2048 on
#: GPUs below 35 GB and 4096-16384 above, and 2048 for an MLA attention backend.
SMALLEST_DEFAULT_PREFILL_MAX_TOKENS = 2048


def decode_graph_batch_sizes(max_bs: int, *, speculative: bool, no_padding: bool = False) -> list[int]:
    """The decode batch sizes SGLang 0.5.17 captures for ``max_bs``.

    Args:
        max_bs: The decode ``max_bs``.
        speculative: Whether the launch decodes speculatively (a finer list at small sizes).
        no_padding: ``--disable-cuda-graph-padding`` (every size from 1).
    """
    if max_bs < 1:
        raise ValueError(f"max_bs must be >= 1, got {max_bs}")
    if no_padding:
        sizes = list(range(1, max_bs + 1))
    elif not speculative:
        sizes = ([1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
                 + list(range(512, max_bs + 1, 32)))
    else:
        sizes = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
                 + list(range(72, 257, 8)) + list(range(272, max_bs + 1, 16)))
    sizes = [bs for bs in sizes if bs <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def prefill_graph_token_sizes(max_tokens: int) -> list[int]:
    """The prefill token counts SGLang 0.5.17 captures for a prefill ``max_bs`` of ``max_tokens``
    (the default ``breakable`` backend and ``tc_piecewise`` alike: one graph per token count).

    Unlike the decode list, ``max_tokens`` itself is not added when it is off the schedule.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return [s for s in sizes if s <= max_tokens]
