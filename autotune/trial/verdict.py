"""The verdict on a measured trial: does speculation pay against its baseline, are the SLOs met.

:func:`judge` attaches the baseline comparison (speedup, break-even accept length, the baseline's
decode step) and the verdict to a result; a speculative config is feasible only above
``min_speedup`` and within every SLO. :func:`pays` is the one break-even rule and
:func:`break_even_margin` its form as an Optuna constraint; :func:`slo_margin` is the one SLO
check. The verdict, the search's Optuna constraints and bench_search's oracles all read these.
Kept apart from the measurement so the search, the
landscapes and the tests judge results without starting anything.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from autotune.profile.phases import break_even, speedup
from autotune.trial.level_results import LoadLevel, level_record, level_result
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult


def judge(result: TrialResult, baseline: TrialResult | None, *,
          slos: Sequence[tuple[str, str, float]] = (), min_speedup: float = 1.0) -> TrialResult:
    """Attach the baseline comparison and the verdict to a measured result.

    A speculative config is feasible only if it beats its baseline by ``min_speedup`` and meets
    every SLO. A baseline is feasible if it meets the SLOs. Failed stays failed. A result measured
    at several concurrency levels (``result.levels``) is judged at each level too, against the
    baseline's record of the same level; its own verdict is its primary level's.
    """
    judged = _judge_one(result, baseline, slos=slos, min_speedup=min_speedup)
    if result.levels:
        judged.levels = [_judge_level(result, baseline, LoadLevel.of_record(lv), slos, min_speedup)
                         for lv in result.levels]
    return judged


def _judge_level(result: TrialResult, baseline: TrialResult | None, level: LoadLevel,
                 slos: Sequence[tuple[str, str, float]], min_speedup: float) -> dict:
    """One level's record, judged against the same level of the baseline."""
    one = level_result(result, level)
    if one is None:  # the levels judged are the result's own
        raise ValueError(f"the result has no measurement at {level.describe()}")
    base = None if baseline is None else level_result(baseline, level)
    if baseline is not None and base is None:
        # A baseline without this level (measured for another workload) proves nothing here.
        base = replace(baseline, status=Status.FAILED, output_tok_s=None, levels=None,
                       reason=f"the baseline has no measurement at {level.describe()}")
    return level_record(level, _judge_one(one, base, slos=slos, min_speedup=min_speedup))


def _judge_one(result: TrialResult, baseline: TrialResult | None, *,
               slos: Sequence[tuple[str, str, float]], min_speedup: float) -> TrialResult:
    result = replace(result, slo_violations=[], load_comparison=None,
                     baseline_status=baseline.status if baseline is not None else None)
    if not result.ok:
        result.feasible = False
        return result
    violations = []
    for metric, op, limit in slos:
        value = result.metric(metric)
        if value is None:
            violations.append(f"{metric} unknown (SLO {metric} {op} {limit})")
        elif slo_margin(value, op, limit) > 0:
            violations.append(f"{metric} = {value:.4g} violates {metric} {op} {limit}")
    result.slo_violations = violations
    if result.is_baseline:
        result.baseline_tok_s = result.output_tok_s
        result.baseline_status = None
        result.speedup = 1.0 if result.output_tok_s else None
        result.baseline_decode_step_ms = (result.phases or {}).get("cycle_ms")
        result.feasible = not violations
        result.status = Status.FEASIBLE if result.feasible else Status.INFEASIBLE
        result.reason = "; ".join(violations) or None
        return result
    if baseline is None or not baseline.ok or baseline.output_tok_s is None:
        result.feasible = False
        result.status = Status.INFEASIBLE
        why = baseline.reason if baseline is not None else "not measured"
        result.reason = f"baseline unknown ({why}): cannot prove speculation pays"
        return result
    mine, theirs, window_note = compared_rates(result, baseline)
    result.baseline_tok_s = theirs
    result.baseline_decode_step_ms = (baseline.phases or {}).get("cycle_ms")
    result.speedup = speedup(mine, theirs)
    result.load_comparison = "; ".join(n for n in (load_comparison(result, baseline), window_note) if n) or None
    cycle = (result.phases or {}).get("cycle_ms")
    result.break_even_accept_length = break_even(cycle, result.baseline_decode_step_ms)
    if result.phases is not None:
        # The keys added here are VERDICT_PHASE_KEYS.
        result.phases = {**result.phases, "break_even_accept_length": result.break_even_accept_length,
                         "baseline_decode_step_ms": result.baseline_decode_step_ms,
                         "speedup": result.speedup}
    reasons = list(violations)
    if not pays(result.speedup, min_speedup=min_speedup):
        sp = "unknown" if result.speedup is None else f"{result.speedup:.3f}x"
        reasons.insert(0, f"does not beat the baseline (speedup {sp}, needs > {min_speedup:g}x)")
    result.feasible = not reasons
    result.status = Status.FEASIBLE if result.feasible else Status.INFEASIBLE
    result.reason = "; ".join(reasons) or None
    return result


def compared_rates(result: TrialResult, baseline: TrialResult) -> tuple[float | None, float | None, str | None]:
    """The two tok/s a speedup divides, and a note when they are not the objectives.

    Each side's ``output_tok_s`` is over the window :func:`autotune.trial.window.objective_rates`
    chose for it. Where one side speaks through its steady interval and the other could not
    (its steady interval too short, say), a ratio of the two would credit one side with leaving out
    its ramp and tail: both are then compared over their whole windows, and the note says so.
    """
    if result.window == baseline.window or result.window is None or baseline.window is None:
        return result.output_tok_s, baseline.output_tok_s, None
    return (result.output_tok_s_whole, baseline.output_tok_s_whole,
            f"compared over whole windows: this config's tok/s is over its {result.window} window"
            f"{f' ({result.window_reason})' if result.window_reason else ''}, its baseline's over its "
            f"{baseline.window}{f' ({baseline.window_reason})' if baseline.window_reason else ''}")


def load_comparison(result: TrialResult, baseline: TrialResult) -> str | None:
    """What load the speedup compares, when the config or its baseline was capped; else None.

    Both figures are tok/s at the load each server sustained (``load_ran`` of ``load_asked``), not
    at the asked concurrency: a speculative config whose server capped 64 at 48 is compared as it
    ran, 48, against a baseline that may have run all 64. The verdict says so rather than hide it.
    """
    if not (result.load_capped or baseline.load_capped):
        return None

    def ran(r: TrialResult) -> str:
        shown = "?" if r.load_ran is None else str(r.load_ran)
        return f"{shown} of {'?' if r.load_asked is None else r.load_asked}"

    return (f"compared at the load each sustained: this config ran {ran(result)}"
            f"{' (capped)' if result.load_capped else ''}, its baseline {ran(baseline)}"
            f"{' (capped)' if baseline.load_capped else ''}")


#: The phase keys :func:`judge` adds to a speculative result's phases (what was measured is the rest).
VERDICT_PHASE_KEYS = ("break_even_accept_length", "baseline_decode_step_ms", "speedup")

#: What a tie at ``min_speedup`` costs in :func:`break_even_margin`: a tie does not pay, so its
#: margin must be above 0.
_TIE = 1e-9


def pays(speedup: float | None, *, min_speedup: float) -> bool:
    """The one break-even rule: whether a speculative config with this speedup over its baseline
    is worth running.

    Strictly more than ``min_speedup``: a tie is not a win. An unknown speedup never pays.
    """
    return speedup is not None and speedup > min_speedup


def break_even_margin(speedup: float | None, *, min_speedup: float) -> float:
    """:func:`pays` as an Optuna constraint value: ``<= 0`` exactly when it pays.

    ``min_speedup - speedup + 1e-9`` where that agrees with :func:`pays` (a tie is ``1e-9``, not
    0), 0.0 for a speedup within 1e-9 above ``min_speedup`` (it pays), 1.0 when unknown.
    """
    if speedup is None:
        return 1.0
    margin = min_speedup - speedup + _TIE
    return min(margin, 0.0) if pays(speedup, min_speedup=min_speedup) else margin


def break_even_constraint(result: TrialResult, *, min_speedup: float) -> float:
    """The ``break_even`` constraint of a judged result (``<= 0`` feasible).

    A baseline that ran meets it (0.0) and one that failed does not (1.0); a speculative config
    is :func:`break_even_margin` of its speedup.
    """
    if result.is_baseline:
        return 0.0 if result.ok else 1.0
    return break_even_margin(result.speedup, min_speedup=min_speedup)


def slo_margin(value: float | None, op: str, limit: float) -> float:
    """The one SLO check: how far ``value`` is from meeting ``value op limit``, relative to the
    limit; ``<= 0`` met, ``> 0`` violated (the verdict and Optuna's constraint both read it).

    An unknown value violates (1.0). A strict bound is violated at equality.
    """
    if value is None:
        return 1.0
    if op not in ("<=", "<", ">=", ">"):
        raise ValueError(f"unknown SLO operator {op!r}")
    gap = (value - limit) if op in ("<=", "<") else (limit - value)
    margin = gap / max(abs(limit), 1e-9)
    return max(margin, 1e-12) if (op in ("<", ">") and gap >= 0) else margin

