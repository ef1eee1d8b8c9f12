"""What the benchmarks share: a search space over a profile, the emulator's environment, statistics,
tables and the JSON output."""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.sim.config import ModelConfig
from autotune.sim.model import PerformanceModel
from autotune.sim.profile import load_profile
from autotune.simtools.evaluate import ModelEvaluator
from autotune.space.search_space import SearchSpace

KIMI = "kimi-k2.5-eagle3-tp8"
LLAMA = "llama-3.1-8b-eagle3-h100"
ZERO_COMPUTE = str(Path(__file__).resolve().parent / "profiles" / "zero-compute.yaml")

# Variables of the emulator that a user's shell may carry and that would bend a benchmark.
_SIM_VARS = ("AUTOTUNE_SIM_FAULT", "AUTOTUNE_SIM_NOISE_CV", "AUTOTUNE_SIM_SEED",
             "AUTOTUNE_SIM_STARTUP_S", "AUTOTUNE_SIM_PROFILE", "AUTOTUNE_SIM_GPU_LOCK_DIR")


@dataclass(frozen=True)
class Setup:
    """How a profile's servers are launched: model names (the emulator loads nothing) and TP."""

    profile: str
    model_path: str
    draft_model_path: str
    tp_size: int


_BUILTIN = {
    KIMI: Setup(KIMI, "sim/Kimi-K2.5", "sim/Kimi-K2.5-EAGLE3", 8),
    LLAMA: Setup(LLAMA, "sim/Llama-3.1-8B-Instruct", "sim/EAGLE3-LLaMA3.1-Instruct-8B", 1),
}


def setup_for(profile: str) -> Setup:
    """The launch setup of a built-in profile name or a profile YAML path (at its reference TP).

    Raises:
        ConfigError: An unknown name or a bad profile file.
    """
    if profile in _BUILTIN:
        return _BUILTIN[profile]
    loaded = load_profile(profile)
    path = str(Path(profile).resolve()) if Path(profile).exists() else profile
    return Setup(path, f"sim/{loaded.name}", f"sim/{loaded.name}-draft", int(loaded.reference_tp))


def bench_space(setup: Setup, workload: Mapping[str, Any], *, repeats: int = 1) -> SearchSpace:
    """A sim search space over ``setup``'s profile wide enough for every benchmark config.

    Args:
        setup: Profile and launch setup.
        workload: The ``workload:`` section.
        repeats: ``measure.repeats``.
    """
    return SearchSpace.from_dict({
        "name": "benchmark",
        "backend": "sim",
        "profile": setup.profile,
        "model_path": setup.model_path,
        "draft_model_path": setup.draft_model_path,
        "fixed_args": {"speculative_algorithm": "EAGLE3", "mem_fraction_static": 0.85},
        "fixed_env": {"NCCL_NVLS_ENABLE": "0"},
        "parameters": {
            "tp_size": {"type": "categorical", "choices": [1, 2, 4, 8]},
            "speculative_num_steps": {"type": "int", "low": 1, "high": 10},
            "speculative_eagle_topk": {"type": "categorical", "choices": [1, 2, 4, 8]},
            "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 64},
            "NCCL_ALGO": {"type": "categorical", "choices": [None, "Ring", "Tree"]},
            "NCCL_PROTO": {"type": "categorical", "choices": [None, "LL", "LL128", "Simple"]},
        },
        "workload": dict(workload),
        "measure": {"repeats": repeats, "startup_timeout_s": 120},
    })


def baseline_params(setup: Setup, *, tp_size: int | None = None, **env: str) -> dict[str, Any]:
    """Parameters of a no-speculation config."""
    return {"tp_size": tp_size or setup.tp_size, "speculative_algorithm": None, **env}


def spec_params(setup: Setup, steps: int, topk: int = 1, draft_tokens: int | None = None, *,
                tp_size: int | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Parameters of an EAGLE-3 config; a chain (topk 1) verifies ``steps + 1`` tokens."""
    if draft_tokens is None:
        if topk != 1:
            raise ValueError("a tree (topk > 1) needs draft_tokens")
        draft_tokens = steps + 1
    return {"tp_size": tp_size or setup.tp_size, "speculative_num_steps": steps,
            "speculative_eagle_topk": topk, "speculative_num_draft_tokens": draft_tokens, **(env or {})}


def describe(params: Mapping[str, Any]) -> str:
    """Short text of a config: ``baseline``, ``s5/k1/n6``, plus TP and env settings."""
    parts = []
    if params.get("speculative_num_steps") is None:
        parts.append("baseline")
    else:
        parts.append(f"s{params['speculative_num_steps']}/k{params['speculative_eagle_topk']}"
                     f"/n{params['speculative_num_draft_tokens']}")
    parts.extend(f"{k}={v}" for k, v in params.items() if k.isupper() and v is not None)
    return " ".join(parts)


def as_measured(evaluator: ModelEvaluator, params: Mapping[str, Any]) -> dict[str, float | None]:
    """What a trial of the evaluator's workload should read, counted the way a trial counts.

    The evaluator's ``accept_length`` and ``decode_tok_s`` are steady-state figures of cycles that
    are never cut short. A trial divides ``generated - requests`` by the verify calls, and a
    request's decode rate is its tokens after the first over first-to-last-token time; both
    include each request's last cycle, cut at ``max_tokens``, so they read lower by 1-2% at
    outputs of 64-256 tokens. The expected cycles per request come out of the evaluator's own
    output tok/s: ``busy = cycles * cycle_ms + batch * (prefill_ms(input_len) + other_ms)``.

    Returns:
        ``cycles_per_request``, ``accept_length`` (None without speculation) and
        ``decode_tok_s_per_request``; all None when the config cannot run.
    """
    exp = evaluator.expected(dict(params))
    tok_s, cycle = exp.get("output_tok_s"), (exp.get("phases") or {}).get("cycle_ms")
    none: dict[str, float | None] = {"cycles_per_request": None, "accept_length": None,
                                     "decode_tok_s_per_request": None}
    if not tok_s or not cycle:
        return none
    shape = evaluator.shape
    cfg = evaluator.space.trial_config(dict(params))
    model = PerformanceModel(evaluator.profile,
                             ModelConfig.from_server_args(cfg.server_args, cfg.env))
    b = shape.concurrency
    busy_ms = b * shape.output_len * 1e3 / tok_s
    cycles = (busy_ms - b * (model.prefill_ms(shape.input_len) + evaluator.profile.other_ms)) / cycle
    if cycles <= 0 or shape.output_len < 2:
        return none
    per_cycle = (shape.output_len - 1) / cycles
    return {"cycles_per_request": cycles,
            "accept_length": per_cycle if exp.get("accept_length") is not None else None,
            "decode_tok_s_per_request": 1e3 * per_cycle / cycle}


@contextmanager
def sim_environment(*, startup_s: float | None = 0.2, **values: str) -> Iterator[None]:
    """Set the emulator's variables for servers started inside the block, then restore them.

    Every ``AUTOTUNE_SIM_*`` variable the shell carries is cleared first, so a fault or a noise
    override left in the environment cannot bend a benchmark.

    Args:
        startup_s: ``AUTOTUNE_SIM_STARTUP_S`` (the emulator's start-up time); None keeps the
            profile's.
        values: More variables, by name.
    """
    names = set(_SIM_VARS) | set(values)
    saved = {name: os.environ.get(name) for name in names}
    try:
        for name in _SIM_VARS:
            os.environ.pop(name, None)
        if startup_s is not None:
            os.environ["AUTOTUNE_SIM_STARTUP_S"] = f"{startup_s:g}"
        os.environ.update({k: str(v) for k, v in values.items()})
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# ----- statistics ---------------------------------------------------------------------------------
def median(values: Sequence[float]) -> float | None:
    """Median, None for no values."""
    return statistics.median(values) if values else None


def half_range(values: Sequence[float]) -> float | None:
    """(max - min) / 2, the spread :func:`autotune.trial.result.summarise` reports; None below two values."""
    return (max(values) - min(values)) / 2 if len(values) > 1 else None


def se_median(values: Sequence[float]) -> float | None:
    """Standard error of the median of ``values`` (normal approximation); None below three."""
    if len(values) < 3:
        return None
    return math.sqrt(math.pi / 2) * statistics.stdev(values) / math.sqrt(len(values))


def rel_diff(value: float | None, reference: float | None) -> float | None:
    """``value / reference - 1``; None when either is unknown."""
    if value is None or not reference:
        return None
    return value / reference - 1.0


# ----- output -------------------------------------------------------------------------------------
def fmt(value: Any, spec: str = ".2f", *, none: str = "n/a") -> str:
    """A number formatted, or ``none`` for None."""
    if value is None:
        return none
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def pct(value: float | None, *, signed: bool = True) -> str:
    """A ratio as a percentage (``+1.2%``)."""
    if value is None:
        return "n/a"
    return f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%"


def verdict(ok: bool | None) -> str:
    """``PASS``, ``FAIL``, or ``-`` for a figure without a target."""
    return "-" if ok is None else ("PASS" if ok else "FAIL")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: left-aligned text, right-aligned numbers-as-text, two-space gaps."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(row: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(row):
            numeric = c[:1].isdigit() or c[:1] in "+-" and c[1:2].isdigit()
            out.append(c.rjust(widths[i]) if numeric else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), rule, *(line(r) for r in cells)])


def machine_line() -> str:
    """When and where the figures were taken: date, CPUs and load (this box is shared)."""
    try:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    return (f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {os.cpu_count()} CPUs; "
            f"load average {load}")


def write_json(path: str | None, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` (nothing when path is None)."""
    if path:
        Path(path).write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
