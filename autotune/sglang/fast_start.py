"""``measure.fast_start``: trial servers start without prefill CUDA graphs.

Every trial starts a server, and capturing prefill CUDA graphs is part of its start-up: 3.4 s of a
57.5 s warm start-up for the 8B shape on an H200 (SGLang 0.5.17), and about 45-60 s for the
Qwen3-30B-A3B MoE shape (104-121 s with graphs against 58.7 s without). A search can skip that
capture on every trial server, baselines and speculative configs alike, so configs are compared on
equal terms. The price is fidelity: prefill then runs eagerly, and every figure whose window holds
a prefill is not the exported server's. On the MoE shape prefill took 0.74 s of a 4.84 s repeat
(0.08-0.13 s with graphs), TTFT 118 ms against 23-37, and output tok/s read 10-16% low
(``docs/measurements/README.md``, fifth session). The switch is *trial-only*
(:attr:`autotune.launch.spec.LaunchSpec.trial_only`): the trial's logged command shows it, the
exported winner never carries it.

Which flag does it: whatever the SGLang in use offers (:func:`fast_start_args`):
``--disable-prefill-cuda-graph`` where it exists (0.5.17, 0.5.23), else
``--cuda-graph-backend-prefill disabled``, else an error.

Refused for objectives and SLOs that time prefill alone (TTFT, end-to-end latency). Output tok/s
and the speedup (so the break-even rule) also hold the prefills of their window; they are allowed,
since every trial pays alike, but read low by the prefill share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autotune.errors import LaunchArgsError
from autotune.sglang import flags as sglang_flags
from autotune.sglang.args import canonical_args

#: Metric names containing one of these time the prefill (``p99_ttft_ms``, ``p50_e2e_ms``, ...).
PREFILL_METRIC_MARKERS = ("ttft", "e2e")


def prefill_dependent(metric: str) -> bool:
    """Whether a trial metric includes prefill time (TTFT or end-to-end latency)."""
    return any(marker in metric for marker in PREFILL_METRIC_MARKERS)


def refusal(objective: str, slo_metrics: Iterable[str]) -> str | None:
    """Why ``fast_start`` cannot be used with this objective and these SLOs, or None.

    Args:
        objective: The objective's metric name.
        slo_metrics: The metric of every SLO.
    """
    bad = [f"objective {objective}"] if prefill_dependent(objective) else []
    bad += [f"SLO on {m}" for m in slo_metrics if prefill_dependent(m)]
    if not bad:
        return None
    return (f"fast_start starts trial servers without prefill CUDA graphs, so prefill-timed figures "
            f"would not be the exported server's; it is only for decode-throughput objectives, but "
            f"this space has {', '.join(bad)}. Remove fast_start, or optimise output_tok_s / "
            "decode_tok_s / itl without TTFT or e2e SLOs")


def fast_start_args(flag_set: sglang_flags.FlagSet | None = None) -> dict[str, Any]:
    """The server args that start SGLang without prefill CUDA graphs, for the SGLang in use.

    Raises:
        LaunchArgsError: When this SGLang has no such flag.
    """
    flag_set = flag_set or sglang_flags.active_flags()
    if flag_set.has_option("--disable-prefill-cuda-graph"):
        return {"disable_prefill_cuda_graph": True}
    ref = flag_set.lookup("cuda_graph_backend_prefill")
    if (ref is not None and ref.flag == "--cuda-graph-backend-prefill" and ref.action.nargs != 0
            and (ref.action.choices is None or "disabled" in ref.action.choices)):
        return {"cuda_graph_backend_prefill": "disabled"}
    raise LaunchArgsError(f"measure.fast_start needs --disable-prefill-cuda-graph or --cuda-graph-backend-prefill "
                          f"disabled, and {flag_set.describe()} has neither; remove fast_start")


def conflicts(server_args: Mapping[str, Any], flag_set: sglang_flags.FlagSet | None = None) -> list[str]:
    """``name=value`` of args that set what fast_start sets to something else."""
    return _clashes(server_args, fast_start_args(flag_set))


def _clashes(server_args: Mapping[str, Any], extra: Mapping[str, Any]) -> list[str]:
    return [f"{name}={server_args[name]!r}" for name, value in extra.items()
            if server_args.get(name) is not None and server_args[name] != value]


def apply(server_args: Mapping[str, Any], flag_set: sglang_flags.FlagSet | None = None
          ) -> tuple[dict[str, Any], frozenset[str]]:
    """Server args with fast start on, and which of them are trial-only.

    An arg the config already sets to the same value is the user's own, so it is not trial-only
    (an export keeps it).

    Raises:
        LaunchArgsError: No such flag in this SGLang, or the config sets it to another value.
    """
    extra = fast_start_args(flag_set)
    server_args, _ = canonical_args(server_args, flag_set=flag_set)
    clash = _clashes(server_args, extra)
    if clash:
        raise LaunchArgsError(f"measure.fast_start sets {', '.join(f'{k}={v!r}' for k, v in extra.items())}, "
                              f"but the config sets {', '.join(clash)}")
    args = dict(server_args)
    trial_only = {name for name in extra if args.get(name) is None}
    args.update(extra)
    return args, frozenset(trial_only)


__all__ = ["PREFILL_METRIC_MARKERS", "apply", "conflicts", "fast_start_args", "prefill_dependent", "refusal"]
