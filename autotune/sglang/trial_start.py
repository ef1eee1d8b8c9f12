"""A trial server's lean start and quick stop: what SGLang does at start-up and shutdown that a
measurement does not need, and the settings that skip it without changing what is measured.

Three cuts, all *trial-only* (the trial's logged command shows the flags, the exported winner never
carries them; ``docs/startup.md`` gives the H200 numbers and the reasons):

- **Decode CUDA graphs the workload can reach** (:func:`covering_decode_max_bs`). Without
  ``cuda_graph_max_bs``/``cuda_graph_bs`` SGLang 0.5.17 captures decode (and, with speculation, target
  verify, draft decode and draft extend) graphs for every batch size of its list up to 256 on an
  H200 (``ServerArgs._generate_decode_cuda_graph_batch_sizes``). A trial never runs a batch above
  its workload's largest concurrency, so its server captures the list only up to the smallest
  entry that covers it: every batch the trial runs then pads to the same graph as on the exported
  server, and nothing it measures changes. Capped at :data:`SMALLEST_DEFAULT_MAX_BS`, the smallest
  default SGLang picks on any GPU, so the cut never captures *more* than the exported server would.
- **SGLang's own warm-up request** (``--skip-server-warmup``, :func:`lean_start_args`): only where
  the trial's own warm-up (the workload's warm-up prompts, or the stabilising passes) runs before
  the first measured repeat, so that warm-up does the one-time work instead.
- **The crash-diagnostics pause at shutdown** (:data:`QUICK_STOP_ENV`). When autotune stops a
  server, its scheduler dies on SIGTERM first; SGLang's watchdog then takes that for a crash,
  SIGQUITs the launcher, whose handler sleeps 5 s "to let GPU activity settle" before py-spy and
  CUDA core dumps (``TokenizerManager.dump_requests_before_crash``). The server is measured by
  then: the pause is 5 s of a held GPU per server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.sglang import flags as sglang_flags
from autotune.sglang.args import canonical_args

#: The smallest decode ``max_bs`` SGLang 0.5.17 defaults to on any GPU (below 20 GB:
#: ``ServerArgs._handle_gpu_memory_settings``); above it a narrower capture could exceed the default.
SMALLEST_DEFAULT_MAX_BS = 8

#: ServerArgs fields that decide the decode graphs; a launch that sets any of them is left alone.
DECODE_GRAPH_FIELDS = frozenset({
    "cuda_graph_max_bs_decode", "cuda_graph_bs_decode", "cuda_graph_max_bs", "cuda_graph_bs",
    "cuda_graph_config", "disable_cuda_graph", "disable_decode_cuda_graph", "cuda_graph_backend_decode",
    "enable_torch_compile", "torch_compile_max_bs"})

#: The field the decode capture cap is written to (0.5.17's ``--cuda-graph-max-bs`` is its alias).
DECODE_MAX_BS_FIELD = "cuda_graph_max_bs_decode"

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


def decode_graph_batch_sizes(max_bs: int, *, speculative: bool, no_padding: bool = False) -> list[int]:
    """The decode batch sizes SGLang 0.5.17 captures for ``max_bs`` (its own list, copied).

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


def covering_decode_max_bs(max_concurrency: int, *, speculative: bool, no_padding: bool = False) -> int | None:
    """The smallest decode ``max_bs`` whose capture covers every batch up to ``max_concurrency``
    with the graphs the default capture would use; None where that could exceed a default capture.

    A batch of ``b`` requests runs on the smallest captured size ``>= b``. Capping ``max_bs`` at a
    size of the default list keeps that size, and every smaller one, exactly as captured by default.

    Args:
        max_concurrency: The most requests the workload keeps in flight.
        speculative: Whether the launch decodes speculatively.
        no_padding: ``--disable-cuda-graph-padding``.
    """
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    sizes = decode_graph_batch_sizes(SMALLEST_DEFAULT_MAX_BS, speculative=speculative, no_padding=no_padding)
    return next((bs for bs in sizes if bs >= max_concurrency), None)


def lean_start_args(server_args: Mapping[str, Any], *, max_concurrency: int | None, own_warmup: bool,
                    flag_set: sglang_flags.FlagSet | None = None) -> tuple[dict[str, Any], frozenset[str]]:
    """A trial launch's server args with the lean-start settings, and the names that are trial-only.

    Args:
        server_args: The trial's server args (any spelling SGLang accepts).
        max_concurrency: The workload's largest concurrency; None where it has no cap (an
            open-loop request rate), which leaves the decode graphs alone.
        own_warmup: Whether the trial warms the server up itself before measuring.
        flag_set: The SGLang flags; the active ones if None.

    Returns:
        (server args with the additions, the added names). A setting the launch already makes, or
        that this SGLang has no flag for, is not added.
    """
    flag_set = flag_set or sglang_flags.active_flags()
    out = dict(server_args)
    given, _ = canonical_args(server_args, flag_set=flag_set)
    added: set[str] = set()
    ref = flag_set.lookup(DECODE_MAX_BS_FIELD)
    if (max_concurrency is not None and ref is not None and ref.key == DECODE_MAX_BS_FIELD
            and not DECODE_GRAPH_FIELDS & set(given)):
        max_bs = covering_decode_max_bs(max_concurrency, speculative=bool(given.get("speculative_algorithm")),
                                        no_padding=bool(given.get("disable_cuda_graph_padding")))
        if max_bs is not None:
            out[DECODE_MAX_BS_FIELD] = max_bs
            added.add(DECODE_MAX_BS_FIELD)
    if own_warmup and "skip_server_warmup" not in given and flag_set.has_option("--skip-server-warmup"):
        out["skip_server_warmup"] = True
        added.add("skip_server_warmup")
    return out, frozenset(added)
