"""The end of a search: finalists re-measured beside fresh baselines, the winner, the summary files.

Three steps, which :func:`finish` (the driver's last step) calls in turn, printing and tracking
beside them: :func:`choose_finalists` (the best feasible configs, and each load level's best),
:func:`confirm_finalists` (each re-measured beside a fresh baseline through the search's
evaluator, as Ray tasks), and :func:`conclude`, which is pure: the trials, the confirmed finalists
and the stored baselines in, the :class:`~autotune.search.options.SearchOutcome` out, the winner
picked by the one winner policy (:func:`autotune.trial.winner.pick_winner`) and every baseline
competing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TextIO

from autotune.backend import get_backend
from autotune.bench.shape_match import TAG_PRODUCTION_SAMPLE, production_match
from autotune.bench.workload_shape import INPUT_TOKEN_KEYS, TAG_WORKLOAD_SHAPE, shape_line, workload_shape
from autotune.export.launch_command import TAG_FLAG_TABLE, TAG_WINNER_MARGIN
from autotune.search.cluster import EXCLUSIVE_RESOURCE
from autotune.search.console import config_label, num
from autotune.search.cost_surface import COST_SURFACE_JSON, surface_of
from autotune.search.evidence import WinnerEvidence, finalist_evidence, settles, standing_evidence, trial_evidence
from autotune.search.folders import mark_concluded, search_command
from autotune.search.gpu_bill import search_totals, unrecorded
from autotune.search.incumbent import contender
from autotune.search.level_answers import Measured, level_answers, level_finalists, levels_of
from autotune.search.options import SearchOutcome
from autotune.search.progress import Heartbeat
from autotune.search.stopping import TAG_STOP_RULE, StopDecision
from autotune.search.summary_files import PER_LEVEL_JSON, SUMMARY_MD, TRIALS_CSV, rows_of, summary_md, trials_csv
from autotune.search.trial_report import TrialEntry
from autotune.sglang.flags import FLAG_TABLE_ENV
from autotune.space.load_levels import primary_level
from autotune.space.warm_start import compare_to_default
from autotune.space.workload import Workload
from autotune.trial.baselines import FileBaselineStore
from autotune.trial.gpu_time import GpuTotals
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.winner import FINALIST, TRIAL, Contender, pick_winner

if TYPE_CHECKING:
    import optuna

    from autotune.search.trainable import TrialContext
    from autotune.space.search_space import SearchSpace
    from autotune.space.warm_start import WarmStart
from autotune.tracking.interface import SearchTracker


@dataclass(frozen=True)
class Finalist:
    """A finalist, confirmed.

    Attributes:
        entry: The trial it was chosen from.
        result: Its re-measurement, judged against ``baseline``.
        baseline: Its group's fresh baseline, None when none was measured (an invalid config).
    """

    entry: TrialEntry
    result: TrialResult
    baseline: TrialResult | None


def choose_finalists(space: SearchSpace, entries: Sequence[TrialEntry], *, interrupted: bool) -> list[TrialEntry]:
    """The trials to confirm: the ``max(1, search.finalists)`` best feasible speculative ones, and,
    with load levels (not after an interruption), each other level's best."""
    maximize = space.objective.direction == "maximize"

    def key(item: TrialEntry) -> float:
        v = item.report.objective
        if v is None:  # spec_ok holds measured reports only
            raise ValueError(f"trial {item.trial_id} has no objective")
        return v if maximize else -v

    spec_ok = [e for e in entries if e.report.feasible and not e.report.is_baseline
               and e.report.objective is not None]
    spec_ok.sort(key=key, reverse=True)
    chosen = spec_ok[: max(1, space.search.finalists)]
    levels = levels_of(e.report.result for e in entries)
    primary = primary_level(space.workload) if levels else None
    if levels and primary is not None and not interrupted:  # primary is set when levels are
        # Each level's answer is a confirmed config too: its best joins the finalists, also
        # when nothing was feasible at the primary level.
        chosen += level_finalists([(e, e.report.result) for e in entries], levels,
                                  primary, metric=space.objective.metric,
                                  maximize=maximize, chosen=chosen)
    return chosen


def one_at_a_time(space: SearchSpace) -> bool:
    """Whether finalists are confirmed one after another: emulators share this machine's cores,
    so concurrent finalists would slow each other down; with exclusive_node the user asked for
    one benchmark per node."""
    return bool(get_backend(space.backend).shares_cores or space.exclusive_node)


def confirm_finalists(chosen: Sequence[TrialEntry], ctx: TrialContext, space: SearchSpace, *,
                      repeats: int) -> list[Finalist]:
    """Re-measure each finalist beside a fresh baseline, as Ray tasks on their own GPUs, through
    the search's evaluator (:func:`autotune.search.trainable.evaluator_for`)."""
    import ray

    from autotune.search.trainable import TrialResources, evaluator_for
    from autotune.trial.measure_settings import MeasureSettings

    settings = MeasureSettings(**{**ctx.settings.__dict__, "repeats": repeats,
                                  "workdir": os.path.join(ctx.workdir, "finalists")})
    # The same request as a trial's, the node-exclusive resource included: finalists run at
    # once, and with exclusive_node two of them must not share a node either.
    resources = TrialResources(fixed_tp=int(space.fixed_args.get("tp_size") or 1),
                               cpus=space.resources.cpus_per_trial,
                               exclusive_resource=EXCLUSIVE_RESOURCE if space.exclusive_node else None)

    def confirm(params: dict) -> tuple[TrialResult, TrialResult | None]:
        evaluation = evaluator_for(ctx, settings=settings)(params, name="finalist", fresh_baseline=True)
        return evaluation.result, evaluation.baseline

    serial = one_at_a_time(space)
    refs, done = [], []
    for entry in chosen:
        res = resources(entry.params)
        custom = {k: v for k, v in res.items() if k not in ("CPU", "GPU")}
        # Ray's annotation says dict; None (its default) means no custom resources.
        task = ray.remote(num_cpus=res["CPU"], num_gpus=res["GPU"], resources=custom or None,  # type: ignore[arg-type]
                          max_retries=1)(confirm)
        refs.append(task.remote(entry.params))
        if serial:
            done.extend(ray.get(refs))
            refs = []
    confirmed = done + ray.get(refs)
    return [Finalist(entry=entry, result=result, baseline=base)
            for entry, (result, base) in zip(chosen, confirmed, strict=True)]


def stored_baselines(baseline_dir: str) -> list[TrialResult]:
    """The baselines the search's store holds (those that ran)."""
    found = []
    store = FileBaselineStore(baseline_dir)
    for path in sorted(store.dir.glob("*.json")):
        try:
            b = TrialResult.from_dict(json.loads(path.read_text()))
        except ValueError:
            continue
        if b.ok:
            found.append(b)
    return found


def conclude(space: SearchSpace, entries: Sequence[TrialEntry], finalists: Sequence[Finalist],
             stored: Sequence[TrialResult], *, name: str, interrupted: bool, exp_dir: Path,
             overheads: Sequence[float], warm: WarmStart | None = None,
             stop: StopDecision | None = None, tracking_uri: str | None = None,
             parent_run_id: str | None = None, experiment_id: str | None = None,
             overhead_gpus: Sequence[int] = (), evidence: WinnerEvidence | None = None) -> SearchOutcome:
    """What the search found: the winner, the counts, the finalists' rows, the summary files.

    Pure: it measures, prints and logs nothing.

    Args:
        space: The search's space.
        entries: Every trial that ended (reported or errored).
        finalists: The confirmed finalists (none when interrupted).
        stored: The baselines of the search's store (:func:`stored_baselines`).
        name: The search's name.
        interrupted: The search stopped before its trials were done (no winner is named).
        exp_dir: The search's run folder.
        overheads: The tuner's overhead of each trial, in seconds.
        warm: SGLang's default config (:func:`autotune.space.warm_start.sglang_default`).
        stop: The stop rule's decision, None when unknown.
        tracking_uri: MLflow's URI, None without tracking (and the two ids below).
        parent_run_id: The search's MLflow run.
        experiment_id: Its experiment.
        overhead_gpus: The GPUs each trial held during its overhead (1 where not given).
        evidence: The best speculative config's margin (:mod:`autotune.search.evidence`); kept
            in the outcome when that config is the winner.
    """
    statuses = [e.report.status for e in entries]
    maximize = space.objective.direction == "maximize"
    levels = levels_of(e.report.result for e in entries)
    finalists_out: list[dict[str, Any]] = []
    finalist_cands: list[Contender] = []
    fresh_baseline: dict[int, TrialResult] = {}  # id of a finalist's result -> its fresh baseline
    winner: TrialResult | None = None
    baseline: TrialResult | None = None
    baseline_wins = False
    why: str | None = None
    for f in finalists:
        finalists_out.append({"trial_id": f.entry.trial_id, "params": f.entry.params,
                              "search_tok_s": f.entry.report.output_tok_s,
                              "confirmed_tok_s": f.result.output_tok_s,
                              "confirmed_speedup": f.result.speedup,
                              "status": f.result.status, "reason": f.result.reason})
        finalist_cands.append(contender(f.result, space, stage=FINALIST))
        if f.baseline is not None:
            finalist_cands.append(contender(f.baseline, space))
            fresh_baseline[id(f.result)] = f.baseline
    if not interrupted:
        trial_cands = [contender(e.report.result, space) for e in entries if e.report.result is not None]
        base_cands = [contender(b, space) for b in _baselines(entries, stored)]
        pick = pick_winner(trial_cands + finalist_cands + base_cands, maximize=maximize)
        if pick is not None:
            winner, baseline_wins, why = pick.ref, pick.is_baseline, pick.note
            # A speculative winner is a confirmed finalist (finalists always run before this).
            baseline = winner if baseline_wins else fresh_baseline.get(id(winner))
    default = compare_to_default(warm, [{**e.report.record(), "params": e.params} for e in entries],
                                 winner.to_dict() if winner else None, space=space)
    outcome = SearchOutcome(
        name=name, winner=winner.to_dict() if winner else None,
        baseline=baseline.to_dict() if baseline else None, trials=len(entries),
        feasible=statuses.count(Status.FEASIBLE), infeasible=statuses.count(Status.INFEASIBLE),
        failed=statuses.count(Status.FAILED), interrupted=interrupted, baseline_wins=baseline_wins,
        finalists=finalists_out, tracking_uri=tracking_uri, parent_run_id=parent_run_id,
        experiment_path=str(exp_dir), experiment_id=experiment_id,
        overheads_s=list(overheads), sglang_default=default,
        margin=(evidence.to_dict() if evidence is not None and winner is not None and not baseline_wins
                and evidence.winner == dict(winner.params) else None),
        stop_rule=stop.record() if stop is not None else None, stopped=statuses.count(Status.STOPPED),
        winner_why=why)
    totals = search_totals(entries, [(f.result, f.baseline) for f in finalists], overheads, overhead_gpus)
    outcome.gpu_time = {**totals.to_dict(), "unrecorded_trials": unrecorded(entries)}
    rows = rows_of(entries, [(f.entry.trial_id, f.result, f.baseline) for f in finalists])
    workload = Workload.from_spec(space.workload, file=space.file)
    outcome.workload_shape = {**workload_shape(workload), **{k: getattr(winner, k, None) for k in INPUT_TOKEN_KEYS}}
    match = production_match(workload, space.production_sample)  # parsed when the space loaded
    outcome.production_match = match.to_dict() if match is not None else None
    if levels and not interrupted:
        outcome.per_level = level_answers(
            [Measured(row.trial_id, row.result, FINALIST if row.kind == "finalist" else TRIAL)
             for row in rows if row.result is not None],
            levels, metric=space.objective.metric, maximize=maximize)
    outcome.report_files = {TRIALS_CSV: trials_csv(rows), SUMMARY_MD: summary_md(outcome, rows)}
    if outcome.per_level:
        outcome.report_files[PER_LEVEL_JSON] = json.dumps(outcome.per_level, indent=2, default=str) + "\n"
    try:
        surface = surface_of(space, [row.result for row in rows if row.kind != "finalist"], name=name)
    except ValueError:  # nothing speculative with phases was measured: no surface to keep
        surface = None
    if surface is not None:
        outcome.report_files[COST_SURFACE_JSON] = json.dumps(surface, indent=2, default=str) + "\n"
    return outcome


def finish(space: SearchSpace, ctx: TrialContext, entries: list[TrialEntry], *, overheads: Sequence[float],
           study: optuna.Study | None, name: str, exp_dir: Path, space_arg: str, interrupted: bool,
           tracker: SearchTracker | None, warm: WarmStart | None, out: TextIO,
           overhead_gpus: Sequence[int] = (), stop: StopDecision | None = None) -> SearchOutcome:
    """The search's last step, around :func:`conclude`: the finalists chosen, confirmed, printed
    and tracked; the conclusion; the search's MLflow run closed with its summary files.

    Args:
        space: The space the trials loaded.
        ctx: The trials' ``TrialContext``.
        entries: Every trial that ended.
        overheads: The tuner's overhead of each trial, in seconds.
        study: The searcher's Optuna study (None after a resume).
        name: The search's name.
        exp_dir: Its run folder.
        space_arg: The ``--space`` given (for the resume hint).
        interrupted: The search stopped before its trials were done.
        tracker: The search's tracker (a ``DurableTracker`` in a search), None without tracking.
        warm: SGLang's default config.
        out: The console.
        overhead_gpus: The GPUs each trial held during its overhead.
        stop: The stop rule's decision (:mod:`autotune.search.stopping`), None when unknown
            (interrupted, resumed): logged on the search run and put in the summary.
    """
    chosen = choose_finalists(space, entries, interrupted=interrupted)
    finalists: list[Finalist] = []
    evidence = None if interrupted else trial_evidence(space, entries, FileBaselineStore(ctx.baseline_dir).get)
    # The trials' own readings can settle the winner: then no fresh server and no fresh baseline.
    # Only where trials measured in rounds (their rule's confidence is the search's), and not with
    # load levels, whose per-level answers are the finalists' own.
    settled = settles(evidence, rounds=space.measure.sequential is not None,
                      levels=bool(levels_of(e.report.result for e in entries)))
    if interrupted:
        print(f"\nInterrupted: state saved under {exp_dir}. Resume with:\n  "
              f"{search_command(space_arg, name, resume=True)}", file=out, flush=True)
    elif chosen and settled and evidence is not None:
        print(f"\nFinalists not re-measured: the trials' evidence is decisive: {evidence.line()}",
              file=out, flush=True)
    elif chosen:
        repeats = space.search.finalist_repeats
        print(f"\nConfirming {len(chosen)} finalist(s), {repeats} repeats each, beside fresh "
              f"baselines{', one at a time' if one_at_a_time(space) else ''}...", file=out, flush=True)
        with Heartbeat(out, f"re-measuring {len(chosen)} finalist(s)"):
            finalists = confirm_finalists(chosen, ctx, space, repeats=repeats)
        for f in finalists:
            report_finalist(f, tracker=tracker, out=out)
        again = finalist_evidence(space, [(f.entry.params, f.result, f.baseline) for f in finalists])
        evidence = standing_evidence(evidence, again, remeasured=[f.entry.params for f in finalists])
    outcome = conclude(space, entries, finalists, stored_baselines(ctx.baseline_dir), name=name,
                       interrupted=interrupted, exp_dir=exp_dir, overheads=overheads,
                       warm=warm, stop=stop, tracking_uri=getattr(tracker, "tracking_uri", None),
                       parent_run_id=getattr(tracker, "parent_run_id", None),
                       experiment_id=getattr(tracker, "experiment_id", None), overhead_gpus=overhead_gpus,
                       evidence=evidence)
    if tracker is not None and outcome.margin is not None:
        metrics, tags = margin_facts(outcome.margin)
        tracker.log_to_search(metrics=metrics, tags=tags)
    if tracker is not None:
        from autotune.export.launch_command import winner_files

        if table := os.environ.get(FLAG_TABLE_ENV):  # the flags the trials were checked against
            tracker.log_to_search(tags={TAG_FLAG_TABLE: str(Path(table).resolve())})

        # The console's counts ("N trials (F feasible, ...)"): the trials the search ran, baselines
        # and finalists apart (the search run's baselines and finalists counters, tracking.summary).
        tracker.log_to_search(metrics={"trials": outcome.trials, "feasible_trials": outcome.feasible,
                                       "infeasible_trials": outcome.infeasible, "failed_trials": outcome.failed,
                                       "stopped_trials": outcome.stopped})
        if outcome.gpu_time is not None:
            tracker.log_to_search(metrics=GpuTotals.from_dict(outcome.gpu_time).metrics())
        if stop is not None:
            tracker.log_to_search(params={"stop_rule": stop.setting},
                                  metrics={"stop_rule_trials": float(stop.trials),
                                           "stop_rule_upper_gap": stop.upper_gap},
                                  tags={TAG_STOP_RULE: stop.reason})
        if outcome.workload_shape is not None:
            tracker.log_to_search(tags={TAG_WORKLOAD_SHAPE: shape_line(outcome.workload_shape)[:5000]},
                                  metrics={f"workload_{k}": v for k, v in outcome.workload_shape.items()
                                           if isinstance(v, (int, float)) and not isinstance(v, bool)})
        if (match := outcome.production_match) is not None:
            tracker.log_to_search(tags={TAG_PRODUCTION_SAMPLE: str(match["line"])[:5000]},
                                  metrics=dict(match["metrics"]))

        tracker.finish_search(study=study, sglang_default=outcome.sglang_default,
                              winner_files=winner_files, report_files=outcome.report_files,
                              status="KILLED" if interrupted else "FINISHED")
    if not interrupted:
        mark_concluded(exp_dir)
    return outcome


def margin_facts(margin: dict[str, Any]) -> tuple[dict[str, float | None], dict[str, str]]:
    """The search run's metrics and tags of the winner's margin (:meth:`WinnerEvidence.to_dict`'s):
    the ratio over the runner-up with its interval, the line the summary prints, whether the two are
    separated, and the runner-up by its searched parameters (none without one)."""
    over = margin.get("over_runner_up") or {}
    tags = {TAG_WINNER_MARGIN: str(margin["line"]),
            "autotune.winner_separated": str(bool(over.get("separated"))).lower()}
    if margin.get("runner_up"):
        tags["autotune.runner_up"] = config_label(margin["runner_up"])
    return ({"winner_margin": over.get("ratio"), "winner_margin_low": over.get("low"),
             "winner_margin_high": over.get("high")}, tags)


def report_finalist(f: Finalist, *, tracker: SearchTracker | None, out: TextIO) -> None:
    """One finalist in MLflow (and its fresh baseline) and on the console."""
    tid, result, base = f.entry.trial_id, f.result, f.baseline
    if tracker is not None:
        tracker.log_trial(f"finalist-{tid}", result, kind="finalist", confirmed=bool(result.feasible))
        if base is not None:
            tracker.log_trial(f"finalist-{tid}-baseline", base, kind="baseline")
    searched = f"  finalist {tid}: search {num(f.entry.report.output_tok_s, '.1f')} tok/s -> "
    if result.status == Status.FAILED:
        print(f"{searched}failed when re-measured: {result.reason or 'no reason given'}", file=out, flush=True)
        return
    print(f"{searched}confirmed {num(result.output_tok_s, '.1f')} tok/s, speedup "
          f"{num(result.speedup, '.3f')}x, {result.status}" + (f": {result.reason}" if result.reason else ""),
          file=out, flush=True)


def _baselines(entries: Sequence[TrialEntry], stored: Sequence[TrialResult]) -> list[TrialResult]:
    """Every measured baseline of the search (trials with speculation off, and the store)."""
    found = []
    for e in entries:
        r = e.report
        if r.is_baseline and r.status == Status.FEASIBLE and r.result is not None:
            found.append(r.result)
        elif r.baseline is not None and r.baseline.ok:
            found.append(r.baseline)
    return found + list(stored)
