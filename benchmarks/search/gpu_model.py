"""What a replayed server costs in GPU time: recorded where the landscape has it, modelled where not.

``bench_search`` counts GPU time with the search's own count
(:func:`autotune.trial.gpu_time.count`): every drawn result carries a
:class:`~autotune.trial.gpu_time.GpuTime`, as a measured one does, and the oracle turns the
servers a run started into :class:`~autotune.trial.gpu_time.Spent` events. This module gives each
config its :class:`ServerTimes`:

- **Recorded** (the real H200 landscapes, ``recorded-h200-*.json``): each record is the JSON of
  ``python -m autotune.trial``, so it holds its server's start-up (``startup_s``), the time to the
  end of its measurement (``duration_s``), the stabilising passes (``warmup_tok_s``) and, in the
  4 x 768 files, each measured repeat's wall seconds (``repeat_breakdown[].wall_s``). A round is
  the median of those repeats; where a file has no ``repeat_breakdown`` (the first two), a round is
  *derived*: the seconds after start-up over the passes of the measured workload the server ran
  (stabilising passes and repeats). Warm-up is what start-up and the repeats leave of
  ``duration_s``, less one round where the record's warm-up became stable: these records predate
  the stable pass being kept as round 1 (:mod:`autotune.trial.level_measure`), and the product now
  pays that pass once. Teardown was not recorded on the H200 (the record predates it): it is unknown,
  so not counted, in every strategy and in the sweep alike.
- **Modelled** (the emulator, the synthetic families, any record without ``startup_s``):
  start-up :data:`MODEL_STARTUP_S`, the median of the 40 recorded H200 start-ups; a round is the
  workload's measured tokens (``num_prompts x output_len``, ``num_prompts`` as the product sizes it
  when unwritten: :func:`autotune.space.workload.num_prompts_of`) at the config's true tok/s; warm-up is
  :data:`MODEL_WARMUP_ROUNDS` rounds (the stabilising passes stop at two that agree), one of them
  when the space stabilises (``measure.warmup_until_stable_pct``: the second is round 1); teardown
  unknown, as recorded.

A config that fails pays its start-up (a crash or out of memory at start) and nothing else. The
GPUs are the config's ``tp_size`` (1 when unset).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.space.search_space import SearchSpace
from autotune.space.trial_config import config_key
from autotune.space.workload import num_prompts_of
from autotune.trial.gpu_time import BASELINES, TRIALS, GpuTime, Spent, events_of, gpus_of

__all__ = ["MODEL_STARTUP_S", "MODEL_WARMUP_ROUNDS", "ServerTimes", "modelled_times", "recorded_times",
           "server_times", "sweep_events"]

#: Seconds from spawn to healthy in the model: the median of the 40 start-ups the recorded H200
#: landscapes hold (46-76 s by file; ``tests/unit/bench_search/test_gpu_model.py`` checks it).
MODEL_STARTUP_S = 67.0
#: Stabilising passes of the measured workload before the repeats, in the model.
MODEL_WARMUP_ROUNDS = 2


@dataclass(frozen=True)
class ServerTimes:
    """One config's server, in seconds.

    Attributes:
        gpus: GPUs it holds.
        startup_s: Spawn to healthy (or to a failed start's end).
        warmup_s: Warm-up; None for a config that fails at start-up.
        round_s: One measured repeat (round); None for a config that fails at start-up.
        teardown_s: Stop to gone; None: not recorded.
        source: ``recorded``, ``derived`` (a round from a record without per-repeat walls) or ``model``.
    """

    gpus: int
    startup_s: float
    warmup_s: float | None
    round_s: float | None
    teardown_s: float | None
    source: str

    def record(self, rounds: int) -> GpuTime:
        """The :class:`GpuTime` of one server that measures ``rounds`` rounds (none when it fails
        at start-up, which pays start-up and teardown only)."""
        if rounds < 0:
            raise ValueError(f"rounds must be >= 0, got {rounds}")
        ran = self.round_s is not None
        return GpuTime(gpus=self.gpus, startup_s=self.startup_s, warmup_s=self.warmup_s if ran else None,
                       measure_s=rounds * self.round_s if self.round_s is not None else None,
                       teardown_s=self.teardown_s)


def _gpus(space: SearchSpace, params: Mapping[str, Any]) -> int:
    return gpus_of(params.get("tp_size") or space.fixed_args.get("tp_size"))


def recorded_times(record: Mapping[str, Any], *, gpus: int) -> ServerTimes | None:
    """A record's times (see the module's docstring); None when it has no ``startup_s``."""
    startup = record.get("startup_s")
    if startup is None:
        return None
    if record.get("status") == "failed" or record.get("output_tok_s") is None:
        return ServerTimes(gpus, float(startup), None, None, None, "recorded")
    walls = [r["wall_s"] for r in record.get("repeat_breakdown") or [] if r.get("wall_s") is not None]
    repeats = len(record.get("output_tok_s_repeats") or []) or len(walls)
    after = float(record["duration_s"]) - float(startup)
    if walls:
        round_s, source = statistics.median(walls), "recorded"
    else:
        passes = len(record.get("warmup_tok_s") or []) + repeats
        if passes < 1:
            return None
        round_s, source = after / passes, "derived"
    warmup = max(after - repeats * round_s, 0.0)
    if record.get("warmup_stable") is True and len(record.get("warmup_tok_s") or []) >= 2:
        # Recorded before the stable pass became round 1 (autotune.trial.level_measure): the product
        # now keeps that pass as a round, so the server pays one pass of it less.
        warmup = max(warmup - round_s, 0.0)
    return ServerTimes(gpus, float(startup), warmup, round_s, None, source)


def modelled_times(space: SearchSpace, params: Mapping[str, Any], tok_s: float | None) -> ServerTimes:
    """The model's times for a config of true tok/s ``tok_s`` (None: it fails at start-up)."""
    gpus = _gpus(space, params)
    if tok_s is None or not tok_s > 0:
        return ServerTimes(gpus, MODEL_STARTUP_S, None, None, None, "model")
    workload = space.workload or {}
    # The requests a search's repeat sends: as written, else sized as the product sizes them.
    tokens = num_prompts_of(workload) * int(workload.get("output_len") or 256)
    round_s = tokens / tok_s
    # With a stabilising warm-up the second of its two passes is round 1: one pass is warm-up only.
    stabilises = getattr(getattr(space, "measure", None), "warmup_until_stable_pct", None) is not None
    warm_rounds = MODEL_WARMUP_ROUNDS - 1 if stabilises else MODEL_WARMUP_ROUNDS
    return ServerTimes(gpus, MODEL_STARTUP_S, warm_rounds * round_s, round_s, None, "model")


def server_times(problem: Any, params: Mapping[str, Any]) -> ServerTimes:
    """A config's times in ``problem``: its landscape record's where it has them, else the model."""
    space = problem.space
    landscape = getattr(problem.evaluator, "landscape", None)
    if landscape is not None:
        entry = landscape.entry(params)
        found = recorded_times(landscape.records[entry.index], gpus=_gpus(space, entry.params))
        if found is not None:
            return found
    return modelled_times(space, params, problem.truth(params).get("output_tok_s"))


def sweep_events(problem: Any, *, repeats: int | None = None) -> list[Spent]:
    """The exhaustive sweep: every config of the space and each group's baseline, each measured
    once on its own server (``repeats`` rounds, the space's ``measure.repeats`` by default)."""
    rounds = repeats if repeats is not None else int(problem.space.measure.repeats)
    seen: set[tuple] = set()
    events: list[Spent] = []
    for params in _with_baselines(problem, problem.configs):
        key = config_key(params)
        if key in seen:
            continue
        seen.add(key)
        stage = TRIALS if problem.space.is_speculative(params) else BASELINES
        events += events_of(server_times(problem, params).record(rounds), stage)
    return events


def _with_baselines(problem: Any, configs: Sequence[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for params in configs:
        yield params
        yield problem.space.baseline_params(dict(params))
