"""The evaluator seam: params in, a judged trial out, whoever (or whatever) ran it.

In the manner of Syne Tune's ``TrialBackend``, the search never knows whether its trials ran on
SGLang, on the emulator's server, on the emulator's model alone or on a recorded landscape: it
calls an :class:`Evaluator` and reads the :class:`Evaluation`, which holds the result as
:func:`autotune.trial.verdict.judge` left it. :class:`MeasuringEvaluator` starts servers (SGLang
or the emulator's); bench_search's evaluators (the model-only truth and the recorded landscapes)
live with bench_search, outside the package: ``benchmarks.search.drawn`` in the checkout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from autotune.trial.baselines import FileBaselineStore, group_key
from autotune.trial.level_results import LoadLevel, level_result
from autotune.trial.measure import baseline_for, measure
from autotune.trial.measure_settings import MeasureSettings, slos_of
from autotune.trial.outcome import Failure, Status
from autotune.trial.result import TrialResult
from autotune.trial.sequential import Consult, Evidence, Round, round_consultant
from autotune.trial.verdict import judge

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

__all__ = ["Evaluation", "Evaluator", "INVALID_GROUP", "MeasuringEvaluator"]

#: The baseline key of a config the space rejects (it has no group to be judged in).
INVALID_GROUP = "invalid"


@dataclass(frozen=True)
class Evaluation:
    """One judged trial.

    Attributes:
        result: The config's result after :func:`~autotune.trial.verdict.judge` (a baseline
            config's is its own; a speculative config's is judged against its group's baseline).
        baseline: The group's baseline when this evaluation ran it (judged), else None (reused,
            or the config is itself a baseline).
        baseline_key: The key of the config's baseline group (:data:`INVALID_GROUP` for a config
            the space rejects).
    """

    result: TrialResult
    baseline: TrialResult | None
    baseline_key: str


class Evaluator(Protocol):
    """Runs one config and judges it; never raises for a config fault (a failed result says it)."""

    def __call__(self, params: Mapping[str, Any], *, name: str = "trial",
                 fresh_baseline: bool = False) -> Evaluation:
        """Evaluate one config.

        Args:
            params: The config, as the space's suggestion or ``--params`` give it.
            name: What to call the run (logs, server names).
            fresh_baseline: Run the group's baseline again beside the config (finalist
                confirmation) instead of reusing the one already run.

        Returns:
            The judged result, and the baseline when this call ran it.
        """
        ...


class MeasuringEvaluator:
    """Measures on a server (SGLang, or the emulator's): the group's baseline once, then the config.

    Args:
        space: The loaded ``SearchSpace``.
        baseline_dir: The per-group baseline store of the search (shared by its trials).
        settings: How to measure.
        incumbent: With ``settings.sequential``: the search's incumbent evidence, read after each
            round (:mod:`autotune.trial.sequential`); None measures a fixed ``repeats``.
        on_round: Told each :class:`~autotune.trial.sequential.Round` of the primary level (the
            trainable reports it to Ray Tune).
        level_incumbent: With load levels: the incumbent at a level other than the primary, read
            after each of that level's rounds; None measures those levels a fixed ``repeats``.
    """

    def __init__(self, *, space: SearchSpace, baseline_dir: str, settings: MeasureSettings,
                 incumbent: Callable[[], Evidence | None] | None = None,
                 on_round: Callable[[Round], None] | None = None,
                 level_incumbent: Callable[[LoadLevel], Evidence | None] | None = None) -> None:
        self.space = space
        self.store = FileBaselineStore(baseline_dir)
        self.settings = settings
        self.incumbent = incumbent
        self.on_round = on_round
        self.level_incumbent = level_incumbent

    def _measure_in_rounds(self, config: Any, workload: Any, *, name: str,
                           baseline: TrialResult | None, report: bool = True) -> TrialResult:
        """:func:`measure`, consulting :func:`~autotune.trial.sequential.decide` after each round
        when the rule, an incumbent source and the objective allow: at the primary level against
        the incumbent, at each other level against that level's (a speedup there over the
        baseline's same level); each level's record says how its rounds ended. ``report``
        False: the rounds are not the trial's own (a group's baseline measured ahead of its
        config), so ``on_round`` does not hear them."""
        rule = self.settings.sequential
        metric, maximize = self.space.objective.metric, self.space.objective.direction == "maximize"
        consult, seen = round_consultant(rule=rule, incumbent=self.incumbent, metric=metric, maximize=maximize,
                                         baseline_tok_s=baseline.output_tok_s if baseline else None,
                                         on_round=self.on_round if report else None)
        if consult is None or rule is None:
            return measure(config, workload, self.settings, name=name)
        seen_at: dict[str, dict[str, Any]] = {}
        read_level = self.level_incumbent

        def consult_at(level: LoadLevel) -> Consult | None:
            if read_level is None:
                return None
            base = level_result(baseline, level) if baseline is not None else None
            here, seen_here = round_consultant(
                rule=rule, incumbent=lambda: read_level(level), metric=metric, maximize=maximize,
                baseline_tok_s=base.output_tok_s if base is not None else None)
            seen_at[level.label] = seen_here
            return here

        result = measure(config, workload, self.settings, name=name, consult=consult, consult_at=consult_at)
        if seen:
            result.sequential = {**seen, **rule.to_dict()}
        primary = workload.primary_level()
        for record in result.levels or []:
            level = LoadLevel.of_record(record)
            level_seen = seen if level == primary else seen_at.get(level.label)
            if level_seen:
                record["sequential"] = {**level_seen, **rule.to_dict()}
        return result

    def __call__(self, params: Mapping[str, Any], *, name: str = "trial",
                 fresh_baseline: bool = False) -> Evaluation:
        """Measure one config and judge it (see :meth:`Evaluator.__call__`).

        A baseline config is measured and judged on its own (and stored when its group has no
        baseline yet). A speculative config is judged against its group's stored baseline, which
        is measured here (on the same GPUs, in rounds as a baseline trial is) when none is stored;
        with ``fresh_baseline`` it is measured again beside the config (the finalists' fixed
        count), so the comparison is like for like in time too.
        """
        from autotune.space.workload import Workload

        space, settings = self.space, self.settings
        params = space.coerce_params(dict(params))
        reason = space.validate_config(params)
        if reason:
            failed = TrialResult(status=Status.FAILED, reason=f"invalid config: {reason}", params=dict(params),
                                 is_baseline=not space.is_speculative(params), feasible=False,
                                 failure=Failure.BAD_CONFIG.value)
            return Evaluation(result=failed, baseline=None, baseline_key=INVALID_GROUP)
        config = space.trial_config(params)
        workload = Workload.from_spec(space.workload, file=space.file)
        slos = slos_of(space)
        if config.is_baseline:
            key = group_key(config)
            result = judge(self._measure_in_rounds(config, workload, name=f"{name}-baseline",
                                                   baseline=None), None, slos=slos)
            if result.ok and self.store.get(key) is None:
                self.store.put(key, result)
            return Evaluation(result=result, baseline=None, baseline_key=key)
        base_cfg = space.trial_config(space.baseline_params(params))
        key = group_key(base_cfg)
        measured_here: TrialResult | None
        if fresh_baseline:
            measured_here = baseline = judge(
                measure(base_cfg, workload, settings, name=f"{name}-baseline"), None, slos=slos)
        else:
            # Measured as the same config would be as a trial of its own (in rounds, against the
            # incumbent), so a baseline's rounds follow one rule however the search came to it.
            baseline, fresh = baseline_for(
                base_cfg, workload, settings, self.store, slos=slos, name=f"{name}-baseline",
                run=lambda cfg: self._measure_in_rounds(cfg, workload, name=f"{name}-baseline", baseline=None,
                                                       report=False))
            measured_here = baseline if fresh else None
        result = self._measure_in_rounds(config, workload, name=name, baseline=baseline)
        result = judge(result, baseline, slos=slos, min_speedup=space.constraints.min_speedup)
        return Evaluation(result=result, baseline=measured_here, baseline_key=key)
