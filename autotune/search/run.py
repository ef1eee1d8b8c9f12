"""The search driver: Ray Tune + constrained Optuna over speculative and TP/NCCL settings.

The search space file is the source of truth. Ray Tune schedules one trial per suggestion, each
asking for one bundle of ``tp_size`` GPUs on one node; Optuna (the space's ``search.sampler``; left out,
the phase-model sampler where it applies, else TPE) proposes the configs and learns from constraint
values (break-even, SLOs, failures).
Baselines (speculation off) are measured once per non-speculative group and reused. The top configs
are re-measured beside a fresh baseline before a winner is declared; when no speculative config
beats its baseline, the baseline wins, and the summary says so. The command line (``autotune
search``, ``python -m autotune.search``) is :mod:`autotune.cli.search`.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from autotune.backend import get_backend
from autotune.bench.shape_match import production_match
from autotune.command_line import check_writable
from autotune.errors import ConfigError
from autotune.names import check_path_name
from autotune.search import folders
from autotune.search.cluster import EXCLUSIVE_RESOURCE, check_cluster_fits, check_ray_address, start_ray
from autotune.search.conclude import finish
from autotune.search.incumbent import INCUMBENT_FILE, IncumbentFile
from autotune.search.options import SearchOptions, SearchOutcome
from autotune.search.progress import Heartbeat, clock
from autotune.search.ray_console import RAY_LOG, ray_lines_to
from autotune.search.stopping import at_end
from autotune.search.trial_report import TrialReport
from autotune.server.group import descendants_watched
from autotune.sglang.flags import FLAG_TABLE_ENV
from autotune.space.warm_start import sglang_default
from autotune.space.workload import Workload

if TYPE_CHECKING:
    import optuna
    from ray.tune import Tuner

    from autotune.search.callbacks import SearchCallback, SearchLedger
    from autotune.search.progress import ProgressTable
    from autotune.search.trainable import TrialContext
    from autotune.space.search_space import SearchSpace
    from autotune.space.warm_start import WarmStart
    from autotune.tracking.durable import DurableTracker
    from autotune.tracking.interface import SearchTracker
    from autotune.tracking.tracker import Tracker

WATCHDOG_LOG = "watchdog.log"  # the search watchdog's notes, beside the run folders


def _make_sampler(space: SearchSpace, seed: int) -> optuna.samplers.BaseSampler:
    # The registry ships with the package: an ImportError here is a bug to see, never a reason to
    # search with another sampler than the space names.
    from autotune.search.samplers import make_sampler

    return make_sampler(space.search.sampler, seed=seed, space=space)


def _finished_before(tuner: Tuner) -> list[tuple[dict, TrialReport]]:
    """The trials a restored experiment had finished, in order, for the live table."""
    try:
        grid = tuner.get_results()
    except Exception:  # noqa: BLE001 - the table then numbers from 1; the search is unaffected
        return []
    results = (grid[i] for i in range(len(grid)))  # ResultGrid iterates by index only
    done = [(dict(r.config or {}), TrialReport.from_metrics(r.metrics or {})) for r in results]
    return [(cfg, rep) for cfg, rep in done if rep is not None]


def run_search(opts: SearchOptions, *, out: TextIO | None = None) -> SearchOutcome:
    """Run (or resume) a search end to end. Raises ConfigError for bad input before anything
    starts."""
    out = sys.stdout if out is None else out  # the stream of the moment, not of import time
    from autotune.space.packaged import resolve_space
    from autotune.space.search_space import load_space

    # Absolute: the Ray workers load it again from their own working directories.
    space_path = str(resolve_space(opts.space).resolve())
    space = load_space(space_path)
    if not get_backend(space.backend).emulated:
        space.check_paths()
    name = (check_path_name(opts.name, field="--name") if opts.name
            else check_path_name(space.name, field="name", file=space_path))
    root = Path(opts.root).resolve()
    # "is None", not "or": --trials 0 is an error, not "use the space's budget".
    trials = space.budget.trials if opts.trials is None else opts.trials
    if trials < 1:
        raise ConfigError(f"--trials must be >= 1, got {trials}")
    if opts.concurrency is not None and opts.concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {opts.concurrency}")
    concurrency = opts.concurrency or space.search.max_concurrent
    seed = space.search.seed if opts.seed is None else opts.seed
    address = opts.address or os.environ.get("RAY_ADDRESS")
    # Before the first line and before any store or folder: a bad address is one line and nothing made.
    check_ray_address(address, source="--address" if opts.address else "RAY_ADDRESS")
    # The first line, before MLflow, Ray and the trials (each silent for seconds): what starts.
    print(f"Search {name!r}: {space.backend} backend"
          + (f", profile {space.profile}" if space.profile else "")
          + f", {trials} trials, sampler {space.search.sampler} ({space.search.sampler_why}), seed {seed}; "
          + (f"joining Ray at {address}" if address else "starting an embedded Ray") + "...",
          file=out, flush=True)
    _say_production_match(space, out=out)
    check_writable(root / "mlruns", what="the search's state and its MLflow store")
    folders.hold(root / "mlruns" / "ray" / name, name)
    try:
        return _tracked_search(space, space_path, opts, name=name, root=root, trials=trials,
                               concurrency=concurrency, seed=seed, out=out)
    finally:
        folders.release(root / "mlruns" / "ray" / name)


def _say_production_match(space: SearchSpace, *, out: TextIO) -> None:
    """One line on the workload against its production sample: a warning on stderr when far, a
    note on the console when matched; nothing without a sample."""
    if space.workload.get("production_sample") is None:
        return  # no sample: the workload's prompts need not be read here
    match = production_match(Workload.from_spec(space.workload, file=space.file), space.production_sample)
    if match is None:
        return
    if match.far:
        print(f"warning: {match.line()}", file=sys.stderr, flush=True)
    else:
        print(f"Workload: {match.line()}", file=out, flush=True)


def _tracked_search(space: SearchSpace, space_path: str, opts: SearchOptions, *, name: str, root: Path,
                    trials: int, concurrency: int | None, seed: int, out: TextIO) -> SearchOutcome:
    """The search once its input is checked and its name held: tracking, Ray, then the run."""
    storage, run_name, restoring = folders.experiment_dir(root, name, resume=opts.resume)

    tracker = None
    if opts.tracking:
        from autotune.tracking.store import StoreUnreachable
        from autotune.tracking.tracker import Tracker

        tracker = Tracker(name, tracking_uri=opts.tracking_uri, root=str(root))
        try:
            tracker.connect()
        except StoreUnreachable:
            # A server that does not answer is no reason to stop: the search spools its MLflow
            # writes, its run included, and says so in one line (DurableTracker.open_search).
            pass

    # A SIGKILLed driver runs no finally: a sidecar then kills what the search started (Ray's
    # agents and workers would take a minute to notice); released once Ray is shut down.
    with descendants_watched(storage / WATCHDOG_LOG):
        return _on_ray(space, space_path, opts, name=name, storage=storage, run_name=run_name,
                       restoring=restoring, trials=trials, concurrency=concurrency, seed=seed,
                       tracker=tracker, out=out)


def _on_ray(space: SearchSpace, space_path: str, opts: SearchOptions, *, name: str, storage: Path,
            run_name: str, restoring: bool, trials: int, concurrency: int | None, seed: int,
            tracker: Tracker | None, out: TextIO) -> SearchOutcome:
    """Ray started (or joined), the search run on it, and an embedded Ray shut down on every path."""
    table_before = os.environ.get(FLAG_TABLE_ENV)
    began = time.monotonic()
    with Heartbeat(out, "starting Ray"):
        ray_where = start_ray(space, opts, concurrency, flag_table_dir=storage)
    print(f"Ray {ray_where} ready after {clock(time.monotonic() - began)}.", file=out, flush=True)
    # Ray's own lines (Tune's restore hint and checkpoint warnings on a stop) go to the run
    # folder's ray.log: the console keeps the table and the one resume command. After ray.init,
    # which sets up the "ray" logger's console handler again.
    with ray_lines_to(storage / run_name / RAY_LOG):
        try:
            check_cluster_fits(space, ray_where)
            return _run(space, space_path, opts, name=name, storage=storage, run_name=run_name,
                        restoring=restoring, trials=trials, concurrency=concurrency, seed=seed,
                        tracker=tracker, ray_where=ray_where, out=out)
        finally:
            import ray

            if ray_where == "embedded":
                ray.shutdown()
            if table_before is None:  # the search's own flag table ends with its Ray
                os.environ.pop(FLAG_TABLE_ENV, None)


@dataclass(frozen=True)
class _Plan:
    """What one search run is: its name, where its state goes, and how many trials at once."""

    name: str
    storage: Path
    run_name: str
    restoring: bool
    trials: int
    concurrency: int | None
    seed: int
    ray_where: str

    @property
    def exp_dir(self) -> Path:
        return self.storage / self.run_name


def _run(space: SearchSpace, space_path: str, opts: SearchOptions, *, name: str, storage: Path,
         run_name: str, restoring: bool, trials: int, concurrency: int | None, seed: int,
         tracker: Tracker | None, ray_where: str, out: TextIO) -> SearchOutcome:
    """The search's steps in turn: tracking, prescreen, the tuner, its fit, the results, the end."""
    plan = _Plan(name=name, storage=storage, run_name=run_name, restoring=restoring, trials=trials,
                 concurrency=concurrency, seed=seed, ray_where=ray_where)
    durable = _open_tracking(tracker, space, space_path, plan, out=out)
    try:
        return _search(space, space_path, opts, plan, durable=durable, out=out)
    except KeyboardInterrupt:
        # Stopped where Tune's fit does not take the signal (the prescreen, the tuner's imports, a
        # second Ctrl-C): the search run ends KILLED, as a stop during the trials does (conclude.finish).
        if durable is not None:
            durable.finish_search(status="KILLED")
        print(f"\nInterrupted: state saved under {plan.exp_dir}. Resume with:\n  "
              f"{folders.search_command(opts.space, name, resume=True)}"
              if folders.resumable(plan.exp_dir) else
              "\nInterrupted before the trials began; nothing to resume. Start again with:\n  "
              f"{folders.search_command(opts.space, name)}",
              file=out, flush=True)
        raise


def _search(space: SearchSpace, space_path: str, opts: SearchOptions, plan: _Plan, *,
            durable: DurableTracker | None, out: TextIO) -> SearchOutcome:
    """The search from its first console line to its outcome, its tracking open."""
    from autotune.search.callbacks import LIVE_CALLBACKS, SearchCallback, SearchLedger, entries_of
    from autotune.search.progress import ProgressTable
    from autotune.search.searcher import mirror_and_say, saved_searcher, study_name, study_storage
    from autotune.search.trainable import TrialContext
    from autotune.trial.measure_settings import settings_for

    trials, restoring, run_name = plan.trials, plan.restoring, plan.run_name
    name = plan.name
    space, space_path = _prescreen(space, space_path, plan, tracker=durable, out=out)
    ctx = TrialContext(space_path=space_path, baseline_dir=str(plan.exp_dir / "baselines"),
                       workdir=str(plan.exp_dir), settings=settings_for(space),
                       incumbent_path=str(plan.exp_dir / INCUMBENT_FILE))
    warm = sglang_default(space)
    print(f"Warm start: {warm.describe()}" if not restoring else
          f"Resuming; SGLang's default config: {warm.describe()}", file=out, flush=True)
    # search.storage: the searcher's study stays in memory, where Ray's checkpoints keep it
    # consistent with Tune's trials across resumes, and is mirrored to the storage once fit returns.
    study_store, study_where = study_storage(space.search.storage, root=Path(opts.root))
    study = study_name(name, run_name)
    table = ProgressTable(out, maximize=space.objective.direction == "maximize",
                          objective=space.objective.metric, total=trials)
    ledger = SearchLedger(space=space, incumbent=IncumbentFile(ctx.incumbent_path) if ctx.incumbent_path else None)
    key = str(plan.exp_dir)
    callback = SearchCallback(table=table, tracker=durable, ledger=ledger, key=key)
    LIVE_CALLBACKS[key] = callback
    try:
        tuner = _tuner(space, ctx, plan, callback=callback, ledger=ledger, warm=warm, table=table)
        # A trial's server start-up can run for minutes with nothing to print: say it is alive.
        with Heartbeat(out, "running trials", quiet_since=lambda: table.last_line):
            grid = tuner.fit()
    finally:
        LIVE_CALLBACKS.pop(key, None)
    # After a resume the live searcher is inside Ray's restored Tuner: the one Ray saved, read once.
    searcher, unread = ledger.searcher, None
    if searcher is None:
        try:
            searcher = saved_searcher(plan.exp_dir)
        except Exception as exc:  # noqa: BLE001 - no study to mirror (said there), no stop decision known
            unread = exc
    if study_store is not None:
        mirror_and_say(searcher.study if searcher is not None else unread or ValueError("no searcher"),
                       study_store, study, study_where, out=out)
    entries, unfinished = entries_of(grid, ledger, space)
    callback.record_unseen(entries)
    stop = None if searcher is None else at_end(searcher.stop_decision or searcher.decide(),
                                                trials=len(entries), budget=trials)
    # A wall-time budget or the stop rule may end a search early on purpose; otherwise fewer
    # ended trials than planned means the run was stopped.
    interrupted = unfinished > 0 or (len(entries) < trials and space.budget.wall_time_s is None
                                     and not (stop is not None and stop.stop))
    if stop is not None and not interrupted:
        print(f"Stop rule: {stop.reason}", file=out, flush=True)
    outcome = finish(space, ctx, entries, overheads=ledger.overheads, overhead_gpus=ledger.overhead_gpus,
                     study=ledger.study, name=name,
                     exp_dir=plan.exp_dir, space_arg=opts.space, interrupted=interrupted,
                     tracker=durable, warm=warm, out=out,
                     stop=stop if not interrupted else None)
    if study_where is not None:
        outcome.optuna_study = {"storage": study_where, "name": study}
    if durable is not None:
        from autotune.tracking.durable import sync_command

        outcome.unsynced = durable.unsynced()
        outcome.spool_path = str(durable.spool.path)
        outcome.sync_command = sync_command(name, str(Path(opts.root).resolve()), opts.tracking_uri)
    return outcome


def _open_tracking(tracker: Tracker | None, space: SearchSpace, space_path: str, plan: _Plan, *,
                   out: TextIO) -> DurableTracker | None:
    """The search's ``DurableTracker`` with the search run opened, or None without tracking."""
    if tracker is None:
        return None
    from autotune.tracking.durable import DurableTracker  # noqa: F811 (the TYPE_CHECKING name, at run time)

    # Every MLflow write, the search run's start included, is spooled under the run's folder
    # first and never raises: an exception from a Ray callback would make Ray stop the trial
    # and run it again, and a tracking server down from the start must not stop the search.
    durable = DurableTracker(tracker, plan.exp_dir / "tracking", say=lambda line: print(line, file=out, flush=True))
    durable.open_search(start={"backend": space.backend, "profile": space.profile, "budget": plan.trials,
                               "seed": plan.seed, "sampler": space.search.sampler,
                               "ray_address": plan.ray_where, "resume": plan.restoring,
                               "objective": [space.objective.metric, space.objective.direction]},
                        space_file=space_path,
                        workload={"spec": space.workload, "file": space.file, "name": space.name})
    return durable


def _prescreen(space: SearchSpace, space_path: str, plan: _Plan, *, tracker: SearchTracker | None,
               out: TextIO) -> tuple[SearchSpace, str]:
    """nccl_prescreen: the trials load a copy of the space narrowed to the best NCCL candidates."""
    from autotune.search.prescreen import run_prescreen
    from autotune.space.search_space import load_space

    screened = run_prescreen(space, exp_dir=plan.exp_dir, tracker=tracker, restoring=plan.restoring, out=out)
    if screened is not None and screened.narrowed_path != space_path:
        return load_space(screened.narrowed_path), screened.narrowed_path
    return space, space_path


def _tuner(space: SearchSpace, ctx: TrialContext, plan: _Plan, *, callback: SearchCallback,
           ledger: SearchLedger, warm: WarmStart, table: ProgressTable) -> Tuner:
    """Ray Tune's tuner of this run: a fresh one (the searcher's study kept in ``ledger``), or
    the one restored from the run folder."""
    import optuna
    from ray import tune

    from autotune.search.scheduler import scheduler_for
    from autotune.search.searcher import ConstrainedOptunaSearch, DefineByRun
    from autotune.search.trainable import TrialResources, trainable

    resources = TrialResources(fixed_tp=int(space.fixed_args.get("tp_size") or 1),
                               cpus=space.resources.cpus_per_trial,
                               exclusive_resource=EXCLUSIVE_RESOURCE if space.exclusive_node else None)
    # Ray takes a function of the config returning a resource dict too; its annotation names only
    # PlacementGroupFactory.
    fn = tune.with_resources(tune.with_parameters(trainable, ctx=ctx), resources)  # type: ignore[arg-type]
    maximize = space.objective.direction == "maximize"
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    # A trial that errors inside Ray gets one console line from our callback, its traceback goes
    # to the run folder's trial-errors.log (search.callbacks), not Ray's 60 lines on the console.
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    # Our own table replaces Ray's progress boxes; Ray's logs stay in its session dir.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

    run_config = tune.RunConfig(
        name=plan.run_name, storage_path=str(plan.storage), verbose=0, callbacks=[callback],
        failure_config=tune.FailureConfig(max_failures=2))
    if plan.restoring:
        tuner = tune.Tuner.restore(str(plan.exp_dir), trainable=fn, resume_unfinished=True,
                                   resume_errored=True)
        table.carry_on(_finished_before(tuner))
        return tuner
    # Optuna's INFO line "A new study created in memory" would land in the live table.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # SGLang's own default speculative config goes first: the one a tuned config has to beat.
    # budget.trials stays the cap (num_samples); the stop rule may end the search before it.
    searcher = ConstrainedOptunaSearch(space=DefineByRun(space), metric="objective",
                                       mode="max" if maximize else "min",
                                       sampler=_make_sampler(space, plan.seed),
                                       points_to_evaluate=[warm.asked] if warm.asked else None,
                                       sampler_name=space.search.sampler, budget=plan.trials,
                                       stop_rule=space.search.stop_rule)
    # reuse_actors: a trial process serves the next trial with the same resources, instead of
    # a fresh process per trial re-importing Ray, autotune and SGLang's parser (~3 s a trial). Not
    # with a scheduler: a trial it stops is left blocked in its round's report, server up, while
    # Ray keeps the process for reuse; a process of its own ends at once, its server with it.
    scheduler = scheduler_for(space)
    tune_config = tune.TuneConfig(search_alg=searcher, scheduler=scheduler, num_samples=plan.trials,
                                  max_concurrent_trials=plan.concurrency,
                                  time_budget_s=space.budget.wall_time_s, reuse_actors=scheduler is None)
    ledger.study, ledger.searcher = searcher.study, searcher
    return tune.Tuner(fn, tune_config=tune_config, run_config=run_config)


if __name__ == "__main__":
    # An interrupted search's resume hint names this module (python -m autotune.search.run).
    import functools

    from autotune import command_line as cli
    from autotune.cli.search import main

    sys.exit(cli.run_main(functools.partial(main, prog="python -m autotune.search.run")))
