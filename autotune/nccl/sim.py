"""The ``sim`` probe backend: the emulator's modelled NCCL all-reduce latency per candidate.

A search on the emulator that pre-screens NCCL settings should rank them the way the emulator will
reward them. This returns rows shaped like the real probe's, computed from the sim profile's NCCL
term (the emulator's all-reduce model, :meth:`autotune.backend.Emulator.allreduce_us`), with
SGLang's custom all-reduce off because the probe measures NCCL itself. Nothing is timed; ``iters``
is 0 to say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.backend import get_backend
from autotune.nccl.candidates import NcclCandidate


def sim_rows(candidates: Sequence[NcclCandidate], *, profile: str, tp: int, hidden: int,
             tokens: Sequence[int]) -> list[dict[str, Any]]:
    """One row per candidate with the modelled latency at each message size.

    Args:
        candidates: What to rank.
        profile: Sim profile name or path.
        tp: Ranks of the all-reduce.
        hidden: Hidden size (the profile's own is what the emulator uses; pass it to match).
        tokens: Token counts, one message size each.
    """
    emulator = get_backend("sim").emulator
    emulator.load_profile(profile)  # a bad profile is the probe's error, not every row's
    rows = []
    for cand in candidates:
        env = {k: v for k, v in cand.full_env().items() if v is not None}
        row: dict[str, Any] = {"name": cand.name, "env": dict(cand.env), "sizes": [],
                               "wall_s": 0.0}
        sizes = [int(n) * hidden * 2 for n in tokens]
        try:
            latencies = emulator.allreduce_us(profile, tp=tp, env=env, nbytes=sizes)
        except ValueError as exc:
            row.update(status="failed", reason=str(exc))
            rows.append(row)
            continue
        for n, nbytes, us in zip(tokens, sizes, latencies, strict=True):
            row["sizes"].append({"tokens": int(n), "bytes": nbytes, "median_us": us,
                                 "p10_us": us, "p90_us": us, "iters": 0,
                                 "rank_medians_us": [us] * tp})
        row.update(status="ok", reason=None, dtype="bfloat16")
        rows.append(row)
    return rows

