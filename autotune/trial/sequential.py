"""Sequential measurement: after each measured round, go on or stop, from the evidence so far.

A trial measures in rounds (one pass of the measured workload each) and, after each, asks
:func:`decide` whether it is already separated from the search's incumbent (the best config
measured so far). The same function decides for the search's trials (:mod:`autotune.trial.measure`
through :class:`autotune.trial.evaluator.MeasuringEvaluator`) and for bench_search's replay
(``benchmarks.search.drawn``); :func:`margin` states the winner's margin over the runner-up with
the same statistics.

The rule (``docs/search-spaces.md``, ``measure.sequential``):

- Readings are the objective's value per round (tok/s, or speedup over the group's baseline),
  compared on the log scale, so noise is relative as measured on the H200 (the pooled
  within-config SD of ln tok/s is 0.0091, 0.0042-0.0145 per recorded landscape:
  ``python -m benchmarks.search --print-noise``).
- The difference of means ``d = mean(ln x) - mean(ln x0)`` (config minus incumbent; negated for a
  minimised objective) gets a two-sample t-interval with the pooled within-config SD of both and
  of the search's other measured configs (:attr:`Evidence.noise`: relative noise is one property
  of the machine and workload, as ``benchmarks.search.noise`` pools it), with
  ``n + n0 - 2`` plus the others' degrees of freedom. The config needs at least
  ``min_rounds >= 2`` readings: one reading never decides.
- Each look spends an equal share of ``1 - confidence`` (Bonferroni over the
  ``max_rounds - min_rounds + 1`` looks a trial can take), so the chance that any look of a trial
  stops it on the wrong side is at most ``1 - confidence``, however many rounds it runs.
- ``d``'s upper bound below 0: :attr:`Decision.STOP_WORSE` (clearly worse: abort). Its lower
  bound above 0: :attr:`Decision.STOP_BETTER` (clearly better: no more needed). Neither, with
  ``max_rounds`` readings: :attr:`Decision.STOP_CAP` (close). Without an incumbent (the first
  config, or none feasible yet): :attr:`Decision.STOP_ALONE` at ``min_rounds``. Else
  :attr:`Decision.CONTINUE`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, Protocol, Sequence

from autotune.space._schema_measure import ROUND_METRICS
from autotune.trial.gpu_time import GpuTime

__all__ = ["Consult", "Decision", "Evidence", "Margin", "Round", "SequentialRule", "decide", "margin",
           "pooled_noise", "readings_of", "round_consultant", "t_quantile"]

#: The objectives a round's tok/s gives a reading of (the space's list: a scheduler needs one).
SEQUENTIAL_METRICS = ROUND_METRICS


class Decision(StrEnum):
    """What a trial does after a round."""

    CONTINUE = "continue"
    STOP_WORSE = "stop-worse"
    STOP_BETTER = "stop-better"
    STOP_CAP = "stop-cap"
    STOP_ALONE = "stop-alone"

    @property
    def early(self) -> bool:
        """Whether the trial stopped before the cap because the evidence separated it."""
        return self in (Decision.STOP_WORSE, Decision.STOP_BETTER)


@dataclass(frozen=True)
class SequentialRule:
    """How many rounds a trial may take, and how sure a stop must be.

    No defaults here: a space's ``measure.sequential`` holds them, with the measured noise they
    rest on (:class:`autotune.space._schema_measure.Sequential`).

    Attributes:
        min_rounds: Rounds before any decision (>= 2).
        max_rounds: The cap (>= min_rounds).
        confidence: Of the whole trial's decision (0.5 < c < 1).
    """

    min_rounds: int
    max_rounds: int
    confidence: float

    def __post_init__(self) -> None:
        if self.min_rounds < 2:
            raise ValueError(f"min_rounds must be >= 2 (one reading has no spread), got {self.min_rounds}")
        if self.max_rounds < self.min_rounds:
            raise ValueError(f"max_rounds ({self.max_rounds}) must be >= min_rounds ({self.min_rounds})")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"confidence must be between 0.5 and 1, got {self.confidence}")

    @property
    def look_confidence(self) -> float:
        """The two-sided confidence of one look (Bonferroni over the looks a trial can take)."""
        looks = self.max_rounds - self.min_rounds + 1
        return 1 - (1 - self.confidence) / looks

    def to_dict(self) -> dict[str, Any]:
        """JSON form (MLflow, the result's record)."""
        return {"min_rounds": self.min_rounds, "max_rounds": self.max_rounds,
                "confidence": self.confidence}


@dataclass(frozen=True)
class Evidence:
    """The incumbent's readings, on the objective's scale.

    Attributes:
        readings: Its per-round values (positive).
        label: Which trial it is (for the record).
        noise: ``(sum of squares, degrees of freedom)`` of ln readings about each config's own
            mean, over the search's other configs (:func:`pooled_noise`); ``(0, 0)``: none.
    """

    readings: tuple[float, ...]
    label: str = ""
    noise: tuple[float, int] = (0.0, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"readings": list(self.readings), "label": self.label, "noise": list(self.noise)}

    @classmethod
    def from_dict(cls, data: Any) -> Evidence | None:
        """The evidence a JSON record holds; None when it holds no usable readings."""
        if not isinstance(data, dict):
            return None
        values = _positive(data.get("readings") or ())
        noise = data.get("noise") or (0.0, 0)
        try:
            pool = (max(float(noise[0]), 0.0), max(int(noise[1]), 0))
        except (TypeError, ValueError, IndexError):
            pool = (0.0, 0)
        return cls(readings=tuple(values), label=str(data.get("label") or ""), noise=pool) if values else None


@dataclass(frozen=True)
class Margin:
    """How far one config is ahead of another: ``ratio`` of geometric means (a > 1 is better in
    the objective's direction) with its interval at ``confidence``; None bounds when unknown."""

    ratio: float
    low: float | None
    high: float | None
    confidence: float
    separated: bool

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high,
                "confidence": self.confidence, "separated": self.separated}


def readings_of(metric: str, tok_s: Sequence[float], *, baseline_tok_s: float | None) -> list[float] | None:
    """Per-round values of the objective ``metric`` from per-round tok/s, None when the rounds do
    not give it: a speedup needs its baseline's tok/s; latency objectives are not per-round here.
    """
    if metric == "output_tok_s":
        return list(tok_s)
    if metric == "speedup" and baseline_tok_s is not None and baseline_tok_s > 0:
        return [x / baseline_tok_s for x in tok_s]
    return None


def _positive(values: Any) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out.append(float(v))
    return out


def pooled_noise(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """``(sum of squares, degrees of freedom)`` of ln values about each group's own mean, over the
    groups with two or more positive values: the pooled relative noise of several configs."""
    ss, df = 0.0, 0
    for group in groups:
        logs = [math.log(x) for x in _positive(group)]
        if len(logs) >= 2:
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
    return ss, df


def _interval(a: Sequence[float], b: Sequence[float], *, confidence: float, maximize: bool,
              noise: tuple[float, int] = (0.0, 0)) -> tuple[float, float | None, float | None]:
    """``(d, low, high)`` of ``d = mean ln a - mean ln b`` (sign flipped when minimising); the
    bounds are None without a pooled degree of freedom."""
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    d = (ma - mb) if maximize else (mb - ma)
    df = len(la) + len(lb) - 2 + noise[1]
    if df < 1:
        return d, None, None
    ss = sum((x - ma) ** 2 for x in la) + sum((x - mb) ** 2 for x in lb) + noise[0]
    se = math.sqrt(ss / df) * math.sqrt(1 / len(la) + 1 / len(lb))
    half = t_quantile((1 + confidence) / 2, df) * se
    return d, d - half, d + half


def decide(readings: Sequence[float], *, incumbent: Evidence | None, rule: SequentialRule,
           maximize: bool = True) -> Decision:
    """What a trial does after its latest round (the rule of the module doc).

    Args:
        readings: The config's per-round values so far (non-positive or unknown ones are dropped:
            a round that measured nothing is no evidence).
        incumbent: The best config's evidence so far, None when there is none.
        rule: Rounds and confidence.
        maximize: The objective's direction.
    """
    values = _positive(readings)
    if len(values) >= rule.max_rounds:
        cap = True
    elif len(values) < rule.min_rounds:
        return Decision.CONTINUE
    else:
        cap = False
    if incumbent is None or not incumbent.readings:
        return Decision.STOP_ALONE
    _, low, high = _interval(values, incumbent.readings, confidence=rule.look_confidence,
                             maximize=maximize, noise=incumbent.noise)
    if high is not None and high < 0:
        return Decision.STOP_WORSE
    if low is not None and low > 0:
        return Decision.STOP_BETTER
    return Decision.STOP_CAP if cap else Decision.CONTINUE


def margin(winner: Sequence[float], runner_up: Sequence[float], *, confidence: float,
           maximize: bool = True, noise: tuple[float, int] = (0.0, 0)) -> Margin | None:
    """The winner's margin over the runner-up from their readings, None without readings.

    ``separated`` is True when the interval of the ratio lies wholly above 1 (in the objective's
    direction): at ``confidence``, the winner is the better of the two.
    """
    a, b = _positive(winner), _positive(runner_up)
    if not a or not b:
        return None
    d, low, high = _interval(a, b, confidence=confidence, maximize=maximize, noise=noise)
    return Margin(ratio=math.exp(d), low=None if low is None else math.exp(low),
                  high=None if high is None else math.exp(high), confidence=confidence,
                  separated=low is not None and low > 0)


@functools.lru_cache(maxsize=1024)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile at ``p`` (0.5 < p < 1) with ``df >= 1`` degrees of freedom.

    Bisection on the CDF, which is the regularised incomplete beta function (a continued
    fraction, as in Numerical Recipes' ``betacf``): numpy has no t distribution and scipy is not
    a dependency.
    """
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return (lo + hi) / 2


def _t_cdf(t: float, df: int) -> float:
    x = df / (df + t * t)
    tail = 0.5 * _betai(df / 2, 0.5, x)
    return 1 - tail if t >= 0 else tail


def _betai(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log(1 - x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + aa * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 3e-16:
            break
    return h


@dataclass(frozen=True)
class Round:
    """One measured round as ``on_round`` hears it (a trial's intermediate report is built from it).

    Attributes:
        number: The round (1 for the first).
        readings: The objective's per-round values so far.
        tok_s: The per-round tok/s so far (the readings' source).
        decision: What :func:`decide` said after it.
        spent: The server's GPU time up to this round (start-up, warm-up, measurement so far;
            no teardown yet), None when the measurer does not time it.
    """

    number: int
    readings: list[float]
    tok_s: list[float]
    decision: Decision
    spent: GpuTime | None = None


class Consult(Protocol):
    """What a measurer asks after each round: True measures another."""

    def __call__(self, tok_s: list[float], spent: GpuTime | None = None) -> bool:
        """Args: ``tok_s``: every round's tok/s so far; ``spent``: the server's GPU time so far."""
        ...


def round_consultant(*, rule: SequentialRule | None, incumbent: Callable[[], Evidence | None] | None,
                     metric: str, maximize: bool, baseline_tok_s: float | None,
                     on_round: Callable[[Round], None] | None = None,
                     ) -> tuple[Consult | None, dict[str, Any]]:
    """What a trial asks after each round, and the record it keeps of the last answer.

    The one consultation both the measuring evaluator and bench_search's replay use: the round's
    tok/s become readings of ``metric`` (:func:`readings_of`), :func:`decide` judges them against
    the incumbent read at that moment, ``on_round`` hears each :class:`Round`.

    Returns:
        ``(consult, seen)``: ``consult(tok_s)`` is True while the trial should measure another
        round; ``seen`` holds the last ``decision``, ``rounds`` and ``incumbent`` label. ``consult``
        is None (a fixed count of repeats) without a rule, without an incumbent source, or for an
        objective the rounds do not give.
    """
    seen: dict[str, Any] = {}
    if rule is None or incumbent is None or readings_of(metric, [1.0], baseline_tok_s=baseline_tok_s) is None:
        return None, seen
    read_incumbent = incumbent

    def consult(tok_s: list[float], spent: GpuTime | None = None) -> bool:
        readings = readings_of(metric, tok_s, baseline_tok_s=baseline_tok_s) or []
        evidence = read_incumbent()
        decision = decide(readings, incumbent=evidence, rule=rule, maximize=maximize)
        seen.update(decision=decision.value, rounds=len(readings),
                    incumbent=evidence.label if evidence is not None else None)
        if on_round is not None:
            on_round(Round(number=len(readings), readings=readings, tok_s=list(tok_s), decision=decision,
                           spent=spent))
        return decision is Decision.CONTINUE

    return consult, seen
