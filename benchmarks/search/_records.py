"""One record of a recorded landscape (:mod:`benchmarks.search.landscape`), checked field by field.

A record is the JSON ``python -m autotune.trial --json`` prints. Only what the replay reads is
checked: ``params`` (which the space must accept), ``status``, ``is_baseline``, ``output_tok_s``
and its ``output_tok_s_repeats``, ``accept_length`` and the ``phases`` ms per cycle.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError
from autotune.trial.outcome import Status

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

PHASE_KEYS = ("draft_ms", "verify_ms", "extend_ms", "decode_ms", "other_ms", "cycle_ms")
STATUSES = tuple(s.value for s in Status)


@dataclass(frozen=True)
class Entry:
    """One measured config as the replay reads it.

    Attributes:
        index: The record's index in the file.
        params: The space's canonical form of its params.
        is_baseline: Whether it runs without speculation.
        tok_s: The recorded median output tok/s; None when the config failed.
        repeats: The recorded per-repeat tok/s (``(tok_s,)`` when none were kept).
        accept_length: Recorded accept length, None when unknown.
        phases: Recorded ms per cycle (:data:`PHASE_KEYS`), None when unknown.
        reason: Why it failed (or the recorded reason).
    """

    index: int
    params: dict[str, Any]
    is_baseline: bool
    tok_s: float | None
    repeats: tuple[float, ...]
    accept_length: float | None
    phases: dict[str, float | None]
    reason: str | None


def _measured(tok_s: float | None) -> float:
    """A repeat's tok/s, null ones having been refused."""
    if tok_s is None:
        raise ValueError("a repeat of null tok/s is not a measurement")
    return tok_s


def canonical(space: SearchSpace, params: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The space's resolved form of a config (derived values filled), or why it rejects it."""
    why = space.validate_config(params)
    if why is not None:
        return {}, why
    return dict(space.trial_config(dict(params)).params), None


def read_entry(rec: Any, i: int, space: SearchSpace, file: str) -> Entry:
    """Record ``i`` of a landscape, checked field by field against ``space``.

    Raises:
        ConfigError: Naming ``file``, ``records[i]`` and the field: what is wrong and what is
            allowed.
    """
    where = f"records[{i}]"

    def bad(field: str | None, message: str) -> ConfigError:
        return ConfigError(message, file=file, field=f"{where}.{field}" if field else where)

    def number(field: str, value: Any, *, low: float, strict: bool) -> float | None:
        if value is None:
            return None
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value < low or (strict and value == low)):
            raise bad(field, f"must be a finite number {'>' if strict else '>='} {low:g} or "
                             f"null, got {value!r}")
        return float(value)

    if not isinstance(rec, dict):
        raise bad(None, "a record must be a JSON object (what python -m autotune.trial --json "
                        f"prints), got {type(rec).__name__}")
    params = rec.get("params")
    if not isinstance(params, dict):
        raise bad("params", f"must be an object of parameter values, got {params!r}")
    resolved, why = canonical(space, params)
    if why is not None:
        raise bad("params", f"the space {space.file} rejects {show(params)}: {why}")
    status = rec.get("status")
    if status not in STATUSES:
        raise bad("status", f"must be one of {', '.join(STATUSES)}, got {status!r}")
    is_baseline = not space.is_speculative(resolved)
    if rec.get("is_baseline") is not None and rec["is_baseline"] is not is_baseline:
        raise bad("is_baseline", f"is {rec['is_baseline']!r}, but the space runs these params "
                                 f"{'without' if is_baseline else 'with'} speculation")
    tok_s = number("output_tok_s", rec.get("output_tok_s"), low=0.0, strict=True)
    raw_repeats = rec.get("output_tok_s_repeats") or []
    if not isinstance(raw_repeats, list):
        raise bad("output_tok_s_repeats", f"must be a list of tok/s, got {raw_repeats!r}")
    if None in raw_repeats:
        raise bad("output_tok_s_repeats", "a repeat of null tok/s is not a measurement")
    repeats = tuple(_measured(number(f"output_tok_s_repeats[{j}]", v, low=0.0, strict=True))
                    for j, v in enumerate(raw_repeats))
    reason = rec.get("reason") if isinstance(rec.get("reason"), str) else None
    if status == Status.FAILED or tok_s is None:
        tok_s, repeats = None, ()
        reason = reason or "no output_tok_s recorded"
    elif not repeats:
        repeats = (tok_s,)  # no repeats kept: measurements replay the median, without noise
    elif not min(repeats) * (1 - 1e-9) <= tok_s <= max(repeats) * (1 + 1e-9):
        raise bad("output_tok_s", f"{tok_s:g} lies outside its repeats [{min(repeats):g}, "
                                  f"{max(repeats):g}]; output_tok_s is their median")
    phases = rec.get("phases")
    if phases is not None and not isinstance(phases, dict):
        raise bad("phases", f"must be an object of ms per cycle or null, got {phases!r}")
    return Entry(index=i, params=resolved, is_baseline=is_baseline, tok_s=tok_s, repeats=repeats,
                 accept_length=number("accept_length", rec.get("accept_length"), low=1.0,
                                      strict=False),
                 phases={k: number(f"phases.{k}", phases.get(k), low=0.0, strict=False)
                         for k in PHASE_KEYS if k in phases} if phases else {},
                 reason=reason)


def show(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), default=str)
