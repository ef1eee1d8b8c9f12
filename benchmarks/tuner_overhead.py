"""``python -m benchmarks.tuner_overhead [--quick] [--trials N] [--json PATH]``.

What the tuner costs per trial beyond server start-up and measurement: proposing a config (Optuna),
scheduling it (Ray Tune: a trial process, its resources), validating the launch, and the
bookkeeping after it (reporting, telling Optuna, the progress table, MLflow). Target: median
<= 1.0 s per trial. Three figures, each a median with its spread:

1. ``reported``: the search's own figure, ``tuner_overhead_s_median`` in its summary: for each
   trial, the wall time from the moment its slot was free (the previous trial's bookkeeping done,
   or the start of the run) to the end of its own bookkeeping, minus the trial's measured
   ``duration_s`` (and its baseline's, when the trial measured it).
2. ``server gaps`` (independent of 1): a real search, one trial at a time, on a zero-compute
   emulator profile (every forward costs 0 ms, so measuring takes a fraction of a second). Each
   emulator's log says when it was launched (the log file name carries the launch time in ms) and
   when it stopped (the file's mtime: its last line is its shutdown). Trial k's overhead is the
   wall time from the end of trial k-1's last server to the end of trial k's last server, minus
   the wall time of trial k's own servers. It holds everything between two servers, split into
   "inside the trial" (trial ``duration_s`` minus its server windows: launch validation, reading
   results) and "between trials" (the rest: Tune, Optuna, the trial process, MLflow).
3. ``zero-work``: the search's own machinery (``ConstrainedOptunaSearch`` over the space's
   define-by-run, per-trial GPU resources, trial processes reused, the progress table and MLflow
   callback) around a trainable that answers at once with the model-only evaluator's
   expectation: the median time between two trial completions, servers and measurement excluded
   by construction.

Figure 1 is the one the search prints; 2 is the one the target is checked on, because it is read
from outside the search (the servers' own logs), so a mistake in the search's clock cannot hide
in it.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import AutotuneError
from benchmarks._common import (
    LLAMA,
    ZERO_COMPUTE,
    fmt,
    half_range,
    machine_line,
    median,
    setup_for,
    sim_environment,
    table,
    verdict,
    write_json,
)

TARGET_S = 1.0
_LOG_NAME = re.compile(r"^(?P<trial>.+?)(?P<baseline>-baseline)?-(?P<pid>\d+)-(?P<ms>\d{13})\.log$")


def overhead_space(directory: Path, *, trials: int, profile: str = ZERO_COMPUTE) -> Path:
    """A chain-length space on ``profile`` (default: zero-compute), written to ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    setup = setup_for(profile)
    space = {
        "name": "tuner-overhead",
        "backend": "sim",
        "profile": setup.profile,
        "model_path": setup.model_path,
        "draft_model_path": setup.draft_model_path,
        "fixed_args": {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1,
                       "tp_size": 1},
        "parameters": {"speculative_num_steps": {"type": "int", "low": 1, "high": 6},
                       "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 7}},
        "workload": {"source": "builtin", "num_prompts": 2, "warmup_prompts": 1, "output_len": 16,
                     "concurrency": 1, "seed": 0},
        "measure": {"repeats": 1, "startup_timeout_s": 120},
        "budget": {"trials": trials},
        "search": {"sampler": "tpe", "seed": 0, "finalists": 1, "finalist_repeats": 1,
                   "max_concurrent": 1},
    }
    path = directory / "tuner-overhead.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


# ----- 2: gaps between servers ---------------------------------------------------------------------
def server_windows(log_dir: Path) -> dict[str, list[tuple[float, float]]]:
    """``{trial name: [(launch, stop), ...]}`` from the emulator logs of a search."""
    out: dict[str, list[tuple[float, float]]] = {}
    for path in log_dir.glob("*.log"):
        m = _LOG_NAME.match(path.name)
        if m is None:
            continue
        start = int(m["ms"]) / 1000.0
        out.setdefault(m["trial"], []).append((start, path.stat().st_mtime))
    for spans in out.values():
        spans.sort()
    return out


def trial_durations(experiment: Path) -> dict[str, float]:
    """``{trial name: duration_s of the trial plus its baseline}`` from Tune's result files."""
    out: dict[str, float] = {}
    for result_file in experiment.glob("trainable_*/result.json"):
        lines = [ln for ln in result_file.read_text().splitlines() if ln.strip()]
        if not lines:
            continue
        last = json.loads(lines[-1])
        total = 0.0
        for key in ("trial_result", "baseline_result"):
            if last.get(key):
                total += json.loads(last[key]).get("duration_s") or 0.0
        name = "trainable_" + result_file.parent.name.split("_")[1]
        out[name] = total
    return out


def gap_overheads(windows: Mapping[str, list[tuple[float, float]]],
                  durations: Mapping[str, float]) -> list[dict[str, Any]]:
    """Per trial after the first: total, inside-the-trial and between-trials overhead (s)."""
    order = sorted(windows, key=lambda t: windows[t][0][0])
    out: list[dict[str, Any]] = []
    for prev, cur in itertools.pairwise(order):
        prev_end = windows[prev][-1][1]
        cur_end = windows[cur][-1][1]
        served = sum(end - start for start, end in windows[cur])
        total = (cur_end - prev_end) - served
        inside = max(durations.get(cur, served) - served, 0.0)
        out.append({"trial": cur, "total_s": total, "inside_s": min(inside, total),
                    "between_s": max(total - inside, 0.0), "servers_s": served})
    return out


def run_real_search(trials: int, workdir: Path) -> dict[str, Any]:
    """Figures 1 and 2 from one real search at concurrency 1."""
    from autotune.search.options import SearchOptions
    from autotune.search.run import run_search

    space = overhead_space(workdir, trials=trials)
    t0 = time.monotonic()
    with sim_environment(startup_s=0.2):
        outcome = run_search(SearchOptions(space=str(space), root=str(workdir)), out=io.StringIO())
    wall = time.monotonic() - t0
    experiment = Path(outcome.experiment_path or "")
    windows = server_windows(experiment / "logs")
    gaps = gap_overheads(windows, trial_durations(experiment))
    served = [end - start for spans in windows.values() for start, end in spans]
    return {"wall_s": wall, "trials": outcome.trials, "reported": list(outcome.overheads_s),
            "reported_median": outcome.summary()["tuner_overhead_s_median"], "gaps": gaps,
            "server_windows_s": served}


# ----- 3: zero-work trainable ---------------------------------------------------------------------
def zero_work_trainable(config: dict[str, Any], ctx: Any) -> None:
    """A trial that measures nothing: the model-only evaluator's expectation, judged and reported
    exactly as :func:`autotune.search.trainable.trainable` reports a measured trial."""
    from ray import tune

    from autotune.search.trainable import _space, report_of
    from autotune.simtools.evaluate import ModelEvaluator
    from autotune.trial.result import TrialResult
    from autotune.trial.verdict import judge

    space = _space(ctx.space_path)
    params = space.coerce_params(dict(config))
    evaluator = ModelEvaluator(space)
    exp = evaluator.expected(params)
    base = evaluator.expected(space.baseline_params(params))

    def result_of(e: Mapping[str, Any], *, baseline: bool) -> TrialResult:
        return TrialResult(status="ok", reason=None, params=dict(e["params"]), is_baseline=baseline,
                           output_tok_s=e.get("output_tok_s"), accept_length=e.get("accept_length"),
                           phases=dict(e.get("phases") or {}), duration_s=0.0)

    baseline = judge(result_of(base, baseline=True), None)
    result = judge(result_of(exp, baseline=False), baseline)
    tune.report(report_of(result, space, baseline=None, baseline_key="zero-work").to_metrics())


def run_zero_work(trials: int, workdir: Path) -> dict[str, Any]:
    """Figure 3: Tune's wall time per trial around a trainable that does no work."""
    import ray
    from ray import tune

    from autotune.search.callbacks import LIVE_CALLBACKS, SearchCallback, SearchLedger
    from autotune.search.cluster import init_ray
    from autotune.search.options import SearchOptions
    from autotune.search.progress import ProgressTable
    from autotune.search.run import _make_sampler
    from autotune.search.searcher import ConstrainedOptunaSearch, DefineByRun
    from autotune.search.trainable import TrialContext, TrialResources
    from autotune.space.search_space import load_space
    from autotune.tracking.tracker import Tracker
    from autotune.trial.measure_settings import settings_for

    # The model-only evaluator needs a profile with real times (zero-compute has no tok/s).
    space_path = overhead_space(workdir, trials=trials, profile=LLAMA)
    space = load_space(space_path)
    opts = SearchOptions(space=str(space_path), root=str(workdir))
    tracker = Tracker("tuner-overhead-zero-work", root=str(workdir)).connect()
    tracker.start_search(space_path=str(space_path), backend=space.backend, profile=space.profile,
                         budget=trials, seed=0, sampler=space.search.sampler, ray_address="embedded",
                         resume=False)
    where = init_ray(space, opts, 1)
    try:
        ctx = TrialContext(space_path=str(space_path), baseline_dir=str(workdir / "baselines"),
                           workdir=str(workdir), settings=settings_for(space))
        # As in autotune.search.run: Ray takes a callable returning resources; its annotation does not say so.
        fn = tune.with_resources(tune.with_parameters(zero_work_trainable, ctx=ctx),
                                 TrialResources(fixed_tp=1, cpus=1))  # type: ignore[arg-type]
        ledger = SearchLedger(space=space)
        key = str(workdir / "ray" / "zero-work")
        callback = SearchCallback(table=ProgressTable(io.StringIO()), tracker=tracker, ledger=ledger,
                                  key=key)
        LIVE_CALLBACKS[key] = callback
        done: list[float] = []

        class Completions(tune.Callback):
            def on_trial_complete(self, iteration: int, trials: Any, trial: Any, **info: Any) -> None:
                done.append(time.monotonic())

        searcher = ConstrainedOptunaSearch(space=DefineByRun(space), metric="objective",
                                           mode="max", sampler=_make_sampler(space, 0))
        # The search's own settings: one trial at a time here, trial processes reused.
        tuner = tune.Tuner(fn, tune_config=tune.TuneConfig(
            search_alg=searcher, num_samples=trials, max_concurrent_trials=1, reuse_actors=True),
            run_config=tune.RunConfig(name="zero-work", storage_path=str(workdir / "ray"),
                                      verbose=0, callbacks=[callback, Completions()]))
        t0 = time.monotonic()
        try:
            grid = tuner.fit()
        finally:
            LIVE_CALLBACKS.pop(key, None)
        fit_s = time.monotonic() - t0
        completed = sum(1 for i in range(len(grid)) if grid[i].error is None)
        tracker.finish_search(study=searcher.study)
    finally:
        if where == "embedded":
            ray.shutdown()
    intervals = [b - a for a, b in itertools.pairwise(done)]
    return {"fit_s": fit_s, "trials": completed, "intervals_s": intervals,
            "reported": list(ledger.overheads)}


# ----- report -------------------------------------------------------------------------------------
def _spread(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    return f"{min(values):.2f}-{max(values):.2f}"


def report(real: Mapping[str, Any], zero: Mapping[str, Any] | None, *, out: Any = sys.stdout) -> bool:
    """Print the figures; returns whether the target holds."""
    gaps = real["gaps"]
    totals = [g["total_s"] for g in gaps]
    inside = [g["inside_s"] for g in gaps]
    between = [g["between_s"] for g in gaps]
    gap_median = median(totals)
    ok = gap_median is not None and gap_median <= TARGET_S
    rows = [
        ["reported (search summary)", fmt(real["reported_median"]), _spread(real["reported"]),
         len(real["reported"]), verdict(None)],
        ["server gaps: total", fmt(gap_median), _spread(totals), len(totals), verdict(ok)],
        ["  inside the trial", fmt(median(inside)), _spread(inside), len(inside), verdict(None)],
        ["  between trials", fmt(median(between)), _spread(between), len(between), verdict(None)],
    ]
    if zero is not None:
        iv = zero["intervals_s"]
        rows.append(["zero-work: between completions", fmt(median(iv)), _spread(iv), len(iv),
                     verdict(None)])
        rows.append(["zero-work: reported", fmt(median(zero["reported"])), _spread(zero["reported"]),
                     len(zero["reported"]), verdict(None)])
    print(f"Tuner overhead per trial (s), target median <= {TARGET_S:g} s", file=out)
    print(machine_line(), file=out)
    print(f"real search: {real['trials']} trials at concurrency 1 on the zero-compute profile, "
          f"{real['wall_s']:.1f} s wall; server windows (start-up + measurement) median "
          f"{fmt(median(real['server_windows_s']))} s, half-range "
          f"{fmt(half_range(real['server_windows_s']))} s", file=out)
    print(table(["figure", "median", "min-max", "n", "target"], rows), file=out)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tuner_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 trials, no zero-work run (tests)")
    parser.add_argument("--trials", type=int, default=10, help="trials per search (default 10)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    trials = 4 if args.quick else args.trials
    if trials < 3:
        parser.error("--trials must be >= 3 (the first trial has no gap before it)")
    os.environ.pop("RAY_ADDRESS", None)  # an embedded Ray: nothing else shares it
    try:
        with tempfile.TemporaryDirectory(prefix="autotune-overhead-") as tmp:
            real = run_real_search(trials, Path(tmp) / "real")
            zero = None if args.quick else run_zero_work(trials, Path(tmp) / "zero")
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ok = report(real, zero)
    write_json(args.json, {"machine": machine_line(), "target_s": TARGET_S, "real": real,
                           "zero_work": zero, "pass": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
