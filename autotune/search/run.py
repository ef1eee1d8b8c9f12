"""``python -m autotune.search``: Ray Tune + constrained Optuna over speculative and TP/NCCL settings.

The search space file is the source of truth. Ray Tune schedules one trial per suggestion, each
asking for one bundle of ``tp_size`` GPUs on one node; Optuna (TPE by default, or the phase-model
sampler) proposes the configs and learns from constraint values (break-even, SLOs, failures).
Baselines (speculation off) are measured once per non-speculative group and reused. The top configs
are re-measured beside a fresh baseline before a winner is declared; when no speculative config
beats its baseline, the baseline wins, and the summary says so.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from autotune import cli
from autotune.errors import AutotuneError, ConfigError
from autotune.sglang.backend import get_backend
from autotune.space.warm_start import compare_to_default, sglang_default, versus_default
from autotune.trial.outcome import Status
from autotune.trial.winner import FINALIST, TRIAL, Candidate, known, pick_winner

EXIT_CONFIG = cli.BAD_INPUT
EXIT_INTERRUPTED = cli.INTERRUPTED
# Custom resource a node declares once; a trial of an exclusive_node space asks for all of it.
EXCLUSIVE_RESOURCE = "autotune_node"


@dataclass
class SearchOptions:
    """Everything ``python -m autotune.search`` takes."""

    space: str
    trials: int | None = None
    concurrency: int | None = None
    name: str | None = None
    address: str | None = None
    resume: bool = False
    seed: int | None = None
    summary_json: str | None = None
    tracking_uri: str | None = None
    root: str = field(default_factory=os.getcwd)
    tracking: bool = True


@dataclass
class SearchOutcome:
    """What a finished (or interrupted) search found."""

    name: str
    winner: dict[str, Any] | None
    baseline: dict[str, Any] | None
    trials: int
    feasible: int
    infeasible: int
    failed: int
    interrupted: bool
    baseline_wins: bool
    finalists: list[dict[str, Any]]
    tracking_uri: str | None
    parent_run_id: str | None
    experiment_path: str | None
    overheads_s: list[float]
    sglang_default: dict[str, Any] | None = None
    experiment_id: str | None = None

    def summary(self) -> dict[str, Any]:
        w = self.winner or {}
        return {
            "name": self.name,
            "interrupted": self.interrupted,
            "baseline_wins": self.baseline_wins,
            "winner_params": w.get("params"),
            "winner_is_baseline": w.get("is_baseline"),
            "output_tok_s": w.get("output_tok_s"),
            "output_tok_s_spread": w.get("output_tok_s_spread"),
            "baseline_tok_s": w.get("baseline_tok_s"),
            "speedup": w.get("speedup"),
            "accept_length": w.get("accept_length"),
            "acceptance": w.get("acceptance"),
            "synthetic_accept_length": w.get("synthetic_accept_length"),
            "break_even_accept_length": w.get("break_even_accept_length"),
            "phases": w.get("phases"),
            "launch_command": w.get("launch_command"),
            "trials": {"total": self.trials, "feasible": self.feasible,
                       "infeasible": self.infeasible, "failed": self.failed},
            "finalists": self.finalists,
            # SGLang's auto-picked speculative config as measured here, and the winner's gain on it.
            "sglang_default": self.sglang_default,
            "gain_over_sglang_default": (self.sglang_default or {}).get("gain"),
            "tracking_uri": self.tracking_uri,
            "parent_run_id": self.parent_run_id,
            "tuner_overhead_s_median": (sorted(self.overheads_s)[len(self.overheads_s) // 2]
                                        if self.overheads_s else None),
        }


def _sim_logical_gpus(space: Any, concurrency: int | None) -> int:
    """Logical GPUs for a sim search on a GPU-less machine: whole nodes of the profile's size,
    enough for ``concurrency`` trials of the largest TP at once."""
    from autotune.sim.profile import load_profile

    per_node = load_profile(space.profile).gpus_per_node
    tp = max(space.tp_sizes())
    want = tp * max(1, concurrency or 1)
    nodes = max(1, math.ceil(want / per_node))
    return per_node * nodes


def _probe_ray_address(address: str, *, timeout_s: float = 5.0) -> None:
    """Fail fast when nothing listens at a ``host:port`` Ray address.

    ``ray.init`` retries an unreachable GCS 20 times for about 40 s each, printing warnings, so a
    mistyped address would take some 14 minutes to fail. Forms without a port (``auto``,
    ``local``) are left to Ray.
    """
    import socket

    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot join the Ray cluster at {address!r}: nothing answers on "
                          f"{host}:{port} ({exc.strerror or type(exc).__name__}). Check the "
                          "address (ray status on the head node prints it), or leave --address "
                          "and RAY_ADDRESS unset for an embedded Ray.") from None


def init_ray(space: Any, opts: SearchOptions, concurrency: int | None) -> str:
    """Join ``--address``/``RAY_ADDRESS`` or start an embedded Ray; returns a description."""
    import ray

    address = opts.address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return "already initialised"
    if address:
        _probe_ray_address(address)
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(f"cannot join the Ray cluster at {address!r}: {exc}. Check the "
                              "address (ray status on the head node prints it), or leave "
                              "--address and RAY_ADDRESS unset for an embedded Ray.") from None
        return address
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # address="local": with no address, ray.init() joins the cluster last started on this machine
    # (/tmp/ray/ray_current_cluster) instead of starting the embedded one it was asked for.
    kwargs: dict[str, Any] = {"address": "local", "include_dashboard": False,
                              "log_to_driver": False, "configure_logging": False}
    if not get_backend(space.backend).needs_gpus:
        kwargs["num_gpus"] = _sim_logical_gpus(space, concurrency)
        kwargs["num_cpus"] = max(os.cpu_count() or 1, int(kwargs["num_gpus"]))
    if space.exclusive_node:
        kwargs["resources"] = {EXCLUSIVE_RESOURCE: 1}  # this machine is one node
    ray.init(**kwargs)
    return "embedded"


def check_cluster_fits(space: Any, where: str) -> None:
    """Fail before any trial starts if no node can ever run the largest trial.

    Ray Tune waits forever for a resource request that no node can meet, so a tp_size larger
    than every node, or ``exclusive_node`` on a cluster whose nodes do not declare the resource,
    would hang the search instead of saying why.
    """
    import ray

    tp = max(space.tp_sizes())
    cpus = space.resources.cpus_per_trial
    nodes = [n.get("Resources") or {} for n in ray.nodes() if n.get("Alive")]
    if space.exclusive_node:
        nodes = [r for r in nodes if r.get(EXCLUSIVE_RESOURCE, 0) >= 1]
        if not nodes:
            raise ConfigError(
                f"exclusive_node: true needs GPU nodes that declare the custom resource "
                f"{EXCLUSIVE_RESOURCE}: 1, and no node of the Ray cluster ({where}) does; start "
                f"them with ray start ... --resources '{{\"{EXCLUSIVE_RESOURCE}\": 1}}' or set "
                "exclusive_node: false", field="exclusive_node")
    if not any(r.get("GPU", 0) >= tp and r.get("CPU", 0) >= cpus for r in nodes):
        most = max((int(r.get("GPU", 0)) for r in nodes), default=0)
        raise ConfigError(
            f"a trial with tp_size {tp} needs {tp} GPUs and {cpus:g} CPU(s) on one node, but the "
            f"largest node of the Ray cluster ({where}) has {most} GPU(s); narrow the tp_size "
            "choices or add a larger node", field="tp_size")


def _make_sampler(space: Any, seed: int) -> Any:
    try:
        from autotune.search.samplers import make_sampler
    except ImportError:  # the registry ships with the phase-model sampler
        import optuna

        return optuna.samplers.TPESampler(seed=seed)
    return make_sampler(space.search.sampler, seed=seed, space=space)


def _experiment_dir(root: Path, name: str, resume: bool) -> tuple[Path, str, bool]:
    """``(storage, run_name, restoring)``: a fresh run dir, or the latest one with --resume."""
    storage = root / "mlruns" / "ray" / name
    storage.mkdir(parents=True, exist_ok=True)
    runs = sorted(p.name for p in storage.iterdir() if p.is_dir() and p.name.startswith("run-"))
    if resume:
        if not runs:
            raise ConfigError(f"--resume: no earlier search named {name!r} under {storage}")
        return storage, runs[-1], True
    return storage, time.strftime("run-%Y%m%d-%H%M%S"), False


# The live table, tracker and counters of each search running in this process, by experiment
# directory. Ray Tune pickles the run's callbacks into tuner.pkl, and a restored Tuner uses those
# copies; a callback pickles as its key only, so a resumed search reports through this run's
# objects (not stale copies), and any ``out`` stream works (an open file does not pickle).
_LIVE_CALLBACKS: dict[str, tuple[Any, Any, dict[str, Any]]] = {}


def _callback_from_key(key: str) -> Any:
    """Unpickle a search callback: the live one of this process, or a no-op if there is none."""
    from ray.tune import Callback

    live = _LIVE_CALLBACKS.get(key)
    return _Callbacks.make(*live, key=key) if live is not None else Callback()


class _Callbacks:
    """Builds the Ray Tune callback that prints progress and tracks trials in MLflow."""

    @staticmethod
    def make(table: Any, tracker: Any, state: dict[str, Any], *, key: str) -> Any:
        from ray.tune import Callback

        from autotune.trial.result import TrialResult

        # Tuner overhead of a trial: from the moment its slot was free (the previous trial's
        # bookkeeping done, or the start of the run) to the end of its own bookkeeping, minus what
        # it measured (duration_s of the trial and of a baseline it measured). A clock started
        # at on_trial_start would miss the suggestion and the trial process start-up, and one
        # stopped before the MLflow logging would miss the bookkeeping.
        class SearchCallback(Callback):
            def __reduce__(self):
                return _callback_from_key, (key,)

            def setup(self, **info):
                state["free"] = []
                state["t0"] = time.monotonic()

            def on_trial_start(self, iteration, trials, trial, **info):
                free = state.setdefault("free", [])
                if free:
                    began = heapq.heappop(free)
                elif not state.get("freed"):
                    began = state.get("t0", time.monotonic())  # one of the first slots
                else:
                    # A slot no earlier trial freed (resources allowed one more trial at once):
                    # it was free from now, not from the start of the run.
                    began = time.monotonic()
                state["started"][trial.trial_id] = began

            def on_trial_complete(self, iteration, trials, trial, **info):
                result = trial.last_result or {}
                started = state["started"].pop(trial.trial_id, None)
                measured = None
                if result.get("trial_result"):
                    measured = json.loads(result["trial_result"]).get("duration_s") or 0.0
                    if result.get("baseline_result"):
                        measured += json.loads(result["baseline_result"]).get("duration_s") or 0.0
                if "status" in result:
                    state["results"].append((trial.trial_id, dict(trial.config), result))
                    table.row(trial=trial.trial_id, params=trial.config, result=result)
                    if tracker is not None:
                        if result.get("baseline_result"):
                            base = TrialResult.from_dict(json.loads(result["baseline_result"]))
                            tracker.log_trial(f"baseline-{_short(result.get('baseline_key'))}",
                                              base, kind="baseline")
                        tracker.log_trial(trial.trial_id, TrialResult.from_dict(
                            json.loads(result["trial_result"])),
                            kind="baseline" if result.get("is_baseline") else "trial")
                self._free(started, measured)

            def on_trial_error(self, iteration, trials, trial, **info):
                # An error inside Ray (the trial process lost, an exception outside the measured
                # trial) is a failed trial like any other: in the table, MLflow and the counts.
                self._free(state["started"].pop(trial.trial_id, None), None)
                err = trial.get_error() if hasattr(trial, "get_error") else None
                result, report = errored_report(state.get("space"), dict(trial.config or {}), err)
                state["errored"][trial.trial_id] = (trial.trial_id, dict(trial.config or {}), report)
                table.row(trial=trial.trial_id, params=trial.config, result=report)
                if tracker is not None:
                    tracker.log_trial(trial.trial_id, result,
                                      kind="baseline" if result.is_baseline else "trial")

            def _free(self, started: float | None, measured: float | None) -> None:
                if started is None:
                    return
                now = time.monotonic()
                state["freed"] = True
                heapq.heappush(state.setdefault("free", []), now)
                if measured is not None:
                    state["overheads"].append(max(now - started - measured, 0.0))

        return SearchCallback()


def _short(key: str | None) -> str:
    import hashlib

    return hashlib.sha1((key or "").encode()).hexdigest()[:12]


def _confirm_finalists(candidates: list[tuple[str, dict, dict]], ctx: Any, space: Any,
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


def run_search(opts: SearchOptions, *, out: TextIO | None = None) -> SearchOutcome:
    """Run (or resume) a search end to end. Raises ConfigError for bad input before anything
    starts."""
    out = sys.stdout if out is None else out  # the stream of the moment, not of import time
    from autotune.space.search_space import load_space

    space_path = str(Path(opts.space).resolve())
    space = load_space(space_path)
    if not get_backend(space.backend).emulated:
        space.check_paths()
    name = opts.name or space.name
    root = Path(opts.root).resolve()
    # "is None", not "or": --trials 0 is an error, not "use the space's budget".
    trials = space.budget.trials if opts.trials is None else opts.trials
    if trials < 1:
        raise ConfigError(f"--trials must be >= 1, got {trials}")
    if opts.concurrency is not None and opts.concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {opts.concurrency}")
    concurrency = opts.concurrency or space.search.max_concurrent
    seed = space.search.seed if opts.seed is None else opts.seed
    storage, run_name, restoring = _experiment_dir(root, name, opts.resume)

    tracker = None
    if opts.tracking:
        from autotune.tracking.tracker import Tracker

        tracker = Tracker(name, tracking_uri=opts.tracking_uri, root=str(root)).connect()

    ray_where = init_ray(space, opts, concurrency)
    try:
        check_cluster_fits(space, ray_where)
        return _run(space, space_path, opts, name=name, storage=storage, run_name=run_name,
                    restoring=restoring, trials=trials, concurrency=concurrency, seed=seed,
                    tracker=tracker, ray_where=ray_where, out=out)
    finally:
        import ray

        if ray_where == "embedded":
            ray.shutdown()


def _run(space: Any, space_path: str, opts: SearchOptions, *, name: str, storage: Path,
         run_name: str, restoring: bool, trials: int, concurrency: int | None, seed: int,
         tracker: Any, ray_where: str, out: TextIO) -> SearchOutcome:
    from ray import tune

    from autotune.search.progress import ProgressTable
    from autotune.search.searcher import ConstrainedOptunaSearch, DefineByRun
    from autotune.search.trainable import TrialContext, TrialResources, trainable
    from autotune.trial.measure import settings_for

    exp_dir = storage / run_name
    if tracker is not None:
        tracker.start_search(space_path=space_path, backend=space.backend, profile=space.profile,
                             budget=trials, seed=seed, sampler=space.search.sampler,
                             ray_address=ray_where, resume=restoring,
                             objective=(space.objective.metric, space.objective.direction))
    print(f"Search {name!r}: {space.backend} backend"
          + (f", profile {space.profile}" if space.profile else "")
          + f", {trials} trials, sampler {space.search.sampler}, seed {seed}, Ray {ray_where}",
          file=out, flush=True)
    # nccl_prescreen: the trials load a copy of the space narrowed to the best NCCL candidates.
    from autotune.search.prescreen import run_prescreen
    from autotune.space.search_space import load_space

    screened = run_prescreen(space, exp_dir=exp_dir, tracker=tracker, restoring=restoring, out=out)
    if screened is not None and screened.narrowed_path != space_path:
        space_path = screened.narrowed_path
        space = load_space(space_path)
    ctx = TrialContext(space_path=space_path, baseline_dir=str(exp_dir / "baselines"),
                       workdir=str(exp_dir), settings=settings_for(space))
    resources = TrialResources(fixed_tp=int(space.fixed_args.get("tp_size") or 1),
                               cpus=space.resources.cpus_per_trial,
                               exclusive_resource=EXCLUSIVE_RESOURCE if space.exclusive_node else None)
    fn = tune.with_resources(tune.with_parameters(trainable, ctx=ctx), resources)
    maximize = space.objective.direction == "maximize"
    warm = sglang_default(space)
    print(f"Warm start: {warm.describe()}" if not restoring else
          f"Resuming; SGLang's default config: {warm.describe()}", file=out, flush=True)
    table = ProgressTable(out, maximize=maximize, objective=space.objective.metric)
    state: dict[str, Any] = {"started": {}, "results": [], "errored": {}, "overheads": [],
                             "space": space}
    _LIVE_CALLBACKS[str(exp_dir)] = (table, tracker, state)
    callback = _Callbacks.make(table, tracker, state, key=str(exp_dir))
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    # Our own table replaces Ray's progress boxes; Ray's logs stay in its session dir.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

    run_config = tune.RunConfig(
        name=run_name, storage_path=str(storage), verbose=0, callbacks=[callback],
        failure_config=tune.FailureConfig(max_failures=2))
    if restoring:
        tuner = tune.Tuner.restore(str(exp_dir), trainable=fn, resume_unfinished=True,
                                   resume_errored=True)
    else:
        # SGLang's own default speculative config goes first: the one a tuned config has to beat.
        searcher = ConstrainedOptunaSearch(space=DefineByRun(space), metric="objective",
                                           mode="max" if maximize else "min",
                                           sampler=_make_sampler(space, seed),
                                           points_to_evaluate=[warm.asked] if warm.asked else None)
        # reuse_actors: a trial process serves the next trial with the same resources, instead of
        # a fresh process per trial re-importing Ray, autotune and SGLang's parser (~3 s a trial).
        tune_config = tune.TuneConfig(search_alg=searcher, num_samples=trials,
                                      max_concurrent_trials=concurrency,
                                      time_budget_s=space.budget.wall_time_s, reuse_actors=True)
        tuner = tune.Tuner(fn, tune_config=tune_config, run_config=run_config)
        state["study"] = searcher.study
    try:
        grid = tuner.fit()
    finally:
        _LIVE_CALLBACKS.pop(str(exp_dir), None)

    all_results = []
    unfinished = 0
    errored = dict(state["errored"])
    for r in grid:
        metrics = r.metrics or {}
        if "status" in metrics:
            all_results.append((metrics.get("trial_id", ""), dict(r.config or {}), metrics))
        elif r.error is not None:
            # Seen by this session's callback, or (after a resume) only in Ray's own record.
            same = [k for k, (_, cfg, _) in errored.items() if cfg == dict(r.config or {})]
            if same:
                all_results.append(errored.pop(same[0]))
            else:
                tid = Path(r.path).name if getattr(r, "path", None) else ""
                all_results.append((tid, dict(r.config or {}),
                                    errored_report(space, dict(r.config or {}), r.error)[1]))
        else:
            unfinished += 1
    ended = len(all_results)
    # A wall-time budget may end a search early on purpose; otherwise fewer ended trials than
    # planned means the run was stopped.
    interrupted = unfinished > 0 or (ended < trials and space.budget.wall_time_s is None)
    return _conclude(space, ctx, all_results, state, name=name, trials=trials,
                     interrupted=interrupted, tracker=tracker, exp_dir=exp_dir, opts=opts,
                     out=out, warm=warm)


def errored_report(space: Any, config: dict[str, Any],
                   error: BaseException | None) -> tuple[Any, dict[str, Any]]:
    """A trial that errored inside Ray: its failed result (the error as its reason) and the
    report it stands in for."""
    from autotune.trial.outcome import Failure
    from autotune.trial.result import TrialResult

    cause = getattr(error, "cause", None) or error
    what = f"{type(cause).__name__}: {cause}" if cause is not None else "no error recorded"
    reason = "the trial errored inside Ray: " + " ".join(what.split())[:500]
    is_baseline = False
    if space is not None:
        try:
            is_baseline = bool(space.trial_config(space.coerce_params(config)).is_baseline)
        except Exception:  # noqa: BLE001 - a config the space rejects is still a failed trial
            is_baseline = not config.get("speculative_algorithm")
    result = TrialResult(status=Status.FAILED, reason=reason, params=dict(config), is_baseline=is_baseline,
                         feasible=False, failure=Failure.ERROR.value)
    return result, {"status": Status.FAILED, "reason": reason, "feasible": False, "is_baseline": is_baseline,
                     "objective": None, "output_tok_s": None, "speedup": None, "accept_length": None,
                     "trial_result": json.dumps(result.to_dict(), default=str)}


def _conclude(space: Any, ctx: Any, results: list[tuple[str, dict, dict]], state: dict,
              *, name: str, trials: int, interrupted: bool, tracker: Any, exp_dir: Path,
              opts: SearchOptions, out: TextIO, warm: Any = None) -> SearchOutcome:
    from autotune.trial.result import TrialResult

    statuses = [m.get("status") for _, _, m in results]
    maximize = space.objective.direction == "maximize"

    def key(item: tuple[str, dict, dict]) -> float:
        v = item[2].get("objective")
        return v if maximize else -v

    spec_ok = [r for r in results if r[2].get("feasible") and not r[2].get("is_baseline")
               and r[2].get("objective") is not None]
    spec_ok.sort(key=key, reverse=True)
    finalists_out: list[dict[str, Any]] = []
    finalist_cands: list[Candidate] = []
    fresh_baseline: dict[int, TrialResult] = {}  # id of a finalist's result -> its fresh baseline
    winner: TrialResult | None = None
    baseline: TrialResult | None = None
    baseline_wins = False
    if interrupted:
        print(f"\nInterrupted: state saved under {exp_dir}. Resume with:\n  python -m "
              f"autotune.search.run --space {opts.space} --name {name} --resume", file=out, flush=True)
    elif spec_ok:
        chosen = spec_ok[: max(1, space.search.finalists)]
        confirmed = _confirm_finalists(chosen, ctx, space, space.search.finalist_repeats, out)
        for (tid, _, first), (params, result, base) in zip(chosen, confirmed):
            finalists_out.append({"trial_id": tid, "params": params,
                                  "search_tok_s": first.get("output_tok_s"),
                                  "confirmed_tok_s": result.output_tok_s,
                                  "confirmed_speedup": result.speedup,
                                  "status": result.status, "reason": result.reason})
            if tracker is not None:
                tracker.log_trial(f"finalist-{tid}", result, kind="finalist",
                                  confirmed=bool(result.feasible))
                if base is not None:
                    tracker.log_trial(f"finalist-{tid}-baseline", base, kind="baseline")
            print(f"  finalist {tid}: search {_num(first.get('output_tok_s'), '.1f')} tok/s -> "
                  f"confirmed {_num(result.output_tok_s, '.1f')} tok/s, speedup "
                  f"{_num(result.speedup, '.3f')}x, {result.status}", file=out, flush=True)
            finalist_cands.append(_candidate(result, space, stage=FINALIST))
            if base is not None:
                finalist_cands.append(_candidate(base, space))
                fresh_baseline[id(result)] = base
    if not interrupted:
        trial_cands = [_candidate(TrialResult.from_dict(json.loads(m["trial_result"])), space)
                       for _, _, m in results if m.get("trial_result")]
        base_cands = [_candidate(b, space) for b in _baselines(results, ctx)]
        pick = pick_winner(trial_cands + finalist_cands + base_cands, maximize=maximize)
        if pick is not None:
            winner, baseline_wins = pick.ref, pick.is_baseline
            # A speculative winner is a confirmed finalist (finalists always run before this).
            baseline = winner if baseline_wins else fresh_baseline.get(id(winner))
    default = compare_to_default(warm, [{**m, "params": cfg} for _, cfg, m in results],
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
    if tracker is not None:
        from autotune.export.command import winner_files

        tracker.finish_search(study=state.get("study"), sglang_default=default, winner_files=winner_files,
                              status="KILLED" if interrupted else "FINISHED")
    return outcome


def _num(value: Any, spec: str) -> str:
    """A figure for the console: "-" when it is unknown, never a made-up 0."""
    v = known(value)
    return "-" if v is None else format(v, spec)


def _candidate(result: Any, space: Any, *, stage: str = TRIAL) -> Candidate:
    """A trial result as the winner policy sees it, valued by the space's objective."""
    return Candidate(ref=result, value=known(result.metric(space.objective.metric)),
                     is_baseline=bool(result.is_baseline),
                     feasible=result.status == Status.FEASIBLE, stage=stage)


def _baselines(results: list[tuple[str, dict, dict]], ctx: Any) -> list[Any]:
    """Every measured baseline of the search (trials with speculation off, and the store)."""
    from autotune.trial.baselines import FileBaselineStore
    from autotune.trial.result import TrialResult

    found = []
    for _, _, m in results:
        if m.get("is_baseline") and m.get("status") == Status.FEASIBLE and m.get("trial_result"):
            found.append(TrialResult.from_dict(json.loads(m["trial_result"])))
        elif m.get("baseline_result"):
            b = TrialResult.from_dict(json.loads(m["baseline_result"]))
            if b.ok:
                found.append(b)
    store = FileBaselineStore(ctx.baseline_dir)
    for path in sorted(store.dir.glob("*.json")):
        try:
            b = TrialResult.from_dict(json.loads(path.read_text()))
        except ValueError:
            continue
        if b.ok:
            found.append(b)
    return found


def _bin_dir() -> str:
    """Prefix that runs this environment's tools: ``.venv/bin/`` after ``make demo``, else ''."""
    bindir = Path(sys.executable).parent
    if (bindir / "mlflow").exists():
        try:
            return str(bindir.relative_to(Path.cwd())) + "/"
        except ValueError:
            return str(bindir) + "/"
    return ""


def browse_hint(tracking_uri: str, experiment_id: str | None, *, bindir: str = "") -> list[str]:
    """How to see the trials: the runs view's URL, and for a local store the UI command first.

    A tracking server is its own UI (``mlflow ui --backend-store-uri http://...`` would be wrong).
    ``workflowType=machine_learning`` opens MLflow 3's runs table, not its GenAI traces view.
    """
    view = f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning" if experiment_id else ""
    if tracking_uri.startswith(("http://", "https://")):
        return [f"Browse trials:  {tracking_uri.rstrip('/')}{view}"]
    return [f"Browse trials:  {bindir}mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1 "
            "--port 5000", f"  then open:     http://127.0.0.1:5000{view}"]


def print_summary(outcome: SearchOutcome, *, out: TextIO | None = None, space_file: str = "") -> None:
    """The end-of-search report: winner, baseline, speedup, accept vs break-even, phases."""
    out = sys.stdout if out is None else out  # the stream of the moment, not of import time
    from autotune.trial.report import phase_table
    from autotune.trial.result import TrialResult

    s = outcome.summary()
    print("\n" + "=" * 78, file=out)
    if outcome.interrupted:
        print(f"Search {outcome.name!r} interrupted after {outcome.trials} trial(s).", file=out)
        return
    print(f"Search {outcome.name!r}: {outcome.trials} trials "
          f"({outcome.feasible} feasible, {outcome.infeasible} infeasible, "
          f"{outcome.failed} failed)", file=out)
    if outcome.winner is None:
        print("No config ran successfully: nothing to recommend.", file=out)
        return
    w = TrialResult.from_dict(outcome.winner)
    if outcome.baseline_wins:
        print("No speculative config beat its no-speculation baseline. The winner is the "
              "BASELINE: serve without speculative decoding.", file=out)
    else:
        print("Winner (confirmed beside a fresh baseline):", file=out)
    print(f"  params: {json.dumps(w.params, default=str)}", file=out)
    if outcome.sglang_default is not None:
        print(f"  {versus_default(outcome.sglang_default, tok_s=w.output_tok_s)}", file=out)
    print(phase_table(w), file=out)
    if s.get("tuner_overhead_s_median") is not None:
        print(f"Tuner overhead per trial (median): {s['tuner_overhead_s_median']:.2f} s", file=out)
    if outcome.tracking_uri:
        print("\nNext steps:", file=out)
        bindir = _bin_dir()
        for line in browse_hint(outcome.tracking_uri, outcome.experiment_id, bindir=bindir):
            print(f"  {line}", file=out)
        print(f"  Export winner:  {bindir}python -m autotune.export --name {outcome.name} "
              "--format sh", file=out)
    print(f"\nLaunch command:\n{w.launch_command}", file=out, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.search", description=__doc__.split("\n\n")[0])
    cli.add_version(parser)
    parser.add_argument("--space", required=True, help="search space YAML (search_spaces/*.yaml)")
    parser.add_argument("--trials", type=int, help="number of trials (default: budget.trials)")
    parser.add_argument("--concurrency", type=int, help="trials at once (default: GPU-limited)")
    parser.add_argument("--name", help="search name (default: the space's name)")
    parser.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS or embedded)")
    parser.add_argument("--resume", action="store_true", help="continue the latest search of --name")
    parser.add_argument("--seed", type=int, help="sampler seed (default: search.seed)")
    parser.add_argument("--summary-json", help="write the winner and trial counts here")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: mlruns/ sqlite)")
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    args = parser.parse_args(argv)
    cli.interruptible()
    opts = SearchOptions(space=args.space, trials=args.trials, concurrency=args.concurrency,
                         name=args.name, address=args.address, resume=args.resume, seed=args.seed,
                         summary_json=args.summary_json, tracking_uri=args.tracking_uri,
                         tracking=not args.no_tracking)
    try:
        outcome = run_search(opts)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print_summary(outcome)
    if opts.summary_json:
        Path(opts.summary_json).write_text(json.dumps(outcome.summary(), indent=2, default=str))
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    # Ran, but nothing usable: no config (not even a baseline) ran feasibly.
    return cli.OK if outcome.winner is not None else cli.NO_RESULT


if __name__ == "__main__":
    # Run as the importable module, not as __main__: Ray pickles the search's callback by
    # reference to autotune.search.run, whose registry of live callbacks must be the one used here.
    from autotune.search import run as _search

    sys.exit(_search.main())
