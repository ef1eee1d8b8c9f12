"""The Ray Tune trainable: one trial of a search, on the GPUs Ray gave it.

It hands the suggested parameters to the search's evaluator (:func:`evaluator_for`, a
:class:`~autotune.trial.evaluator.MeasuringEvaluator`: the group's baseline measured here, on the
same GPUs, if no other trial measured it yet, then the config, judged), and reports one result:
the verdict, the constraint values for Optuna, the attrs samplers read, and the full
``TrialResult`` (and the baseline's, when measured here) for MLflow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from autotune.figures import finite
from autotune.search.incumbent import IncumbentFile
from autotune.search.stopping import REPEATS_ATTR
from autotune.search.trial_report import TrialReport, round_metrics
from autotune.trial.evaluator import MeasuringEvaluator
from autotune.trial.measure_settings import MeasureSettings, slos_of
from autotune.trial.result import TrialResult, stopped_result
from autotune.trial.sequential import Round
from autotune.trial.verdict import break_even_constraint, slo_margin

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one search shares (picklable, absolute paths only).

    ``incumbent_path``: the search's incumbent file (:mod:`autotune.search.incumbent`), which a
    trial measuring in rounds reads after each; None: trials measure a fixed ``repeats``.
    """

    space_path: str
    baseline_dir: str
    workdir: str
    settings: MeasureSettings
    incumbent_path: str | None = None


_SPACES: dict[str, SearchSpace] = {}


def _space(path: str) -> SearchSpace:
    from autotune.space.search_space import load_space

    if path not in _SPACES:
        # The driver compared the production sample already; a trial never reads it.
        _SPACES[path] = load_space(path, production_sample=False)
    return _SPACES[path]


def constraint_values(result: TrialResult, space: SearchSpace) -> dict[str, float]:
    """Optuna constraint values (``<= 0`` feasible) for a judged result."""
    failed = 0.0 if result.ok else 1.0
    out = {"failed": failed,
           "break_even": break_even_constraint(result, min_speedup=space.constraints.min_speedup)}
    for i, (metric, op, limit) in enumerate(slos_of(space)):
        out[f"slo_{i}"] = slo_margin(result.metric(metric), op, limit)
    return out


def sampler_attrs(result: TrialResult) -> dict[str, Any]:
    """What model-based samplers read from a trial (see docs/samplers.md)."""
    phases = result.phases or {}
    hist: list[int] | None = None
    for rec in result.records:
        h = (rec.get("spec") or {}).get("spec_correct_drafts_histogram")
        if isinstance(h, list):
            if hist is None:
                hist = list(h)
            elif len(hist) == len(h):
                hist = [a + b for a, b in zip(hist, h, strict=True)]
    return {
        "status": result.status,
        "is_baseline": result.is_baseline,
        "output_tok_s": result.output_tok_s,
        "accept_length": result.accept_length,
        "baseline_tok_s": result.baseline_tok_s,
        "baseline_status": result.baseline_status,
        "failure": result.failure,
        "baseline_decode_step_ms": result.baseline_decode_step_ms,
        "speedup": result.speedup,
        # The repeats' spread is the search's measured noise (autotune.search.stopping.study_noise).
        REPEATS_ATTR: list(result.output_tok_s_repeats),
        "phases": {k: phases.get(k) for k in ("draft_ms", "verify_ms", "extend_ms", "decode_ms",
                                               "other_ms", "cycle_ms")},
        "spec_correct_drafts_histogram": hist,
    }


def report_of(result: TrialResult, space: SearchSpace, *, baseline: TrialResult | None,
              baseline_key: str | None) -> TrialReport:
    """What a judged trial tells the search; its objective is the space's, None when unknown."""
    objective = finite(result.metric(space.objective.metric)) if result.ok else None
    return TrialReport(objective=objective, constraints=constraint_values(result, space),
                       attrs=sampler_attrs(result), result=result, baseline=baseline,
                       baseline_key=baseline_key)


def evaluator_for(ctx: TrialContext, *, settings: MeasureSettings | None = None,
                  on_round: Callable[[Round], None] | None = None) -> MeasuringEvaluator:
    """The search's :class:`~autotune.trial.evaluator.Evaluator`: servers measured on the trial's
    GPUs, baselines shared through the search's store (``settings`` overrides the context's).

    With ``on_round``, a trial measures in rounds against the incumbent of ``ctx.incumbent_path``
    (when the settings have a sequential rule); without it (finalists, tools), a fixed ``repeats``.
    """
    store = IncumbentFile(ctx.incumbent_path) if ctx.incumbent_path is not None and on_round is not None else None
    return MeasuringEvaluator(space=_space(ctx.space_path), baseline_dir=ctx.baseline_dir,
                              settings=settings or ctx.settings, incumbent=store.read if store else None,
                              on_round=on_round, level_incumbent=store.read_level if store else None)


def trainable(config: dict[str, Any], ctx: TrialContext) -> None:
    """Ray Tune function trainable: measure (reporting each round as an intermediate result when
    measuring in rounds), judge, and report the trial's result last (the one the search reads)."""
    from ray import tune

    trial_name = "trial"
    try:
        trial_name = tune.get_context().get_trial_name() or trial_name
    except Exception:  # outside Tune (tests call it directly)
        pass
    settings = ctx.settings
    if settings.workdir is None:
        settings = MeasureSettings(**{**settings.__dict__, "workdir": os.path.join(ctx.workdir, "logs")})
    space = _space(ctx.space_path)
    try:
        is_baseline = not space.is_speculative(space.coerce_params(dict(config)))
    except Exception:  # noqa: BLE001 - a config the space rejects measures no round anyway
        is_baseline = False
    rule = settings.sequential
    # Who may stop a trial between its rounds: the space's scheduler, and Ray's time budget.
    by = " or ".join(who for who, on in (("the scheduler", space.search.scheduler is not None),
                                         ("the wall-time budget", space.budget.wall_time_s is not None)) if on)

    def on_round(step: Round) -> None:
        # Each round carries the result the trial would have if a scheduler stopped it here: the
        # trial thread gets no word of the stop (Ray ends it inside this report), so the driver
        # must be able to record it from this report alone.
        stopped = stopped_result(config, is_baseline=is_baseline, rounds=step.number,
                                 cap=rule.max_rounds if rule is not None else None, tok_s=step.tok_s,
                                 gpu_time=step.spent, sequential={"readings": step.readings},
                                 by=by or "Ray Tune")
        tune.report(round_metrics(number=step.number, readings=step.readings, decision=step.decision.value,
                                  stopped=stopped))

    evaluation = evaluator_for(ctx, settings=settings, on_round=on_round)(config, name=trial_name)
    tune.report(report_of(evaluation.result, space, baseline=evaluation.baseline,
                          baseline_key=evaluation.baseline_key).to_metrics())


def trial_gpus(config: Mapping[str, Any], *, fixed_tp: int) -> int:
    """The GPUs one trial asks Ray for (and holds while the tuner works around it): its
    ``tp_size``, else the space's fixed one."""
    return int(config.get("tp_size") or fixed_tp)


class TrialResources:
    """Picklable per-trial resource request: one bundle of ``tp_size`` GPUs on one node."""

    def __init__(self, *, fixed_tp: int, cpus: float, exclusive_resource: str | None = None) -> None:
        self.fixed_tp = fixed_tp
        self.cpus = cpus
        self.exclusive_resource = exclusive_resource

    def __call__(self, config: Mapping[str, Any]) -> dict[str, float]:
        tp = trial_gpus(config, fixed_tp=self.fixed_tp)
        res = {"CPU": float(self.cpus), "GPU": float(tp)}
        if self.exclusive_resource:
            res[self.exclusive_resource] = 1.0
        return res
