"""The Ray Tune trainable: one trial of a search, on the GPUs Ray gave it.

It turns the suggested parameters into a ``TrialConfig``, makes sure the group's baseline exists
(measured here, on the same GPUs, if no other trial measured it yet), measures the config, judges
it, and reports one result: the verdict, the constraint values for Optuna, the attrs samplers read,
and the full ``TrialResult`` (and the baseline's, when measured here) for MLflow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from autotune.search.report import TrialReport
from autotune.trial.winner import known
from autotune.trial.baselines import FileBaselineStore, group_key
from autotune.trial.measure import MeasureSettings, baseline_for, measure, slos_of
from autotune.trial.outcome import Failure, Status
from autotune.trial.result import TrialResult
from autotune.trial.verdict import judge, slo_margin

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one search shares (picklable, absolute paths only)."""

    space_path: str
    baseline_dir: str
    workdir: str
    settings: MeasureSettings


_SPACES: dict[str, Any] = {}


def _space(path: str) -> Any:
    from autotune.space.search_space import load_space

    if path not in _SPACES:
        _SPACES[path] = load_space(path)
    return _SPACES[path]


def _workload(space: SearchSpace) -> Any:
    from autotune.space.workload import Workload

    return Workload.from_spec(space.workload, file=space.file)


def constraint_values(result: TrialResult, space: SearchSpace) -> dict[str, float]:
    """Optuna constraint values (``<= 0`` feasible) for a judged result."""
    failed = 0.0 if result.ok else 1.0
    if result.is_baseline:
        break_even = 0.0 if result.ok else 1.0
    elif result.speedup is None:
        break_even = 1.0
    else:
        # Strictly better than min_speedup: a tie is not a win.
        break_even = space.constraints.min_speedup - result.speedup + 1e-9
    out = {"failed": failed, "break_even": break_even}
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
        "phases": {k: phases.get(k) for k in ("draft_ms", "verify_ms", "extend_ms", "decode_ms",
                                               "other_ms", "cycle_ms")},
        "spec_correct_drafts_histogram": hist,
    }


def report_of(result: TrialResult, space: SearchSpace, *, baseline: TrialResult | None,
              baseline_key: str | None) -> TrialReport:
    """What a judged trial tells the search; its objective is the space's, None when unknown."""
    objective = known(result.metric(space.objective.metric)) if result.ok else None
    return TrialReport(objective=objective, constraints=constraint_values(result, space),
                       attrs=sampler_attrs(result), result=result, baseline=baseline,
                       baseline_key=baseline_key)


def run_config(params: Mapping[str, Any], ctx: TrialContext, *, name: str = "trial",
               settings: MeasureSettings | None = None,
               fresh_baseline: bool = False) -> tuple[TrialResult, TrialResult | None, str]:
    """Measure one config and judge it; returns (result, baseline measured here or None, key).

    With ``fresh_baseline`` (finalist confirmation) the baseline is measured again beside the
    config, on the same GPUs, instead of reused, so the comparison is like for like in time too.
    """
    space = _space(ctx.space_path)
    settings = settings or ctx.settings
    params = space.coerce_params(dict(params))
    reason = space.validate_config(params)
    if reason:
        failed = TrialResult(status=Status.FAILED, reason=f"invalid config: {reason}", params=dict(params),
                             is_baseline=not space.is_speculative(params), feasible=False,
                             failure=Failure.BAD_CONFIG.value)
        return failed, None, "invalid"
    config = space.trial_config(params)
    workload = _workload(space)
    store = FileBaselineStore(ctx.baseline_dir)
    slos = slos_of(space)
    if config.is_baseline:
        key = group_key(config)
        result = judge(measure(config, workload, settings, name=f"{name}-baseline"), None, slos=slos)
        if result.ok and store.get(key) is None:
            store.put(key, result)
        return result, None, key
    base_cfg = space.trial_config(space.baseline_params(params))
    key = group_key(base_cfg)
    measured_here: TrialResult | None
    if fresh_baseline:
        measured_here = baseline = judge(
            measure(base_cfg, workload, settings, name=f"{name}-baseline"), None, slos=slos)
    else:
        baseline, fresh = baseline_for(base_cfg, workload, settings, store, slos=slos,
                                       name=f"{name}-baseline")
        measured_here = baseline if fresh else None
    result = measure(config, workload, settings, name=name)
    result = judge(result, baseline, slos=slos, min_speedup=space.constraints.min_speedup)
    return result, measured_here, key


def trainable(config: dict[str, Any], ctx: TrialContext) -> None:
    """Ray Tune function trainable: measure, judge, report once."""
    from ray import tune

    trial_name = "trial"
    try:
        trial_name = tune.get_context().get_trial_name() or trial_name
    except Exception:  # outside Tune (tests call it directly)
        pass
    settings = ctx.settings
    if settings.workdir is None:
        settings = MeasureSettings(**{**settings.__dict__, "workdir": os.path.join(ctx.workdir, "logs")})
    result, baseline, key = run_config(config, ctx, name=trial_name, settings=settings)
    space = _space(ctx.space_path)
    tune.report(report_of(result, space, baseline=baseline, baseline_key=key).to_metrics())


class TrialResources:
    """Picklable per-trial resource request: one bundle of ``tp_size`` GPUs on one node."""

    def __init__(self, *, fixed_tp: int, cpus: float, exclusive_resource: str | None = None) -> None:
        self.fixed_tp = fixed_tp
        self.cpus = cpus
        self.exclusive_resource = exclusive_resource

    def __call__(self, config: Mapping[str, Any]) -> dict[str, float]:
        tp = int(config.get("tp_size") or self.fixed_tp)
        res = {"CPU": float(self.cpus), "GPU": float(tp)}
        if self.exclusive_resource:
            res[self.exclusive_resource] = 1.0
        return res
