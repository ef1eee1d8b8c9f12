"""The launch settings the emulator's performance model reads, parsed from server args and env.

:class:`ModelConfig` is what :class:`~autotune.sim.model.PerformanceModel` depends on: the
resolved speculative settings, TP size, all-reduce and NCCL choices, attention backend and a
forced accept length. Reading them from ``ServerArgs`` fields and the environment the way SGLang
does (a bad NCCL value is recorded, not fatal) is kept apart from the timing model itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from autotune.nccl_values import ALGORITHMS, PROTOCOLS

__all__ = ["ACCEPTANCE_BY_TEXT_ENV", "ModelConfig", "SpecSettings", "parse_acceptance_by_text"]

#: Emulator knob: per-position top-1 rates for the prompts that contain a marker text (the
#: emulator sees a prompt's text, not its category), as a JSON object ``{"MARKER": [r1, ...]}``.
ACCEPTANCE_BY_TEXT_ENV = "AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT"

_ALL_NCCL_ALGOS = tuple(a.lower() for a in ALGORITHMS)
_ALL_NCCL_PROTOS = tuple(p.lower() for p in PROTOCOLS)


@dataclass(frozen=True)
class SpecSettings:
    """Resolved speculative settings (after SGLang's rules)."""

    algorithm: str
    num_steps: int
    topk: int
    num_draft_tokens: int


@dataclass(frozen=True)
class ModelConfig:
    """The launch settings the performance model depends on."""

    tp_size: int = 1
    spec: SpecSettings | None = None
    custom_all_reduce: bool = True
    nccl_algo: str | None = None
    nccl_proto: str | None = None
    nccl_min_channels: int | None = None
    nccl_max_channels: int | None = None
    attention_backend: str | None = None
    speculative_attention_mode: str = "prefill"
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    disable_overlap_schedule: bool = False
    invalid_env: tuple[str, ...] = ()
    # SGLANG_SIMULATE_ACC_LEN: a forced mean accept length (tokens per cycle, bonus included).
    simulate_acc_len: float | None = None
    # AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT: (marker, rates) pairs; the first marker a prompt contains wins.
    acceptance_by_text: tuple[tuple[str, tuple[float, ...]], ...] = ()

    @classmethod
    def from_server_args(cls, args: Mapping[str, Any], env: Mapping[str, str]) -> "ModelConfig":
        """Build from resolved ``ServerArgs`` fields (underscore names) and the process env."""
        algo = args.get("speculative_algorithm")
        spec = None
        if algo:
            algo = str(algo).upper()
            spec = SpecSettings(
                algorithm="EAGLE" if algo == "NEXTN" else algo,
                num_steps=int(args["speculative_num_steps"]),
                topk=int(args["speculative_eagle_topk"]),
                num_draft_tokens=int(args["speculative_num_draft_tokens"]),
            )
        invalid: list[str] = []

        def _choice(name: str, allowed: tuple[str, ...]) -> str | None:
            raw = env.get(name)
            if raw is None or raw == "":
                return None
            # NCCL accepts a list and a leading ^ for exclusion; the model keys on the first entry.
            first = raw.lstrip("^").split(",")[0].strip().lower()
            if first not in allowed:
                invalid.append(f"{name}={raw}")
                return None
            return first

        def _int(name: str) -> int | None:
            raw = env.get(name)
            if raw is None or raw == "":
                return None
            try:
                value = int(raw)
            except ValueError:
                invalid.append(f"{name}={raw}")
                return None
            if value < 1:
                invalid.append(f"{name}={raw}")
                return None
            return value

        return cls(
            tp_size=int(args.get("tp_size") or 1),
            spec=spec,
            custom_all_reduce=not bool(args.get("disable_custom_all_reduce")),
            nccl_algo=_choice("NCCL_ALGO", _ALL_NCCL_ALGOS),
            nccl_proto=_choice("NCCL_PROTO", _ALL_NCCL_PROTOS),
            nccl_min_channels=_int("NCCL_MIN_NCHANNELS"),
            nccl_max_channels=_int("NCCL_MAX_NCHANNELS"),
            attention_backend=args.get("attention_backend"),
            speculative_attention_mode=str(args.get("speculative_attention_mode") or "prefill"),
            mem_fraction_static=args.get("mem_fraction_static"),
            max_running_requests=args.get("max_running_requests"),
            disable_overlap_schedule=bool(args.get("disable_overlap_schedule")),
            invalid_env=tuple(invalid),
            simulate_acc_len=_simulate_acc_len(env.get("SGLANG_SIMULATE_ACC_LEN")),
            acceptance_by_text=parse_acceptance_by_text(env.get(ACCEPTANCE_BY_TEXT_ENV)),
        )


def parse_acceptance_by_text(raw: str | None) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """``{"MARKER": [r1, r2, ...], ...}`` as (marker, rates) pairs, in the object's order.

    Raises:
        ValueError: Not such an object, an empty marker, or a rate outside (0, 1].
    """
    if raw is None or raw.strip() == "":
        return ()
    where = f"{ACCEPTANCE_BY_TEXT_ENV}"
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{where}: not JSON ({exc}); expected {{\"MARKER\": [0.8, 0.7, ...]}}") from None
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{where}: expected a non-empty object {{\"MARKER\": [0.8, 0.7, ...]}}")
    out = []
    for marker, rates in value.items():
        if not marker:
            raise ValueError(f"{where}: an empty marker would match every prompt")
        if not isinstance(rates, list) or not rates or not all(
                isinstance(r, (int, float)) and not isinstance(r, bool) and 0 < r <= 1 for r in rates):
            raise ValueError(f"{where}[{marker!r}]: expected a list of probabilities in (0, 1], got {rates!r}")
        out.append((str(marker), tuple(float(r) for r in rates)))
    return tuple(out)


def _simulate_acc_len(raw: str | None) -> float | None:
    """SGLang's reading of ``SGLANG_SIMULATE_ACC_LEN``: a float, off when <= 0 or unparsable.

    SGLang (``srt/environ.py`` ``EnvFloat``) warns and falls back to its default of -1 (off) on a
    value that is not a float, so the emulator does the same rather than failing start-up.
    """
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value > 0 and math.isfinite(value) else None
