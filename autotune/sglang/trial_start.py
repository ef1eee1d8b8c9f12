"""A trial server's lean start and quick stop: what SGLang does at start-up and shutdown that a
measurement does not need, and the settings that skip it without changing what is measured.

Four cuts, all *trial-only* (the trial's logged command shows the flags, the exported winner never
carries them; ``docs/startup.md`` gives the H200 numbers and the reasons):

- **Decode CUDA graphs the workload can reach** (:func:`covering_decode_max_bs`). Without
  ``cuda_graph_max_bs``/``cuda_graph_bs`` SGLang 0.5.17 captures decode (and, with speculation, target
  verify, draft decode and draft extend) graphs for every batch size of its list up to 256 on an
  H200 (:func:`autotune.sglang.graph_sizes.decode_graph_batch_sizes`). A trial never runs a batch
  above its workload's largest concurrency, so its server captures the list only up to the
  smallest entry that covers it: every batch the trial runs then pads to the same graph as on the
  exported server, and nothing it measures changes. Capped at SGLang's default for the host's GPU
  (:func:`~autotune.sglang.graph_sizes.default_decode_max_bs`, from the memory ``nvidia-smi``
  reports, as SGLang reads it: 256 on an H100 or H200 at TP below 4), or where that is unknown at
  :data:`~autotune.sglang.graph_sizes.SMALLEST_DEFAULT_DECODE_MAX_BS`, the smallest default on any
  GPU, so the cut never captures *more* than the exported server would.
- **Prefill CUDA graphs the workload can reach** (:func:`covering_prefill_max_tokens`). SGLang
  0.5.17 captures one prefill graph per token count of its list up to ``chunked_prefill_size``
  (58 sizes up to 8192 on an H200, about 10 s of the 8B scheduler's start). A prefill forward of a
  trial holds at most the tokens its caller bounds (:func:`autotune.trial.measure.prefill_token_bound`:
  the largest prompts that can be in flight together, each with its whole output, as a retracted
  request is prefilled again), so the same covering cap applies, at most SGLang's default for the
  launch (:func:`~autotune.sglang.graph_sizes.default_prefill_max_tokens`: the GPU's
  ``chunked_prefill_size``, 2048 for an MLA model or where unknown).
- **SGLang's own warm-up request** (``--skip-server-warmup``, :func:`lean_start_args`): only where
  the trial's own warm-up (the workload's warm-up prompts, or the stabilising passes) runs before
  the first measured repeat, so that warm-up does the one-time work instead.
- **The crash-diagnostics pause at shutdown** (:data:`QUICK_STOP_ENV`). When autotune stops a
  server, its scheduler dies on SIGTERM first; SGLang's watchdog then takes that for a crash,
  SIGQUITs the launcher, whose handler sleeps 5 s "to let GPU activity settle" before py-spy and
  CUDA core dumps (``TokenizerManager.dump_requests_before_crash``). The server is measured by
  then: the pause is 5 s of a held GPU per server.

The two graph cuts apply only to a launch that fixes ``mem_fraction_static`` (and does not turn
on SGLang's post-capture KV sizing): otherwise SGLang sizes its KV pool from a reserve that counts
the captured graphs (``ServerArgs.reserve_for_graph_mb``), and a trial with fewer graphs would run
on a larger KV pool than the exported server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.sglang import flags as sglang_flags
from autotune.sglang.args import canonical_args
from autotune.sglang.graph_sizes import (
    SMALLEST_DEFAULT_DECODE_MAX_BS,
    SMALLEST_DEFAULT_PREFILL_MAX_TOKENS,
    decode_graph_batch_sizes,
    default_decode_max_bs,
    prefill_graph_token_sizes,
)

#: ServerArgs fields that decide the decode graphs; a launch that sets any of them is left alone.
DECODE_GRAPH_FIELDS = frozenset({
    "cuda_graph_max_bs_decode", "cuda_graph_bs_decode", "cuda_graph_max_bs", "cuda_graph_bs",
    "cuda_graph_config", "disable_cuda_graph", "disable_decode_cuda_graph", "cuda_graph_backend_decode",
    "enable_torch_compile", "torch_compile_max_bs"})

#: The field the decode capture cap is written to (0.5.17's ``--cuda-graph-max-bs`` is its alias).
DECODE_MAX_BS_FIELD = "cuda_graph_max_bs_decode"

#: ServerArgs fields that decide the prefill graphs or what one prefill forward may hold (mixed
#: chunks add decode tokens, DP attention divides the chunk, ``max_total_tokens`` caps the
#: capture); a launch that sets any of them is left alone. ``chunked_prefill_size`` is read instead.
PREFILL_GRAPH_FIELDS = frozenset({
    "cuda_graph_max_bs_prefill", "cuda_graph_bs_prefill", "cuda_graph_max_seq_len_prefill",
    "cuda_graph_prefill_max_context", "cuda_graph_backend_prefill", "disable_prefill_cuda_graph",
    "cuda_graph_config", "disable_cuda_graph", "enable_torch_compile", "max_total_tokens",
    "enable_mixed_chunk", "enable_dp_attention", "is_embedding"})

#: The field the prefill capture cap is written to (0.5.17's ``--piecewise-cuda-graph-max-tokens``
#: is its alias).
PREFILL_MAX_FIELD = "cuda_graph_max_bs_prefill"

#: The SGLang switch that sizes the KV pool after graph capture, from the memory the graphs left.
POST_CAPTURE_KV_ENV = "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"

#: Environment of a trial server (never exported): no crash diagnostics, so no 5 s pause when
#: autotune stops it (SGLang 0.5.17 ``envs.SGLANG_PYSPY_DUMP_BEFORE_CRASH`` and
#: ``SGLANG_CUDA_COREDUMP_BEFORE_CRASH``, both on by default).
QUICK_STOP_ENV: Mapping[str, str] = {"SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0",
                                     "SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0"}


#: SGLang's ``EnvBool`` reads these (lower case) as false.
_FALSE = ("0", "false", "no", "n", "off")


def crash_diagnostics_on(environ: Mapping[str, str]) -> bool:
    """Whether a server with this environment pauses for crash diagnostics when stopped (SGLang
    0.5.17: either of the :data:`QUICK_STOP_ENV` switches on, and both default on)."""
    return any(environ.get(name, "1").strip().lower() not in _FALSE for name in QUICK_STOP_ENV)


def covering_decode_max_bs(max_concurrency: int, *, speculative: bool, no_padding: bool = False,
                           ceiling: int = SMALLEST_DEFAULT_DECODE_MAX_BS) -> int | None:
    """The smallest decode ``max_bs`` whose capture covers every batch up to ``max_concurrency``
    with the graphs the default capture would use; None where that could exceed a default capture.

    A batch of ``b`` requests runs on the smallest captured size ``>= b``. Capping ``max_bs`` at a
    size of the default list keeps that size, and every smaller one, exactly as captured by default.

    Args:
        max_concurrency: The most requests the workload keeps in flight.
        speculative: Whether the launch decodes speculatively.
        no_padding: ``--disable-cuda-graph-padding``.
        ceiling: The least decode ``max_bs`` the exported server defaults to
            (:func:`autotune.sglang.graph_sizes.default_decode_max_bs` of its GPU where known).
    """
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    sizes = decode_graph_batch_sizes(ceiling, speculative=speculative, no_padding=no_padding)
    return next((bs for bs in sizes if bs >= max_concurrency), None)


def covering_prefill_max_tokens(max_tokens: int, *, chunked_prefill_size: int | None = None,
                                ceiling: int = SMALLEST_DEFAULT_PREFILL_MAX_TOKENS) -> int | None:
    """The smallest prefill capture cap whose graphs cover every prefill forward of at most
    ``max_tokens`` tokens as the default capture does; None where that could exceed a default.

    Args:
        max_tokens: The most tokens one prefill forward of the trial can hold.
        chunked_prefill_size: The launch's own, if it sets one (then no forward holds more, and the
            default capture stops there).
        ceiling: The least prefill ``max_bs`` the exported server defaults to otherwise
            (:func:`autotune.sglang.graph_sizes.default_prefill_max_tokens`).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if chunked_prefill_size is not None:
        if chunked_prefill_size < 1:
            return None  # chunking off: the default capture's size is not this cut's to guess
        ceiling = min(ceiling, chunked_prefill_size)
    return next((t for t in prefill_graph_token_sizes(ceiling) if t >= max_tokens), None)


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in _FALSE


def lean_start_args(server_args: Mapping[str, Any], *, max_concurrency: int | None, own_warmup: bool,
                    max_prefill_tokens: int | None = None, env: Mapping[str, str] | None = None,
                    gpu_mem_mib: float | None = None, prefill_ceiling: int = SMALLEST_DEFAULT_PREFILL_MAX_TOKENS,
                    flag_set: sglang_flags.FlagSet | None = None) -> tuple[dict[str, Any], frozenset[str]]:
    """A trial launch's server args with the lean-start settings, and the names that are trial-only.

    Args:
        server_args: The trial's server args (any spelling SGLang accepts).
        max_concurrency: The workload's largest concurrency; None where it has no cap (an
            open-loop request rate), which leaves the decode graphs alone.
        own_warmup: Whether the trial warms the server up itself before measuring.
        max_prefill_tokens: The most tokens one prefill forward of the trial can hold; None where
            unknown, which leaves the prefill graphs alone.
        env: The server's environment (SGLang's post-capture KV sizing turns both graph cuts off).
        gpu_mem_mib: The smallest GPU's memory as SGLang reads it for its defaults
            (:func:`autotune.sglang.graph_sizes.gpu_memory_mib`); None keeps the decode cap at or
            below the smallest default of any GPU.
        prefill_ceiling: The least prefill ``max_bs`` the exported server defaults to
            (:func:`autotune.sglang.graph_sizes.default_prefill_max_tokens`); the prefill cap stays
            at or below it.
        flag_set: The SGLang flags; the active ones if None.

    Returns:
        (server args with the additions, the added names). A setting the launch already makes, or
        that this SGLang has no flag for, is not added.
    """
    flag_set = flag_set or sglang_flags.active_flags()
    out = dict(server_args)
    given, _ = canonical_args(server_args, flag_set=flag_set)
    added: set[str] = set()
    # The KV pool must not depend on the captured graphs (the module's text).
    graphs_free = given.get("mem_fraction_static") is not None and not _truthy((env or {}).get(POST_CAPTURE_KV_ENV))

    def settable(field: str) -> bool:
        ref = flag_set.lookup(field)
        return ref is not None and ref.key == field

    if (graphs_free and max_concurrency is not None and settable(DECODE_MAX_BS_FIELD)
            and not DECODE_GRAPH_FIELDS & set(given)):
        tp = int(given.get("tp_size") or 1)
        max_bs = covering_decode_max_bs(max_concurrency, speculative=bool(given.get("speculative_algorithm")),
                                        no_padding=bool(given.get("disable_cuda_graph_padding")),
                                        ceiling=default_decode_max_bs(gpu_mem_mib, tp_size=tp))
        if max_bs is not None:
            out[DECODE_MAX_BS_FIELD] = max_bs
            added.add(DECODE_MAX_BS_FIELD)
    if (graphs_free and max_prefill_tokens is not None and settable(PREFILL_MAX_FIELD)
            and not PREFILL_GRAPH_FIELDS & set(given)):
        chunk = given.get("chunked_prefill_size")
        cap = covering_prefill_max_tokens(max_prefill_tokens,
                                          chunked_prefill_size=int(chunk) if chunk is not None else None,
                                          ceiling=prefill_ceiling)
        if cap is not None:
            out[PREFILL_MAX_FIELD] = cap
            added.add(PREFILL_MAX_FIELD)
    if own_warmup and "skip_server_warmup" not in given and flag_set.has_option("--skip-server-warmup"):
        out["skip_server_warmup"] = True
        added.add("skip_server_warmup")
    return out, frozenset(added)
