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

import functools
import json
import os
import re
import shutil
import subprocess

__all__ = ["SMALLEST_DEFAULT_DECODE_MAX_BS", "SMALLEST_DEFAULT_PREFILL_MAX_TOKENS", "decode_graph_batch_sizes",
           "default_decode_max_bs", "default_prefill_max_tokens", "gpu_memory_mib", "model_uses_mla",
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


#: SGLang 0.5.17's defaults by GPU memory (``_handle_gpu_memory_settings``): below this many GiB,
#: (decode ``max_bs`` at TP below 4, decode ``max_bs`` at TP 4 or more, ``chunked_prefill_size``).
#: Its "below 90" and "below 160" tiers are the same and are one row here.
_GPU_TIERS: tuple[tuple[float, int, int, int], ...] = (
    (20, 8, 8, 2048), (35, 24, 80, 2048), (60, 32, 160, 4096), (160, 256, 512, 8192), (float("inf"), 512, 512, 16384))


def _tier(gpu_mem_mib: float) -> tuple[float, int, int, int]:
    return next(t for t in _GPU_TIERS if gpu_mem_mib < t[0] * 1024)


def default_decode_max_bs(gpu_mem_mib: float | None, *, tp_size: int) -> int:
    """SGLang 0.5.17's default decode ``max_bs`` for a GPU of ``gpu_mem_mib`` MiB (the smallest
    GPU ``nvidia-smi`` lists, as SGLang reads it) at ``tp_size`` (``_handle_gpu_memory_settings``);
    :data:`SMALLEST_DEFAULT_DECODE_MAX_BS` where the memory is unknown, the least it can be."""
    if gpu_mem_mib is None:
        return SMALLEST_DEFAULT_DECODE_MAX_BS
    _, small_tp, large_tp, _ = _tier(gpu_mem_mib)
    return small_tp if tp_size < 4 else large_tp


@functools.lru_cache(maxsize=1)
def gpu_memory_mib() -> float | None:
    """The smallest GPU's memory in MiB as SGLang 0.5.17 reads it for its defaults
    (``get_nvgpu_memory_capacity``: ``nvidia-smi --query-gpu=memory.total``, every GPU of the host,
    whatever ``CUDA_VISIBLE_DEVICES`` says); None where ``nvidia-smi`` is missing or says nothing
    (SGLang then asks torch, which this process does not load). Read once per process."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    values = [float(v) for v in out.stdout.strip().split("\n") if re.match(r"^\d+(\.\d+)?$", v.strip())]
    return min(values) if out.returncode == 0 and values else None


def default_prefill_max_tokens(gpu_mem_mib: float | None, *, mla: bool | None, model_path: str | None) -> int:
    """The least prefill ``max_bs`` (tokens) SGLang 0.5.17 defaults to for a launch that sets no
    ``chunked_prefill_size``, prefill-graph setting, ``max_total_tokens`` or DP attention: its
    ``chunked_prefill_size`` for the GPU (2048 below 35 GiB, 4096 below 60, 8192 below 160,
    16384 above), 2048 for an MLA model (``mla`` None: not known, so taken as one), 4096 at most
    for a Llama-2 path; :data:`SMALLEST_DEFAULT_PREFILL_MAX_TOKENS` where the GPU is unknown."""
    if gpu_mem_mib is None or mla is not False:
        return SMALLEST_DEFAULT_PREFILL_MAX_TOKENS
    tokens = _tier(gpu_mem_mib)[3]
    if model_path is not None and "llama-2" in model_path.lower():
        tokens = min(tokens, 4096)
    return tokens


def model_uses_mla(model_path: str | None) -> bool | None:
    """Whether the model in the local folder ``model_path`` has multi-head latent attention (its
    ``config.json``, or its ``text_config``, sets ``kv_lora_rank``: every MLA model SGLang 0.5.17
    knows does); None where there is no readable local config."""
    try:
        with open(os.path.join(model_path or "", "config.json"), encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    parts = [config, *([text] if isinstance(text, dict) else [])]
    return any(part.get("kv_lora_rank") is not None for part in parts)
