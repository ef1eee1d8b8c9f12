"""The end of a search as ``bench_search`` counts it: finalists re-measured, then the winner policy.

A real search (:func:`autotune.search.conclude.conclude`) does not serve its best reading: it takes
the ``max(1, search.finalists)`` best feasible speculative trials, re-measures each beside a fresh
baseline of its group, and hands every record to the one winner policy
(:func:`autotune.trial.winner.pick_winner`): only finalists that held up compete among the
speculative configs, and a baseline that reads higher still wins. :func:`conclude` does the same on
an oracle's records, so that the benchmark's pick is the tool's:

- **Which finalists**: the speculative trials judged feasible when they ran, best reading first, in
  trial order among equals (as ``conclude`` sorts its trial list); a config measured twice is two
  trials and can be chosen twice, as in the search.
- **Their measurements**: the oracle's evaluator called as the search's finalists call theirs
  (``fresh_baseline=True``): the next draws of the oracle's noise for that config and for its group's
  baseline (the n-th measurement of a config in seed s is the same draw for every strategy), one
  draw each, as a trial's. A finalist's extra repeats (``search.finalist_repeats``) are not
  credited with less noise: the benchmark's noise is per measurement, and a landscape holds only
  the repeats it recorded.
- **What they cost**: two runs a finalist (its fresh baseline, then the config: two servers, as
  the search's evaluator starts with ``fresh_baseline=True``), added to the trials the search ran.
- **Their GPU time**: each finalist server's :class:`~autotune.trial.gpu_time.GpuTime` (the
  evaluator's, :mod:`benchmarks.search.gpu_model`) as ``finalists`` events (``Concluded.spent``),
  counted with the run's own by :func:`autotune.trial.gpu_time.count`.
- **The winner**: ``pick_winner`` over the trials (each reading as judged when it ran), the
  finalists (judged against their fresh baselines) and every baseline reading.

A conclusion is hypothetical: it is what a search stopped after this many trials would name. It
reads the noise stream without consuming it, so a config the search measures again later gets the
draw a finalist would have got.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.trial.gpu_time import FINALISTS, Spent, events_of
from autotune.trial.result import TrialResult
from autotune.trial.winner import FINALIST, TRIAL, Contender, pick_winner

#: Runs one finalist costs: its group's fresh baseline and the config itself.
RUNS_PER_FINALIST = 2


@dataclass(frozen=True)
class Reading:
    """One run the search made, as its trial reported it.

    Attributes:
        key: The config's canonical key.
        tok_s: The measured tok/s (None when the run failed).
        feasible: The trial's verdict when it ran (a baseline that ran is feasible).
        is_baseline: The config runs without speculation.
    """

    key: tuple
    tok_s: float | None
    feasible: bool
    is_baseline: bool

    @classmethod
    def of(cls, key: tuple, result: TrialResult, *, feasible: bool, is_baseline: bool) -> "Reading":
        """From an evaluated run's result; a failed run is never feasible."""
        return cls(key=key, tok_s=result.output_tok_s if result.ok else None,
                   feasible=bool(result.ok and feasible), is_baseline=is_baseline)


@dataclass(frozen=True)
class Confirmed:
    """One finalist's re-measurement.

    Attributes:
        key: The config's key.
        tok_s: Its new reading (None when it failed).
        baseline_tok_s: Its group's fresh baseline reading (None when that failed).
        held: It is feasible again, against the fresh baseline.
    """

    key: tuple
    tok_s: float | None
    baseline_tok_s: float | None
    held: bool


@dataclass(frozen=True)
class Concluded:
    """What a search stopped here would name, and what its conclusion cost.

    Attributes:
        winner: The winning config's key (None when nothing feasible was measured).
        runs: Runs the conclusion spent (two a finalist).
        finalists: The finalists' re-measurements, best search reading first.
        spent: The GPU time of the conclusion's servers, as events.
    """

    winner: tuple | None
    runs: int
    finalists: tuple[Confirmed, ...]
    spent: tuple[Spent, ...] = field(default=())


def conclude(oracle: Any, *, finalists: int, settled: bool = False) -> Concluded:
    """The winner a search stopped after ``oracle.trials`` trials would name.

    Args:
        oracle: An :class:`benchmarks.search.problem.Oracle` (its readings, its noise
            stream, its space), or anything with ``readings``, ``evaluator``, ``group_of`` and
            ``params_of`` (:class:`benchmarks.search.cost_replay.ProductRun`).
        finalists: How many finalists to re-measure (at least 1, as the search confirms).
        settled: The trials' evidence is decisive (:func:`autotune.search.evidence.trial_evidence`,
            as the search's ``finish`` asks it): no finalist is re-measured, and the winner
            policy names the winner from the trials' and baselines' readings alone.

    Raises:
        ValueError: ``finalists`` below 1.
    """
    if finalists < 1:
        raise ValueError(f"finalists must be >= 1, got {finalists}")
    readings: list[Reading] = oracle.readings
    spec_ok = [(r.tok_s, r) for r in readings if r.feasible and not r.is_baseline and r.tok_s is not None]
    chosen = [] if settled else [r for _, r in sorted(spec_ok, key=lambda m: m[0], reverse=True)[:finalists]]
    cands = [Contender(ref=r.key, value=r.tok_s, is_baseline=r.is_baseline,
                       feasible=r.feasible and r.tok_s is not None, stage=TRIAL) for r in readings]
    # The conclusion's draws come after the oracle's without taking them from its stream.
    evaluator = oracle.evaluator.fork()
    confirmed = []
    spent: list[Spent] = []
    for r in chosen:
        gkey = oracle.group_of(r.key)
        # Like the search's finalists: the same evaluator, a fresh baseline beside the config.
        ev = evaluator(oracle.params_of(r.key), name="finalist", fresh_baseline=True)
        base = ev.baseline
        spent += events_of(base.gpu_time if base is not None else None, FINALISTS)
        spent += events_of(ev.result.gpu_time, FINALISTS)
        base_tok = base.output_tok_s if base is not None and base.ok else None
        tok = ev.result.output_tok_s if ev.result.ok else None
        if base_tok is not None:
            cands.append(Contender(ref=gkey, value=base_tok, is_baseline=True, feasible=True))
        held = bool(ev.result.feasible)
        cands.append(Contender(ref=r.key, value=tok, is_baseline=False, feasible=held,
                               stage=FINALIST))
        confirmed.append(Confirmed(key=r.key, tok_s=tok, baseline_tok_s=base_tok, held=held))
    pick = pick_winner(cands, maximize=True)
    return Concluded(winner=None if pick is None else pick.ref, runs=RUNS_PER_FINALIST * len(chosen),
                     finalists=tuple(confirmed), spent=tuple(spent))


__all__ = ["Concluded", "Confirmed", "RUNS_PER_FINALIST", "Reading", "conclude"]
