"""The ``measure:`` section of a space file: how one trial measures, ``sequential`` rounds included."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune._yaml_lines import line_of
from autotune.space._schema import Reader

__all__ = ["Measure", "ROUND_METRICS", "Sequential", "read_measure", "read_sequential"]

#: The objectives a round's tok/s gives a reading of (the others measure at a fixed ``repeats``):
#: what ``autotune.trial.sequential.readings_of`` reads, and what a scheduler can compare rounds on.
ROUND_METRICS = ("output_tok_s", "speedup")


@dataclass(frozen=True)
class Sequential:
    """``measure.sequential``: a trial measures in rounds until it is separated from the incumbent
    (the rule is :mod:`autotune.trial.sequential`'s).

    The defaults rest on the H200's measured repeat noise (``python -m benchmarks.search
    --print-noise``: a pooled SD of ln tok/s of 0.0091, 0.0042-0.0145 per recorded landscape).
    Two rounds are the fewest with a spread; two rounds against an incumbent of three separate a
    config about 5-8% away at 95% (Bonferroni over the 5 looks); six rounds each bring the
    smallest separable gap to about 2%, under half the 4-6% gains the recorded spaces rank.
    """

    min_rounds: int = 2
    max_rounds: int = 6
    confidence: float = 0.95


@dataclass(frozen=True)
class Measure:
    """How one trial measures (``sequential`` None: a fixed ``repeats``)."""

    repeats: int = 3
    startup_timeout_s: float = 900.0
    trial_timeout_s: float | None = None
    phase_profile: bool = True
    fast_start: bool = False
    warmup_until_stable_pct: float | None = None
    warmup_max_rounds: int = 6
    lean_start: bool = True
    # A standby launcher per trial process (autotune.server.standby): the next server's imports
    # done while the current one starts. None: the backend's default (Backend.standby_by_default).
    standby: bool | None = None
    # The standby also starts a fork server that imports what the server's child processes (SGLang's
    # scheduler and detokenizer) import first, and they are forked from it where that is the same as
    # a spawn (autotune/server/_prefork). None: the backend's default (Backend.prefork_by_default).
    prefork: bool | None = None
    sequential: Sequential | None = Sequential()
    # SGLang's prefix cache before each measured repeat: flushed (true), kept (false), or None for
    # the default, flushed exactly when warmup_until_stable_pct is set.
    flush_cache: bool | None = None
    # Which window a repeat's tok/s is over: "steady" (ramp-up and tail left out where usable) or
    # "whole" (autotune.trial.window).
    window: str = "steady"


def read_sequential(reader: Reader, value: Any, line: int | None, *, repeats_written: bool) -> Sequential | None:
    """Parse ``measure.sequential``: ``true``, ``false`` or ``{min_rounds, max_rounds, confidence}``.

    Unwritten, it is on unless the space writes ``measure.repeats`` (the fixed mode it asked for).
    """
    if value is None:
        return None if repeats_written else Sequential()
    if isinstance(value, bool):
        return Sequential() if value else None
    reader.mapping(value, "measure.sequential", line, allowed=("min_rounds", "max_rounds", "confidence"))
    d = Sequential()
    low = reader.integer(value.get("min_rounds", d.min_rounds), "measure.sequential.min_rounds",
                         line_of(value, "min_rounds"), minimum=2)
    high = reader.integer(value.get("max_rounds", max(d.max_rounds, low)), "measure.sequential.max_rounds",
                          line_of(value, "max_rounds"), minimum=low)
    conf = reader.number(value.get("confidence", d.confidence), "measure.sequential.confidence",
                         line_of(value, "confidence"), positive=True)
    if not 0.5 < conf < 1:
        reader.fail(f"confidence must be between 0.5 and 1 (e.g. 0.95), got {conf}",
                    field="measure.sequential.confidence", line=line_of(value, "confidence"))
    return Sequential(min_rounds=low, max_rounds=high, confidence=conf)


def read_measure(reader: Reader, value: Any, line: int | None) -> Measure:
    """Parse ``measure: {repeats, startup_timeout_s, trial_timeout_s, phase_profile, fast_start}``."""
    if value is None:
        return Measure()
    reader.mapping(value, "measure", line, allowed=("repeats", "startup_timeout_s",
                                                    "trial_timeout_s", "phase_profile",
                                                    "fast_start", "warmup_until_stable_pct",
                                                    "warmup_max_rounds", "lean_start", "sequential",
                                                    "flush_cache", "window", "standby", "prefork"))
    standby = (reader.boolean(value["standby"], "measure.standby", line_of(value, "standby"))
               if value.get("standby") is not None else None)
    prefork = (reader.boolean(value["prefork"], "measure.prefork", line_of(value, "prefork"))
               if value.get("prefork") is not None else None)
    if prefork and standby is False:
        reader.fail("true needs a standby (the fork server is the standby's), but measure.standby is false: "
                    "set measure.standby to true or leave it out, or drop measure.prefork",
                    field="measure.prefork", line=line_of(value, "prefork"))
    return Measure(
        sequential=read_sequential(reader, value.get("sequential"), line_of(value, "sequential") or line,
                                   repeats_written="repeats" in value),
        repeats=reader.integer(value.get("repeats", 3), "measure.repeats",
                               line_of(value, "repeats"), minimum=1),
        startup_timeout_s=reader.number(value.get("startup_timeout_s", 900),
                                        "measure.startup_timeout_s",
                                        line_of(value, "startup_timeout_s"), positive=True),
        trial_timeout_s=reader.number(value.get("trial_timeout_s"), "measure.trial_timeout_s",
                                      line_of(value, "trial_timeout_s"), positive=True,
                                      allow_none=True),
        phase_profile=reader.boolean(value.get("phase_profile", True), "measure.phase_profile",
                                     line_of(value, "phase_profile")),
        fast_start=reader.boolean(value.get("fast_start", False), "measure.fast_start",
                                  line_of(value, "fast_start")),
        warmup_until_stable_pct=reader.number(value.get("warmup_until_stable_pct"),
                                              "measure.warmup_until_stable_pct",
                                              line_of(value, "warmup_until_stable_pct"),
                                              positive=True, allow_none=True),
        warmup_max_rounds=reader.integer(value.get("warmup_max_rounds", 6),
                                         "measure.warmup_max_rounds",
                                         line_of(value, "warmup_max_rounds"), minimum=2),
        lean_start=reader.boolean(value.get("lean_start", True), "measure.lean_start",
                                  line_of(value, "lean_start")),
        standby=standby,
        prefork=prefork,
        window=reader.string(value.get("window", "steady"), "measure.window", line_of(value, "window"),
                             choices=("steady", "whole")),
        flush_cache=(reader.boolean(value["flush_cache"], "measure.flush_cache", line_of(value, "flush_cache"))
                     if value.get("flush_cache") is not None else None))
