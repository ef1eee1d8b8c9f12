"""The end of a search: finalists re-measured beside fresh baselines, the winner, the MLflow summary.

:func:`conclude` turns the trials Ray Tune ran into a :class:`~autotune.search.options.SearchOutcome`:
the best feasible configs are confirmed as Ray tasks, every measured baseline competes, the one
winner policy (:func:`autotune.trial.winner.pick_winner`) picks, and the tracker's parent run gets
the summary and the winner's exported files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TextIO

from autotune.sglang.backend import get_backend
from autotune.search.cluster import EXCLUSIVE_RESOURCE
from autotune.search.console import num
from autotune.search.levels import Measured, level_answers, level_finalists, levels_of
from autotune.search.options import SearchOptions, SearchOutcome
from autotune.search.report import TrialReport
from autotune.search.summary_files import (PER_LEVEL_JSON, SUMMARY_MD, TRIALS_CSV, rows_of, summary_md,
                                           trials_csv)
from autotune.space.warm_start import compare_to_default
from autotune.space.load_levels import primary_level
from autotune.trial.winner import FINALIST, TRIAL, Candidate, known, pick_winner
from autotune.trial.outcome import Status
from autotune.tracking.interface import SearchTracker


def _confirm_finalists(candidates: list[tuple[str, dict, TrialReport]], ctx: Any, space: Any,
                       repeats: int, out: TextIO) -> list[tuple[dict, Any, Any]]:
    """Re-measure each finalist beside a fresh baseline, as Ray tasks on their own GPUs."""
    import ray

    from autotune.search.trainable import TrialResources, run_config
    from autotune.trial.measure import MeasureSettings

    settings = MeasureSettings(**{**ctx.settings.__dict__, "repeats": repeats,
                                  "workdir": os.path.join(ctx.workdir, "finalists")})
    # The same request as a trial's, the node-exclusive resource included: finalists run at
    # once, and with exclusive_node two of them must not share a node either.
    resources = TrialResources(fixed_tp=int(space.fixed_args.get("tp_size") or 1),
                               cpus=space.resources.cpus_per_trial,
                               exclusive_resource=EXCLUSIVE_RESOURCE if space.exclusive_node else None)

    def confirm(params: dict) -> tuple[dict, Any, Any]:
        result, baseline, _ = run_config(params, ctx, name="finalist", settings=settings,
                                         fresh_baseline=True)
        return params, result, baseline

    # Emulators share this machine's cores, so concurrent finalists would slow each other down;
    # with exclusive_node the user asked for one benchmark per node. Then confirm one at a time.
    one_at_a_time = get_backend(space.backend).shares_cores or space.exclusive_node
    print(f"\nConfirming {len(candidates)} finalist(s), {repeats} repeats each, beside fresh "
          f"baselines{', one at a time' if one_at_a_time else ''}...", file=out, flush=True)
    refs, done = [], []
    for _, params, _ in candidates:
        res = resources(params)
        custom = {k: v for k, v in res.items() if k not in ("CPU", "GPU")}
        task = ray.remote(num_cpus=res["CPU"], num_gpus=res["GPU"], resources=custom or None,
                          max_retries=1)(confirm)
        refs.append(task.remote(params))
        if one_at_a_time:
            done.extend(ray.get(refs))
            refs = []
    return done + ray.get(refs)


def conclude(space: Any, ctx: Any, results: list[tuple[str, dict, TrialReport]], state: dict,
              *, name: str, trials: int, interrupted: bool, tracker: SearchTracker | None, exp_dir: Path,
              opts: SearchOptions, out: TextIO, warm: Any = None) -> SearchOutcome:
    from autotune.trial.result import TrialResult

    statuses = [r.status for _, _, r in results]
    maximize = space.objective.direction == "maximize"

    def key(item: tuple[str, dict, TrialReport]) -> float:
        v = item[2].objective
        return v if maximize else -v

    levels = levels_of(r.result for _, _, r in results)
    primary = primary_level(space.workload) if levels else None
    spec_ok = [r for r in results if r[2].feasible and not r[2].is_baseline and r[2].objective is not None]
    spec_ok.sort(key=key, reverse=True)
    finalists_out: list[dict[str, Any]] = []
    finalist_cands: list[Candidate] = []
    fresh_baseline: dict[int, TrialResult] = {}  # id of a finalist's result -> its fresh baseline
    confirmed_rows: list[tuple[str, TrialResult, TrialResult | None]] = []
    winner: TrialResult | None = None
    baseline: TrialResult | None = None
    baseline_wins = False
    chosen = spec_ok[: max(1, space.search.finalists)]
    if levels and not interrupted:
        # Each level's answer is a confirmed config too: its best joins the finalists, also
        # when nothing was feasible at the primary level.
        chosen += level_finalists([(item, item[2].result) for item in results], levels,
                                  primary, metric=space.objective.metric, maximize=maximize,
                                  chosen=chosen)
    if interrupted:
        print(f"\nInterrupted: state saved under {exp_dir}. Resume with:\n  python -m "
              f"autotune.search.run --space {opts.space} --name {name} --resume", file=out, flush=True)
    elif chosen:
        confirmed = _confirm_finalists(chosen, ctx, space, space.search.finalist_repeats, out)
        for (tid, _, first), (params, result, base) in zip(chosen, confirmed):
            confirmed_rows.append((tid, result, base))
            finalists_out.append({"trial_id": tid, "params": params,
                                  "search_tok_s": first.output_tok_s,
                                  "confirmed_tok_s": result.output_tok_s,
                                  "confirmed_speedup": result.speedup,
                                  "status": result.status, "reason": result.reason})
            if tracker is not None:
                tracker.log_trial(f"finalist-{tid}", result, kind="finalist",
                                  confirmed=bool(result.feasible))
                if base is not None:
                    tracker.log_trial(f"finalist-{tid}-baseline", base, kind="baseline")
            print(f"  finalist {tid}: search {num(first.output_tok_s, '.1f')} tok/s -> "
                  f"confirmed {num(result.output_tok_s, '.1f')} tok/s, speedup "
                  f"{num(result.speedup, '.3f')}x, {result.status}", file=out, flush=True)
            finalist_cands.append(_candidate(result, space, stage=FINALIST))
            if base is not None:
                finalist_cands.append(_candidate(base, space))
                fresh_baseline[id(result)] = base
    if not interrupted:
        trial_cands = [_candidate(r.result, space) for _, _, r in results if r.result is not None]
        base_cands = [_candidate(b, space) for b in _baselines(results, ctx)]
        pick = pick_winner(trial_cands + finalist_cands + base_cands, maximize=maximize)
        if pick is not None:
            winner, baseline_wins = pick.ref, pick.is_baseline
            # A speculative winner is a confirmed finalist (finalists always run before this).
            baseline = winner if baseline_wins else fresh_baseline.get(id(winner))
    default = compare_to_default(warm, [{**r.record(), "params": cfg} for _, cfg, r in results],
                                 winner.to_dict() if winner else None, space=space)
    outcome = SearchOutcome(
        name=name, winner=winner.to_dict() if winner else None,
        baseline=baseline.to_dict() if baseline else None, trials=len(results),
        feasible=statuses.count(Status.FEASIBLE), infeasible=statuses.count(Status.INFEASIBLE),
        failed=statuses.count(Status.FAILED), interrupted=interrupted, baseline_wins=baseline_wins,
        finalists=finalists_out, tracking_uri=getattr(tracker, "tracking_uri", None),
        parent_run_id=getattr(tracker, "parent_run_id", None), experiment_path=str(exp_dir),
        experiment_id=getattr(tracker, "experiment_id", None),
        overheads_s=list(state["overheads"]), sglang_default=default)
    rows = rows_of(results, confirmed_rows)
    if levels and not interrupted:
        outcome.per_level = level_answers(
            [Measured(row.trial_id, row.result, FINALIST if row.kind == "finalist" else TRIAL)
             for row in rows if row.result is not None],
            levels, metric=space.objective.metric, maximize=maximize)
    outcome.report_files = {TRIALS_CSV: trials_csv(rows), SUMMARY_MD: summary_md(outcome, rows)}
    if outcome.per_level:
        outcome.report_files[PER_LEVEL_JSON] = json.dumps(outcome.per_level, indent=2, default=str) + "\n"
    if tracker is not None:
        from autotune.export.command import winner_files

        tracker.finish_search(study=state.get("study"), sglang_default=default, winner_files=winner_files,
                              report_files=outcome.report_files,
                              status="KILLED" if interrupted else "FINISHED")
    return outcome


def _candidate(result: Any, space: Any, *, stage: str = TRIAL) -> Candidate:
    """A trial result as the winner policy sees it, valued by the space's objective."""
    return Candidate(ref=result, value=known(result.metric(space.objective.metric)),
                     is_baseline=bool(result.is_baseline),
                     feasible=result.status == Status.FEASIBLE, stage=stage)


def _baselines(results: list[tuple[str, dict, TrialReport]], ctx: Any) -> list[Any]:
    """Every measured baseline of the search (trials with speculation off, and the store)."""
    from autotune.trial.baselines import FileBaselineStore
    from autotune.trial.result import TrialResult

    found = []
    for _, _, r in results:
        if r.is_baseline and r.status == Status.FEASIBLE and r.result is not None:
            found.append(r.result)
        elif r.baseline is not None and r.baseline.ok:
            found.append(r.baseline)
    store = FileBaselineStore(ctx.baseline_dir)
    for path in sorted(store.dir.glob("*.json")):
        try:
            b = TrialResult.from_dict(json.loads(path.read_text()))
        except ValueError:
            continue
        if b.ok:
            found.append(b)
    return found
