"""Rank NCCL settings by all-reduce latency at a model's sizes (the command is ``python -m autotune.nccl_probe``).

A server restart costs minutes; an NCCL setting changes small all-reduce latency by up to ~1.6x
(REFERENCE.md section 4). This probe measures bf16 all-reduce of ``tokens x hidden`` messages
for each candidate environment, in fresh processes on this node's GPUs (torch.distributed,
one new process group per candidate, CUDA events around each call, median after warm-up), and
ranks the candidates by decode-size latency. See ``docs/nccl-probe.md``.

Phases by message size: ``tokens <= decode_max_tokens`` (8) is decode, ``<= verify_max_tokens``
(64) is verify, larger is prefill. A candidate's phase latency is the mean of its medians over
that phase's sizes. Ranking is by decode latency, ties broken by verify, then prefill.

Backends: ``nccl`` (GPUs), ``gloo`` (CPU processes: the same logic, for tests), ``sim`` (the
emulator's modelled NCCL latency; nothing runs), ``auto`` (nccl when there are ``tp`` GPUs, else
gloo). This module and its workers import neither Ray nor MLflow.
"""

from __future__ import annotations

import math
import os
import platform
import socket
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from autotune.figures import finite
from autotune.nccl.candidates import (
    DEFAULT_NAME,
    NVLS_VAR,
    NcclCandidate,
    check_forbidden,
)
from autotune.nccl.runner import RunSettings, run_candidates
from autotune.nccl.sim import sim_rows

__all__ = ["BACKENDS", "ProbeSettings", "format_table", "phase_of", "rank_rows", "run_probe"]

BACKENDS = ("auto", "nccl", "gloo", "sim")
PHASES = ("decode", "verify", "prefill")


@dataclass(frozen=True)
class ProbeSettings:
    """What to measure and how.

    Attributes:
        tp: Ranks of the all-reduce (GPUs).
        hidden: Model hidden size; a message is ``tokens x hidden`` bf16 values.
        tokens: Token counts, one message size each.
        iters: Timed samples per size.
        warmup: Untimed all-reduces per size before them.
        batch: Back-to-back all-reduces per sample, the ranks met first (1: each call timed
            alone, which also times the wait for the slower rank's launch).
        rounds: Passes over all candidates, each in a rotated order and in fresh processes. A
            candidate's figure is the median of its rounds; with 2 or more the report says
            whether the best and the default candidate are separated beyond the rounds' spread.
        backend: ``auto``, ``nccl``, ``gloo`` or ``sim``.
        timeout_s: Per candidate, from its go to its result; past it the candidate fails.
        decode_max_tokens: Sizes up to this many tokens are decode.
        verify_max_tokens: Sizes up to this many tokens (above decode) are verify.
        profile: Sim profile, for the ``sim`` backend.
    """

    tp: int
    hidden: int
    tokens: tuple[int, ...] = (1, 4, 8, 64)
    iters: int = 200
    warmup: int = 20
    batch: int = 10
    rounds: int = 1
    backend: str = "auto"
    timeout_s: float = 60.0
    decode_max_tokens: int = 8
    verify_max_tokens: int = 64
    profile: str | None = None

    def check(self) -> None:
        """Raises ValueError for settings that cannot be probed."""
        if self.tp < 2:
            raise ValueError(f"tp must be >= 2 (an all-reduce over one rank is free), got {self.tp}")
        if self.hidden < 1:
            raise ValueError(f"hidden must be >= 1, got {self.hidden}")
        if not self.tokens or any(t < 1 for t in self.tokens):
            raise ValueError(f"tokens must be a non-empty list of counts >= 1, got {self.tokens}")
        if self.iters < 1 or self.warmup < 0:
            raise ValueError(f"iters must be >= 1 and warmup >= 0, got {self.iters}, {self.warmup}")
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.backend == "sim" and not self.profile:
            raise ValueError("the sim backend needs a sim profile")
        if not 1 <= self.decode_max_tokens <= self.verify_max_tokens:
            raise ValueError("need 1 <= decode_max_tokens <= verify_max_tokens")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


def phase_of(tokens: int, settings: ProbeSettings) -> str:
    """``decode``, ``verify`` or ``prefill`` for a message of ``tokens`` tokens."""
    if tokens <= settings.decode_max_tokens:
        return "decode"
    if tokens <= settings.verify_max_tokens:
        return "verify"
    return "prefill"


def resolve_backend(requested: str, tp: int) -> tuple[str, str | None]:
    """(backend, note): ``auto`` becomes nccl with ``tp`` visible GPUs, else gloo (noted)."""
    if requested != "auto":
        return requested, None
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        gpus = 0
    if gpus >= tp:
        return "nccl", None
    return "gloo", (f"backend auto: {gpus} CUDA device(s) visible, fewer than tp={tp}; using gloo "
                    "on CPU processes. Its latencies are not NCCL's: they check the probe, not "
                    "the candidates")


# ----------------------------------------------------------------------------- ranking


def merge_rounds(names: Sequence[str], passes: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per candidate (in ``names`` order) from one or more passes over all of them.

    A size's ``median_us`` is the median of its per-round medians, which stay in
    ``round_medians_us``; p10/p90 span every round's. A candidate that failed in any round is
    failed, with that round's reason: a setting that sometimes breaks is not a candidate.
    """
    if len(passes) == 1:
        return list(passes[0])
    out = []
    for name in names:
        runs = [next(r for r in rows if r["name"] == name) for rows in passes]
        row = dict(runs[0])
        row["rounds"] = len(runs)
        row["wall_s"] = round(sum(r.get("wall_s") or 0.0 for r in runs), 3)
        bad = next((r for r in runs if r.get("status") != "ok"), None)
        if bad is not None:
            row.update(status="failed", reason=f"round {runs.index(bad) + 1}: {bad.get('reason')}",
                       sizes=[])
            out.append(row)
            continue
        sizes = []
        for i, first in enumerate(runs[0]["sizes"]):
            per = [r["sizes"][i] for r in runs]
            medians = sorted(p["median_us"] for p in per)
            sizes.append({**first, "median_us": statistics.median(medians),
                          "p10_us": min(p["p10_us"] for p in per),
                          "p90_us": max(p["p90_us"] for p in per),
                          "iters": sum(p["iters"] for p in per),
                          "round_medians_us": [p["median_us"] for p in per]})
        row["sizes"] = sizes
        out.append(row)
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rank_rows(rows: list[dict[str, Any]], settings: ProbeSettings) -> dict[str, Any]:
    """Add phase figures and ranks to ``rows`` (in place); returns the ranking section.

    A row's ``decode_us``/``verify_us``/``prefill_us`` is the mean of its medians over that
    phase's sizes (None when it has none, or failed). Successful rows are ranked by the first
    phase present (decode, else verify, else prefill), ties broken by the later phases; failed
    rows get ``rank: None``.

    Returns:
        ``{"rank_by", "ranking", "best", "default", "spread"}``; ``spread`` compares the best
        candidate with the ``default`` one at the ranking phase (None figures when unknown).
    """
    phases_present = [ph for ph in PHASES
                      if any(phase_of(t, settings) == ph for t in settings.tokens)]
    for row in rows:
        for size in row.get("sizes", []):
            size["phase"] = phase_of(size["tokens"], settings)
        for ph in PHASES:
            medians = [s["median_us"] for s in row.get("sizes", [])
                       if s["phase"] == ph and finite(s.get("median_us")) is not None]
            row[f"{ph}_us"] = _mean(medians) if row.get("status") == "ok" else None
            per_round = [s["round_medians_us"] for s in row.get("sizes", [])
                         if s["phase"] == ph and "round_medians_us" in s]
            if per_round and row.get("status") == "ok":
                row[f"{ph}_us_rounds"] = [_mean([m[r] for m in per_round])
                                          for r in range(len(per_round[0]))]

    def key(item: tuple[int, dict[str, Any]]) -> tuple:
        index, row = item
        return tuple(row[f"{ph}_us"] if row[f"{ph}_us"] is not None else math.inf
                     for ph in phases_present) + (index,)

    ok = [(i, r) for i, r in enumerate(rows) if r.get("status") == "ok"
          and r.get(f"{phases_present[0]}_us") is not None]
    ranked = [r for _, r in sorted(ok, key=key)]
    for row in rows:
        row["rank"] = None
    for position, row in enumerate(ranked, start=1):
        row["rank"] = position
    primary = phases_present[0]
    best = ranked[0] if ranked else None
    default = next((r for r in rows if r["name"] == DEFAULT_NAME or not r.get("env")), None)
    best_us = best[f"{primary}_us"] if best else None
    default_us = default[f"{primary}_us"] if default else None
    spread = {"phase": primary, "best": best["name"] if best else None, "best_us": best_us,
              "default": default["name"] if default else None, "default_us": default_us,
              "default_over_best": (default_us / best_us if best_us and default_us is not None
                                    else None),
              "saving_us": (default_us - best_us if best_us is not None and default_us is not None
                            else None),
              "rounds": settings.rounds, "separated": _separated(best, default, primary)}
    return {"rank_by": phases_present, "ranking": [r["name"] for r in ranked],
            "best": spread["best"],
            "default": ({"name": default["name"], "status": default.get("status"),
                         **{f"{ph}_us": default.get(f"{ph}_us") for ph in PHASES}}
                        if default else None),
            "spread": spread}


def _separated(best: dict[str, Any] | None, default: dict[str, Any] | None,
               phase: str) -> bool | None:
    """Whether every round put the best candidate ahead of the default one (None: one round,
    or either unknown). Overlapping rounds mean the gap is within the machine's noise."""
    if best is None or default is None or best is default:
        return None if best is None or default is None else False
    b, d = best.get(f"{phase}_us_rounds"), default.get(f"{phase}_us_rounds")
    if not b or not d or len(b) < 2:
        return None
    return max(b) < min(d)


# ----------------------------------------------------------------------------- running


def run_probe(candidates: Sequence[NcclCandidate], settings: ProbeSettings, *,
              forbidden_env: Mapping[str, Sequence[str] | None] | None = None,
              allow_nvls: bool = False, workdir: str | None = None,
              on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Measure and rank ``candidates``; returns the report (JSON-ready).

    Args:
        candidates: At least one; names must be unique.
        settings: What to measure.
        forbidden_env: A space's ``forbidden.env``. None means no space: NVLink multicast
            (``NCCL_NVLS_ENABLE=1``) is forbidden unless ``allow_nvls``.
        allow_nvls: With no space, let a candidate turn NVLink multicast on.
        workdir: Keep worker logs and status files here (a temporary folder otherwise).
        on_row: Called with each raw row as soon as its candidate is done.

    Raises:
        ValueError: Bad settings or no candidates.
        ConfigError: A candidate sets a forbidden value.
    """
    settings.check()
    if not candidates:
        raise ValueError("no candidates to probe")
    names = [c.name for c in candidates]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"candidate names must be unique; repeated: {', '.join(dupes)}")
    if forbidden_env is None:
        forbidden_env = {} if allow_nvls else {NVLS_VAR: ("1",)}
    check_forbidden(candidates, forbidden_env)
    t0 = time.monotonic()
    backend, note = resolve_backend(settings.backend, settings.tp)
    if backend == "sim":
        settings = replace(settings, rounds=1)  # the model has no noise: one pass says it all
        if settings.profile is None:
            raise ValueError("the sim backend needs a sim profile")

        rows = sim_rows(candidates, profile=settings.profile, tp=settings.tp,
                        hidden=settings.hidden, tokens=settings.tokens)
        for row in rows:
            if on_row is not None:
                on_row(row)
    else:
        run = RunSettings(tp=settings.tp, hidden=settings.hidden, tokens=tuple(settings.tokens),
                          iters=settings.iters, warmup=settings.warmup, backend=backend,
                          timeout_s=settings.timeout_s, batch=settings.batch)
        passes = []
        for r in range(settings.rounds):
            # A rotated order, so no candidate always runs first (cold) or right after another.
            shift = r % len(candidates)
            order = list(candidates[shift:]) + list(candidates[:shift])
            where = (workdir if workdir is None or settings.rounds == 1
                     else os.path.join(workdir, f"round{r + 1}"))
            passes.append(run_candidates(order, run, workdir=where, on_row=on_row))
        rows = merge_rounds([c.name for c in candidates], passes)
    ranking = rank_rows(rows, settings)
    facts = next((r for r in rows if r.get("status") == "ok"), {})
    host = {"hostname": socket.gethostname(), "python": platform.python_version(),
            "backend": backend, "dtype": facts.get("dtype"),
            "torch_version": facts.get("torch_version"),
            "nccl_version": facts.get("nccl_version"), "gpu_name": facts.get("gpu_name"),
            "gpu_count": facts.get("gpu_count"),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    return {"schema": 1, "kind": "nccl-probe",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": host,
            "args": {**asdict(settings), "tokens": list(settings.tokens),
                     "backend_requested": settings.backend, "backend": backend,
                     "forbidden_env": {k: list(v) if v is not None else None
                                       for k, v in forbidden_env.items()}},
            "notes": [note] if note else [], "rows": rows, **ranking,
            "failed": [r["name"] for r in rows if r.get("status") != "ok"],
            "wall_s": round(time.monotonic() - t0, 3)}


# ----------------------------------------------------------------------------- output


def _us(value: Any) -> str:
    return f"{value:.1f}" if finite(value) is not None else "-"


def format_table(report: Mapping[str, Any]) -> str:
    """The report for people: one line per candidate in rank order, failures last."""
    tokens = list(report["args"]["tokens"])
    head = ["rank", "candidate"] + [f"{t} tok" for t in tokens] + ["decode", "verify", "prefill"]
    lines = []
    rows = sorted(report["rows"], key=lambda r: (r["rank"] is None, r["rank"] or 0))
    for row in rows:
        by_tokens = {s["tokens"]: s for s in row.get("sizes", [])}
        cells = [str(row["rank"]) if row["rank"] is not None else "FAIL", row["name"]]
        cells += [_us(by_tokens.get(t, {}).get("median_us")) for t in tokens]
        cells += [_us(row.get(f"{ph}_us")) for ph in PHASES]
        lines.append(cells)
    widths = [max(len(c[i]) for c in [head] + lines) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i == 1 else '>'}{w}}}" for i, w in enumerate(widths))
    args = report["args"]
    how = ("the emulator's modelled us per all-reduce (nothing timed)" if args["backend"] == "sim"
           else f"{args['iters']} samples of {args.get('batch', 1)} back-to-back calls after "
                f"{args['warmup']} warm-up; median us per all-reduce"
                + (f", median of {args['rounds']} rounds" if args.get("rounds", 1) > 1 else ""))
    out = [f"NCCL probe: backend {args['backend']}, tp {args['tp']}, hidden {args['hidden']}, {how}",
           fmt.format(*head)]
    out += [fmt.format(*cells) for cells in lines]
    for row in rows:
        if row.get("status") != "ok":
            out.append(f"  {row['name']} failed: {row.get('reason')}")
    s = report["spread"]
    if s["best"] is not None and s["default_us"] is not None:
        out.append(f"best {s['best']} {_us(s['best_us'])} us vs default {_us(s['default_us'])} us "
                   f"at {s['phase']} size: default/best {s['default_over_best']:.2f}x, "
                   f"{_us(s['saving_us'])} us saved per all-reduce")
    elif s["best"] is not None:
        out.append(f"best {s['best']} {_us(s['best_us'])} us at {s['phase']} size "
                   "(no default candidate to compare with)")
    else:
        out.append("no candidate was measured")
    sep = s.get("separated")
    if s["best"] is not None and s["best"] == s.get("default"):
        out.append("the default ranks first")
    elif sep is not None:
        rounds = s.get("rounds")
        out.append(f"over {rounds} rounds the best is ahead of the default in every round"
                   if sep else f"over {rounds} rounds the best and the default overlap: the gap is "
                   "within this machine's noise")
    elif s.get("rounds", 1) == 1 and s["best"] is not None:
        out.append("one round: run --rounds 3 to tell a real gap from noise")
    for note in report.get("notes", []):
        out.append(f"note: {note}")
    out.append(f"wall time {report['wall_s']:.1f} s")
    return "\n".join(out)


# ----------------------------------------------------------------------------- CLI
