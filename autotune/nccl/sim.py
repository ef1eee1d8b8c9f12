"""The ``sim`` probe backend: the emulator's modelled NCCL all-reduce latency per candidate.

A search on the emulator that pre-screens NCCL settings should rank them the way the emulator will
reward them. This returns rows shaped like the real probe's, computed from the sim profile's NCCL
term (:class:`autotune.sim.model.PerformanceModel`), with SGLang's custom all-reduce off because
the probe measures NCCL itself. Nothing is timed; ``iters`` is 0 to say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.nccl.candidates import Candidate


def sim_rows(candidates: Sequence[Candidate], *, profile: str, tp: int, hidden: int,
             tokens: Sequence[int]) -> list[dict[str, Any]]:
    """One row per candidate with the modelled latency at each message size.

    Args:
        candidates: What to rank.
        profile: Sim profile name or path.
        tp: Ranks of the all-reduce.
        hidden: Hidden size (the profile's own is what the emulator uses; pass it to match).
        tokens: Token counts, one message size each.
    """
    from autotune.sim.config import ModelConfig
    from autotune.sim.model import PerformanceModel
    from autotune.sim.profile import load_profile

    prof = load_profile(profile)
    rows = []
    for cand in candidates:
        env = {k: v for k, v in cand.full_env().items() if v is not None}
        config = ModelConfig.from_server_args(
            {"tp_size": tp, "disable_custom_all_reduce": True}, env)
        row: dict[str, Any] = {"name": cand.name, "env": dict(cand.env), "sizes": [],
                               "wall_s": 0.0}
        if config.invalid_env:
            row.update(status="failed", reason="the emulator rejects "
                       + ", ".join(config.invalid_env))
            rows.append(row)
            continue
        model = PerformanceModel(prof, config)
        for n in tokens:
            nbytes = int(n) * hidden * 2
            # The model's per-call NCCL term; private, but the emulator has no public per-call API.
            us = model._allreduce_us(nbytes)
            row["sizes"].append({"tokens": int(n), "bytes": nbytes, "median_us": us,
                                 "p10_us": us, "p90_us": us, "iters": 0,
                                 "rank_medians_us": [us] * tp})
        row.update(status="ok", reason=None, dtype="bfloat16")
        rows.append(row)
    return rows


def profile_hidden(profile: str) -> int:
    """The hidden size the sim profile models."""
    from autotune.sim.profile import load_profile

    return int(load_profile(profile).hidden_size)
