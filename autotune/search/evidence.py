"""The winner's evidence at the end of a search: its margin over the runner-up, and whether the
finalists need re-measuring.

The trials' per-round readings already say how sure the search is of its best config
(:mod:`autotune.trial.sequential`). :func:`trial_evidence` reads them for the best feasible
speculative trial against the runner-up (the next best) and against break-even (its group's
baseline readings times ``min_speedup``); when both are separated at the space's confidence, the
winner is decisive and the finalists are not re-measured (no fresh server, no fresh baseline).
A runner-up not separated but at most ``search.equivalence_pct`` ahead at that confidence counts
as settled too: re-measuring could change the name, not the user's tok/s by more than that.
Otherwise they are, and :func:`finalist_evidence` states the margin from the re-measurement
(:func:`standing_evidence` decides which of the two the summary states).
The summary (console, ``summary.md``, MLflow) gives :meth:`WinnerEvidence.line`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from autotune.search.trial_report import TrialEntry
from autotune.space._schema_measure import Sequential
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.sequential import Margin, margin, pooled_noise, readings_of

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

__all__ = ["WinnerEvidence", "confidence_of", "finalist_evidence", "settles", "standing_evidence",
           "trial_evidence"]


def confidence_of(space: SearchSpace) -> float:
    """The confidence a search states its margins at: its sequential rule's, else the default's."""
    seq = space.measure.sequential
    return (seq or Sequential()).confidence


@dataclass(frozen=True)
class WinnerEvidence:
    """How far the search's best config is ahead, and on what readings.

    Attributes:
        winner: The best config's params. runner_up: The next best's, None when it had none.
        over_runner_up: The ratio best / runner-up with its interval; None without a runner-up.
        over_break_even: The best's tok/s over its baseline's times ``min_speedup``; None unknown.
        source: ``"trials"`` (the search's own rounds) or ``"finalists"`` (the re-measurement).
        rounds: The readings each side had: ``(best, runner-up)``.
        equivalence: ``search.equivalence_pct`` as a fraction: how far ahead a runner-up may be,
            at the stated confidence, and the winner still settled.
        others_fell: The other finalists were re-measured and none held up (so there is no
            runner-up to compare with, though one was measured).
    """

    winner: dict[str, Any]
    runner_up: dict[str, Any] | None
    over_runner_up: Margin | None
    over_break_even: Margin | None
    source: str
    rounds: tuple[int, int]
    equivalence: float = 0.0
    others_fell: bool = False

    @property
    def equivalent(self) -> bool:
        """Not separated from the runner-up, but the runner-up is at most ``equivalence`` ahead:
        the interval's low end of best / runner-up is at least ``1 - equivalence``."""
        m = self.over_runner_up
        return (m is not None and not m.separated and m.low is not None
                and self.equivalence > 0 and m.low >= 1 - self.equivalence)

    @property
    def decisive(self) -> bool:
        """Separated from the runner-up (or there is none, or it is :attr:`equivalent`) and from
        break-even."""
        ahead = self.runner_up is None or (self.over_runner_up is not None
                                           and (self.over_runner_up.separated or self.equivalent))
        return ahead and self.over_break_even is not None and self.over_break_even.separated

    def line(self) -> str:
        """One line: ``margin over the runner-up (steps=1): +38.0% [+30.1%, +46.5%] at 95%, separated``."""
        if self.runner_up is None:
            head = "no other finalist held up when re-measured" if self.others_fell else "no runner-up measured"
        elif self.over_runner_up is None:
            head = "margin over the runner-up unknown"
        elif self.over_runner_up.low is None or self.over_runner_up.high is None:
            # Too few readings for an interval: how close the two are is unknown, not "within the noise".
            head = (f"margin over the runner-up ({_label(self.runner_up)}): "
                    f"{(self.over_runner_up.ratio - 1) * 100:+.1f}%, no interval: too few readings to tell "
                    "it from the noise")
        else:
            m, lo, hi = self.over_runner_up, self.over_runner_up.low, self.over_runner_up.high
            low, high = f"{(lo - 1) * 100:+.1f}%", f"{(hi - 1) * 100:+.1f}%"
            head = (f"margin over the runner-up ({_label(self.runner_up)}): {(m.ratio - 1) * 100:+.1f}% "
                    f"[{low}, {high}] at {m.confidence:.0%}, "
                    + ("separated" if m.separated else
                       f"not separated, but the runner-up is at most {self.equivalence:.1%} ahead"
                       if self.equivalent else "NOT separated: within the noise"))
        pays = self.over_break_even
        if pays is not None and pays.low is not None and pays.high is not None:
            head += (f"; tok/s over break-even {(pays.ratio - 1) * 100:+.1f}% [{(pays.low - 1) * 100:+.1f}%, "
                     f"{(pays.high - 1) * 100:+.1f}%]" + ("" if pays.separated else " NOT separated"))
        return f"{head} (from the {self.source}' {self.rounds[0]} and {self.rounds[1]} readings)"

    def to_dict(self) -> dict[str, Any]:
        return {"winner": self.winner, "runner_up": self.runner_up,
                "over_runner_up": self.over_runner_up.to_dict() if self.over_runner_up else None,
                "over_break_even": self.over_break_even.to_dict() if self.over_break_even else None,
                "source": self.source, "rounds": list(self.rounds), "decisive": self.decisive,
                "equivalence": self.equivalence, "equivalent": self.equivalent,
                "others_fell": self.others_fell, "line": self.line()}


def _label(params: dict[str, Any]) -> str:
    return " ".join(f"{k.removeprefix('speculative_')}={v}" for k, v in params.items())


Pair = tuple[dict[str, Any], TrialResult]


def _ranked(results: Sequence[Pair], space: SearchSpace) -> list[Pair]:
    maximize = space.objective.direction == "maximize"
    ok = [(p, r) for p, r in results if r.status == Status.FEASIBLE and not r.is_baseline
          and r.metric(space.objective.metric) is not None]
    return sorted(ok, key=lambda pr: pr[1].metric(space.objective.metric) or 0.0, reverse=maximize)


def _evidence(ranked: Sequence[Pair], space: SearchSpace, *, source: str,
              baseline_tok_s: Sequence[float]) -> WinnerEvidence | None:
    if not ranked:
        return None
    conf, maximize, metric = confidence_of(space), space.objective.direction == "maximize", space.objective.metric
    (params, best) = ranked[0]
    mine = readings_of(metric, best.output_tok_s_repeats, baseline_tok_s=best.baseline_tok_s) or []
    other: list[float] = []
    runner: dict[str, Any] | None = None
    over: Margin | None = None
    if len(ranked) > 1:
        runner, second = ranked[1]
        other = readings_of(metric, second.output_tok_s_repeats, baseline_tok_s=second.baseline_tok_s) or []
        # The other configs' spread counts too: the same relative noise, more degrees of freedom.
        noise = pooled_noise([r.output_tok_s_repeats for _, r in ranked[2:]])
        over = margin(mine, other, confidence=conf, maximize=maximize, noise=noise)
    floor = [b * space.constraints.min_speedup for b in baseline_tok_s]
    pays = margin(best.output_tok_s_repeats, floor, confidence=conf)
    return WinnerEvidence(winner=dict(params), runner_up=dict(runner) if runner is not None else None,
                          over_runner_up=over, over_break_even=pays, source=source,
                          rounds=(len(mine), len(other)),
                          equivalence=space.search.equivalence_pct / 100)


def settles(evidence: WinnerEvidence | None, *, rounds: bool, levels: bool) -> bool:
    """Whether the trials' evidence settles the winner, so no finalist is re-measured: it is
    decisive, the trials measured in rounds (their rule's confidence is the search's), and the
    space has no load levels (whose per-level answers are the finalists' own). The search's
    ``finish`` and ``bench_search --cost-per-answer`` both ask this."""
    return evidence is not None and evidence.decisive and rounds and not levels


def trial_evidence(space: SearchSpace, entries: Sequence[TrialEntry],
                   baseline_of: Callable[[str], TrialResult | None]) -> WinnerEvidence | None:
    """The best feasible speculative trial against the runner-up and break-even, from the trials'
    readings (``baseline_of``: a group's stored baseline by key); None when none is feasible."""
    ranked = _ranked([(e.params, e.report.result) for e in entries if e.report.result is not None], space)
    if not ranked:
        return None
    key = next((e.report.baseline_key for e in entries if e.report.result is ranked[0][1]), None)
    base = baseline_of(key) if key else None
    return _evidence(ranked, space, source="trials",
                     baseline_tok_s=base.output_tok_s_repeats if base is not None else ())


def finalist_evidence(space: SearchSpace, finalists: Sequence[tuple[dict[str, Any], TrialResult,
                                                                    TrialResult | None]]) -> WinnerEvidence | None:
    """The same from the re-measured finalists ``(params, result, fresh baseline)``."""
    ranked = _ranked([(p, r) for p, r, _ in finalists], space)
    if not ranked:
        return None
    base = next((b for p, r, b in finalists if r is ranked[0][1]), None)
    return _evidence(ranked, space, source="finalists",
                     baseline_tok_s=base.output_tok_s_repeats if base is not None else ())


def standing_evidence(trials: WinnerEvidence | None, finalists: WinnerEvidence | None, *,
                      remeasured: Sequence[dict[str, Any]]) -> WinnerEvidence | None:
    """The evidence the summary states once finalists were re-measured.

    The finalists' own where it has a runner-up, or where the trials give none. The trials' where
    their runner-up was not re-measured and their best is the finalists' (a comparison the
    re-measurement did not make). Never a trials' runner-up that was re-measured and did not hold
    up, nor a trials' best that did not: those readings are superseded by a confirmation they
    failed, and the finalists' evidence says that no other finalist held up.

    Args:
        trials: :func:`trial_evidence`.
        finalists: :func:`finalist_evidence` of the re-measurement (None: no finalist held up).
        remeasured: The params of every finalist re-measured.
    """
    if finalists is None:
        return trials
    if finalists.runner_up is not None or trials is None:
        return finalists
    again = [dict(p) for p in remeasured]
    if (trials.runner_up is not None and dict(trials.runner_up) in again) or trials.winner != finalists.winner:
        return replace(finalists, others_fell=len(again) > 1)
    return trials
