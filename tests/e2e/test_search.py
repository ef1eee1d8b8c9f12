"""The search end to end: a real local Ray, real emulator servers, real MLflow (sqlite in tmp_path).

Each search runs on a tiny space of ``tests/spaces/`` (2-6 configs, 2-3 prompts of 16-24 tokens,
one repeat, one finalist). The spaces' TPE seeds are chosen so the first trials cover the configs
each test is about; every test checks that precondition first, so a change in the sampler shows up
as "the seed no longer covers X", not as a silent pass.

Emulator processes are accounted for through ``AUTOTUNE_SIM_GPU_LOCK_DIR`` (a directory unique to
the test): every emulator started by the search has it in its environment, so a scan of /proc finds
any that outlived the search. Nothing here kills a process it did not start.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.cli.search import main
from autotune.command_line import BAD_INPUT as EXIT_CONFIG
from autotune.figures import shown
from autotune.search.console import print_summary
from autotune.search.options import SearchOptions
from autotune.search.run import run_search
from autotune.space.search_space import load_space
from autotune.tracking.tracker import Tracker
from tests.conftest import set_sim_env

SPACES = Path(__file__).resolve().parents[1] / "spaces"
REPO = Path(__file__).resolve().parents[2]
LOCK_ENV = "AUTOTUNE_SIM_GPU_LOCK_DIR"

slow = pytest.mark.slow


# ---- helpers ------------------------------------------------------------------------------------

def _search(space: str, root: Path, **kwargs: Any) -> tuple[Any, str]:
    out = io.StringIO()
    outcome = run_search(SearchOptions(space=str(SPACES / space), root=str(root), **kwargs), out=out)
    print_summary(outcome, out=out)  # what the CLI prints at the end
    return outcome, out.getvalue()


def _study(experiment_path: str) -> Any:
    """The Optuna study as the searcher saved it last (what ``--resume`` restores).

    One state file per session, named by the session's start time; Ray copies them all again at
    the end of a session, so their mtimes say nothing.
    """
    states = sorted(Path(experiment_path).glob("searcher-state-*.pkl"))
    assert states, f"no searcher state under {experiment_path}"
    with open(states[-1], "rb") as fh:
        return pickle.load(fh)["_ot_study"]


def _mlflow(name: str, root: Path) -> tuple[Any, list[Any]]:
    """(the search's parent run, its trial runs) read back from the sqlite store."""
    tracker = Tracker(name, root=str(root)).connect(create=False)
    parents = tracker.parent_runs()
    assert len(parents) == 1, f"expected one search run, found {len(parents)}"
    return parents[0], tracker.trial_runs(parents[0].info.run_id)


def _param(run: Any, name: str) -> str | None:
    """A trial run's launch value of ``name`` as MLflow stores it (text), or None."""
    return run.params.get(name)


def _live_emulators(lock_dir: Path) -> list[tuple[int, str]]:
    """Emulator processes still alive that this test's search started (read-only /proc scan)."""
    marker = f"{LOCK_ENV}={lock_dir}".encode()
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or not ours
            continue
        if marker in environ.split(b"\0") and "autotune.sim.server" in cmdline:
            alive.append((int(entry.name), cmdline))
    return alive


def _assert_no_emulator_left(lock_dir: Path, *, grace_s: float = 10.0) -> None:
    deadline = time.monotonic() + grace_s
    alive = _live_emulators(lock_dir)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = _live_emulators(lock_dir)
    assert not alive, f"emulator processes outlived the search: {alive}"
    # The pids the emulators recorded themselves (lock files hold the last holder of each GPU).
    pids = [json.loads(line)["pid"] for line in (lock_dir / "usage.jsonl").read_text().splitlines()
            if line.strip()] if (lock_dir / "usage.jsonl").exists() else []
    pids += [int(p.read_text().split()[0]) for p in lock_dir.glob("gpu*.lock") if p.read_text().strip()]
    assert pids, "no emulator recorded its pid: the lock directory was not used"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid), f"emulator pid {pid} is alive"


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _gpu_intervals_disjoint(lock_dir: Path) -> int:
    """No two emulators held one (logical) GPU at the same time; returns how many were recorded."""
    usage = [json.loads(line) for line in (lock_dir / "usage.jsonl").read_text().splitlines() if line]
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for u in usage:
        for gpu in (u["cuda_visible_devices"] or "").split(","):
            by_gpu.setdefault(gpu, []).append((u["start"], u["end"]))
    for gpu, spans in by_gpu.items():
        spans.sort()
        for (_, e1), (s2, _) in itertools.pairwise(spans):
            assert s2 >= e1, f"GPU {gpu} was held by two emulators at once"
    return len(usage)


# ---- the searcher, fed as Ray Tune feeds it (no cluster) -----------------------------------------

def test_searcher_reads_flattened_results_as_constraints() -> None:
    """Tune flattens results before the searcher sees them (``constraints/failed``...): the
    constraints and sampler attrs must still reach Optuna, and a failed trial is COMPLETE with
    its ``failed`` constraint violated, not an Optuna FAIL."""
    import optuna
    from ray.tune.utils import flatten_dict

    from autotune.search.searcher import ConstrainedOptunaSearch, DefineByRun
    from autotune.search.trainable import report_of
    from autotune.space.search_space import load_space
    from autotune.trial.result import TrialResult
    from autotune.trial.verdict import judge

    space = load_space(SPACES / "slo.yaml")
    searcher = ConstrainedOptunaSearch(space=DefineByRun(space), metric="objective", mode="max",
                                       sampler=optuna.samplers.RandomSampler(seed=0))
    base = judge(TrialResult(status="ok", reason=None, params={}, is_baseline=True,
                             output_tok_s=40.0, phases={"cycle_ms": 25.0}), None)
    fast = TrialResult(status="ok", reason=None, params={"speculative_num_steps": 7},
                       is_baseline=False, output_tok_s=80.0, accept_length=3.6,
                       phases={"cycle_ms": 45.0, "draft_ms": 10.0, "verify_ms": 30.0})
    slow_ok = TrialResult(status="ok", reason=None, params={"speculative_num_steps": 1},
                          is_baseline=False, output_tok_s=55.0, accept_length=1.8,
                          phases={"cycle_ms": 33.0, "draft_ms": 2.0, "verify_ms": 27.0})
    crashed = TrialResult(status="failed", reason="crashed at start-up (exit code 1)",
                          params={"speculative_num_steps": 1}, is_baseline=False, feasible=False)
    slos = [("accept_length", "<=", 2.2)]
    results = [judge(fast, base, slos=slos), judge(slow_ok, base, slos=slos), judge(crashed, base)]
    for i, result in enumerate(results):
        assert searcher.suggest(f"t{i}") is not None
        flat = flatten_dict(report_of(result, space, baseline=None, baseline_key="k").to_metrics())
        assert "constraints" not in flat and "constraints/break_even" in flat
        searcher.on_trial_complete(f"t{i}", result=flat)

    study = searcher.study
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3
    assert set(trials[0].constraints) == {"failed", "break_even", "slo_0"}
    assert trials[0].constraints["slo_0"] > 0 and trials[1].constraints["slo_0"] <= 0
    assert trials[2].constraints["failed"] == 1.0 and trials[2].user_attrs["objective_unmeasured"]
    assert trials[0].user_attrs["phases"]["verify_ms"] == 30.0   # nested attrs rebuilt
    assert study.best_trial.number == 1                         # the fast one broke its SLO


# ---- constraint handling ------------------------------------------------------------------------

@slow
def test_infeasible_fast_trial_never_wins(tmp_path: Path, sim_env: Path, capfd: pytest.CaptureFixture[str]) -> None:
    outcome, text = _search("slo.yaml", tmp_path)
    # Optuna's INFO line about its new study once landed in the live table (seen on the H200).
    assert "A new study created" not in capfd.readouterr().err
    parent, runs = _mlflow("test-slo", tmp_path)
    trials = [r for r in runs if r.kind == "trial"]
    steps = {_param(r, "speculative_num_steps") for r in trials}
    assert steps == {"1", "7"}, f"the seed no longer covers both chains: {steps}"

    # The precondition: the fastest measured trial breaks the SLO.
    fastest = max(trials, key=lambda r: r.metrics.get("output_tok_s", 0.0))
    assert _param(fastest, "speculative_num_steps") == "7"
    assert fastest.status == "infeasible"
    assert "accept_length" in (fastest.reason or "") and "<= 2.2" in fastest.reason
    assert "accept_length" in fastest.tags.get("autotune.slo_violations", "")
    assert fastest.tags.get("autotune.feasible") == "false"
    assert "violates accept_length <= 2.2" in text

    # The winner is the feasible short chain, confirmed beside a fresh baseline.
    s = outcome.summary()
    assert not outcome.interrupted and not outcome.baseline_wins
    assert s["winner_params"]["speculative_num_steps"] == 1
    assert s["winner_is_baseline"] is False
    assert s["accept_length"] is not None and s["accept_length"] <= 2.2
    assert s["speedup"] > 1.0 and outcome.winner["feasible"] is True
    assert s["output_tok_s"] < fastest.metrics["output_tok_s"]
    assert s["trials"]["total"] == 2 and s["trials"]["infeasible"] >= 1
    assert [f["params"]["speculative_num_steps"] for f in s["finalists"]] == [1]
    assert "Winner (confirmed beside a fresh baseline)" in text
    # In MLflow the confirmed winner is marked and first in the saved view; the faster infeasible
    # trial has no place there (it never reads as a contender).
    marked = [r for r in runs if r.tags.get("autotune.winner") == "true"]
    assert [r.run_id for r in marked] == [parent.data.tags["autotune.winner_run_id"]]
    assert marked[0].kind == "finalist" and marked[0].metric("rank") == 1.0 and fastest.metric("rank") is None

    # Optuna learned the constraint: every trial COMPLETE with its constraint values, and its best
    # trial is the feasible one although the infeasible one has the higher value.
    study = _study(outcome.experiment_path)
    done = study.get_trials(deepcopy=False)
    assert len(done) == 2 and all(t.state.name == "COMPLETE" for t in done)
    top = max(done, key=lambda t: t.value)
    assert top.params["speculative_num_steps"] == 7 and top.constraints["slo_0"] > 0
    assert study.best_trial.params["speculative_num_steps"] == 1
    assert all(v <= 0 for v in study.best_trial.constraints.values())

    # MLflow names the same winner.
    tags = parent.data.tags
    assert tags.get("autotune.winner_is_baseline") == "false"
    winner_run = next(r for r in runs if r.run_id == tags["autotune.winner_run_id"])
    assert winner_run.status == "feasible" and _param(winner_run, "speculative_num_steps") == "1"
    assert parent.info.status == "FINISHED"

    # trials.csv and summary.md on the parent run say what MLflow's runs say: one row per run.
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=outcome.tracking_uri)
    local = client.download_artifacts(parent.info.run_id, "report", str(tmp_path / "dl"))
    rows = list(csv.DictReader(open(Path(local) / "trials.csv")))
    assert sorted(r["kind"] for r in rows) == sorted(r.kind for r in runs)
    slow_row = next(r for r in rows if r["kind"] == "trial" and r["speculative_num_steps"] == "7")
    assert slow_row["status"] == "infeasible" and "accept_length" in slow_row["reason"]
    assert float(slow_row["output_tok_s"]) == pytest.approx(fastest.metrics["output_tok_s"], rel=1e-3)
    md = (Path(local) / "summary.md").read_text()
    assert md == outcome.report_files["summary.md"]
    assert "**Winner: steps=1" in md and "## Finalists" in md and "```" in md
    # The command to serve with is real SGLang's, as the export writes it, not the emulator's.
    assert outcome.summary()["serve_command"] in md and "AUTOTUNE_SIM_" not in md
    assert "sglang.launch_server" in outcome.summary()["serve_command"]
    # The workload is the parent run's dataset: one row a request, its digest MLflow's own.
    inputs = client.get_run(parent.info.run_id).inputs.dataset_inputs
    assert len(inputs) == 1
    tags = {t.key: t.value for t in inputs[0].tags}
    assert tags["mlflow.data.context"] == "workload" and inputs[0].dataset.name == "test-slo"
    profile = json.loads(inputs[0].dataset.profile)
    wl = load_space(str(SPACES / "slo.yaml")).workload
    assert profile["num_rows"] == wl["num_prompts"] + wl["warmup_prompts"] == 4
    assert tags["autotune.workload.concurrency"] == str(wl["concurrency"]) == "1"
    # What the figures were measured on: the workload's shape, with the winner's server-counted prompts.
    shape = outcome.workload_shape
    assert shape["requests"] == wl["num_prompts"] and shape["send_mode"] == "closed loop, concurrency 1"
    assert shape["input_tokens_p50"] == outcome.winner["input_tokens_p50"] and shape["input_tokens_p50"] > 0
    assert parent.data.tags["autotune.workload_shape"] in md
    assert parent.data.metrics["workload_requests"] == wl["num_prompts"]
    _assert_no_emulator_left(sim_env)


@slow
def test_baseline_wins_and_the_summary_says_so(tmp_path: Path, sim_env: Path) -> None:
    outcome, text = _search("baseline-wins.yaml", tmp_path)
    parent, runs = _mlflow("test-baseline-wins", tmp_path)
    trials = [r for r in runs if r.kind == "trial"]
    assert {_param(r, "speculative_num_steps") for r in trials} == {"1", "3"}, \
        "the seed no longer covers both chains"
    for r in trials:
        assert r.status == "infeasible", (r.trial_id, r.status, r.reason)
        assert "does not beat the baseline" in (r.reason or "")
        assert r.metrics["speedup"] < 1.0

    s = outcome.summary()
    assert outcome.baseline_wins is True and s["baseline_wins"] is True
    assert s["winner_is_baseline"] is True
    assert not (s["winner_params"] or {}).get("speculative_algorithm")
    assert s["speedup"] == 1.0 and s["accept_length"] is None   # unknown stays None
    assert "--speculative" not in s["launch_command"]
    assert s["finalists"] == []
    assert "The winner is the BASELINE: serve without speculative decoding." in text

    study = _study(outcome.experiment_path)
    assert len(study.trials) == 2 and all(t.state.name == "COMPLETE" for t in study.trials)
    with pytest.raises(ValueError, match="[Nn]o feasible"):
        study.best_trial  # noqa: B018 - Optuna raises: no speculative trial is feasible

    assert parent.data.tags.get("autotune.winner_is_baseline") == "true"
    _assert_no_emulator_left(sim_env)


# ---- per-concurrency answers --------------------------------------------------------------------

@slow
def test_concurrency_levels_give_a_best_config_per_level_and_export_it(
        tmp_path: Path, sim_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli.export import main as export_main

    outcome, text = _search("levels.yaml", tmp_path)
    parent, runs = _mlflow("test-levels", tmp_path)
    trials = [r for r in runs if r.kind == "trial"]
    assert {_param(r, "speculative_num_steps") for r in trials} == {"3", "7"}, \
        "the seed no longer covers both chains"
    # Every run measured both levels; its own figures (what Optuna was told) are the primary's (4).
    for r in runs:
        if r.status == "failed":
            continue
        assert json.loads(r.tags["autotune.level_status"]).keys() == {"1", "4"}
        assert r.metrics["output_tok_s"] == r.metrics["output_tok_s_c4"]
        assert r.metrics["output_tok_s_c1"] < r.metrics["output_tok_s_c4"]
    study = _study(outcome.experiment_path)
    values = {str(t.params["speculative_num_steps"]): t.value for t in study.trials}
    for r in trials:
        assert shown(values[_param(r, "speculative_num_steps")]) == pytest.approx(r.metrics["output_tok_s_c4"])

    # Each level's answer is the best feasible confirmed config as measured at that level; a
    # level's best joins the finalists, so every answer is confirmed.
    assert [row["concurrency"] for row in outcome.per_level] == [1, 4]
    rows = list(csv.DictReader(io.StringIO(outcome.report_files["trials.csv"])))
    for answer in outcome.per_level:
        c = answer["concurrency"]
        finalists = [row for row in rows if row["kind"] == "finalist" and row[f"status_c{c}"] == "feasible"]
        best = max(finalists, key=lambda row: float(row[f"output_tok_s_c{c}"]))
        assert answer["winner"] == best["trial_id"] and answer["confirmed"] is True
        assert answer["output_tok_s"] == pytest.approx(float(best[f"output_tok_s_c{c}"]), rel=1e-3)
        assert answer["speedup"] == pytest.approx(answer["output_tok_s"] / answer["baseline_tok_s"])
        assert str(answer["params"]["speculative_num_steps"]) == best["speculative_num_steps"]
    assert outcome.summary()["per_level"] == outcome.per_level
    assert json.loads(outcome.report_files["per_level.json"]) == json.loads(
        json.dumps(outcome.per_level))
    assert "## Best config per concurrency" in outcome.report_files["summary.md"]
    assert "Best config per concurrency" in text

    # The export's table names the same configs, read back from MLflow.
    capsys.readouterr()
    assert export_main(["--name", "test-levels", "--root", str(tmp_path), "--per-level"]) == 0
    table = json.loads(capsys.readouterr().out)
    for answer, row in zip(outcome.per_level, table["levels"], strict=True):
        assert row["concurrency"] == answer["concurrency"]
        assert row["winner"]["trial_id"] == answer["winner"]
        assert row["winner"]["output_tok_s"] == pytest.approx(shown(answer["output_tok_s"]))  # MLflow holds it rounded
        assert row["winner"]["argv"][:3] == ["python", "-m", "sglang.launch_server"]
    # And as SGLang's per-batch-size adaptive table, which SGLang's own loader reads back.
    config = tmp_path / "adaptive.json"
    assert export_main(["--name", "test-levels", "--root", str(tmp_path),
                        "--adaptive-config", str(config)]) == 0
    script = capsys.readouterr().out
    steps = {str(a["concurrency"]): a["params"]["speculative_num_steps"] for a in outcome.per_level}
    assert json.loads(config.read_text()) == {c: {"candidate_steps": [s]} for c, s in steps.items()}
    assert f"--speculative-adaptive-config {config}" in script and "--speculative-adaptive " in script
    _assert_no_emulator_left(sim_env)


# ---- config failures ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def failures_search(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str, Path, Path]:
    """The ``failures`` space's search, run once for the two tests of what it left (both only read
    it): ``(outcome, console text, root, GPU lock directory)``. The emulator's environment is
    ``sim_env``'s, set for the search only, so the module's other tests never see it."""
    root = tmp_path_factory.mktemp("failures")
    with pytest.MonkeyPatch.context() as mp:
        locks = set_sim_env(mp, root)
        outcome, text = _search("failures.yaml", root)
    return outcome, text, root, locks


@slow
def test_failing_configs_are_results_and_the_search_spends_its_budget(
        failures_search: tuple[Any, str, Path, Path]) -> None:
    outcome, text, root, sim_env = failures_search
    _, runs = _mlflow("test-failures", root)
    trials = [r for r in runs if r.kind == "trial"]
    assert len(trials) == 4 and outcome.trials == 4 and not outcome.interrupted

    def kind(r: Any) -> str:
        if _param(r, "tp_size") == "4":
            return "oom"
        return _param(r, "AUTOTUNE_SIM_FAULT") or "ok"

    by_kind = {kind(r): r for r in trials}
    assert set(by_kind) == {"oom", "crash_at_start", "crash_after_requests:2", "ok"}, \
        f"the seed no longer covers every failure: {sorted(by_kind)}"
    reasons = {k: (r.status, r.reason or "") for k, r in by_kind.items()}
    assert reasons["oom"][0] == "failed" and "out of memory" in reasons["oom"][1]
    assert reasons["crash_at_start"][0] == "failed" and "crashed at start-up" in reasons["crash_at_start"][1]
    assert reasons["crash_after_requests:2"][0] == "failed"
    assert "crashed during measurement" in reasons["crash_after_requests:2"][1]
    assert reasons["ok"][0] in ("feasible", "infeasible")
    for k in ("oom", "crash_at_start", "crash_after_requests:2"):
        assert "output_tok_s" not in by_kind[k].metrics, f"{k}: a failure must not report tok/s"
    assert outcome.failed == 3
    assert "out of memory" in text and "crashed at start-up" in text
    # The typed kind, as MLflow has it (from the exception and exit code, not the words).
    assert {k: by_kind[k].tags.get("autotune.failure") for k in by_kind} == {
        "oom": "oom", "crash_at_start": "crash_at_start",
        "crash_after_requests:2": "crash_during_measurement", "ok": None}

    # A failure is a result Optuna learns from (COMPLETE, "failed" constraint violated).
    study = _study(outcome.experiment_path)
    assert len(study.trials) == 4 and all(t.state.name == "COMPLETE" for t in study.trials)
    assert sorted(t.constraints["failed"] for t in study.trials) == [0.0, 1.0, 1.0, 1.0]

    # The winner ran: TP 8 without a fault (the speculative config, or its baseline).
    assert outcome.winner is not None
    assert outcome.winner["params"].get("tp_size") == 8
    assert not outcome.winner["params"].get("AUTOTUNE_SIM_FAULT")
    _assert_no_emulator_left(sim_env)
    assert _gpu_intervals_disjoint(sim_env) >= 2


def _f(cell: str) -> float | None:
    return float(cell) if cell != "" else None


@slow
def test_the_bill_counts_every_server_failed_ones_too_and_adds_up(
        failures_search: tuple[Any, str, Path, Path]) -> None:
    """A search's GPU bill: the ``failures`` space's four trials are one of each (out of memory at
    start-up (TP 4), a crash at start-up, a crash mid-measurement, and a config that runs, then its
    baseline and the finalist's confirmation). Every server the search started is in the bill,
    failed ones too, and the same figures are in the console, ``summary.md``, ``trials.csv``,
    MLflow and the JSON summary, with the parts adding up to the total."""
    from autotune.search.summary_files import SUMMARY_MD, TRIALS_CSV
    from autotune.trial.gpu_time import PARTS, STAGES

    outcome, text, root, sim_env = failures_search
    bill: dict[str, Any] | None = outcome.summary()["gpu_time"]  # the JSON summary carries it
    assert bill is not None and outcome.gpu_time == bill
    total = bill["gpu_s"]
    assert total > 0
    assert math.fsum(bill["by_part"].values()) == pytest.approx(total, rel=1e-9)
    assert math.fsum(bill["by_stage"].values()) == pytest.approx(total, rel=1e-9)
    assert set(bill["by_part"]) == set(PARTS) and set(bill["by_stage"]) == set(STAGES)
    assert bill["by_stage"]["baselines"] > 0, bill  # each group's baseline, the OOM one too
    # A feasible config is confirmed on two fresh servers (itself and its baseline); an infeasible
    # one (the emulator's noise may make it so) has no finalist.
    assert bill["servers"]["finalists"] == 2 * len(outcome.finalists), (bill, outcome.finalists)
    assert (bill["by_stage"]["finalists"] > 0) == bool(outcome.finalists)
    assert bill["by_part"]["overhead"] > 0  # the tuner's time between trials holds GPUs too

    # trials.csv: a row per server, each with its parts; together they are the bill less overhead.
    rows = list(csv.DictReader(io.StringIO(outcome.report_files[TRIALS_CSV])))
    # (trials.csv rounds every figure to 4 decimals)
    assert math.fsum(_f(r["gpu_s"]) or 0.0 for r in rows) == pytest.approx(total - bill["by_part"]["overhead"],
                                                                           abs=1e-4 * len(rows))
    for r in rows:
        parts = [_f(r[f"time_{p}_s"]) for p in ("startup", "warmup", "measure", "teardown")]
        gpus = _f(r["gpus"])
        assert gpus is not None, r["trial_id"]
        assert _f(r["gpu_s"]) == pytest.approx(gpus * math.fsum(p for p in parts if p is not None),
                                               abs=gpus * 4 * 1e-4)
    failures = {"oom" if r["tp_size"] == "4" else (r["AUTOTUNE_SIM_FAULT"] or "ok"): r
                for r in rows if r["kind"] == "trial"}
    assert {"oom", "crash_at_start", "crash_after_requests:2"} <= set(failures), sorted(failures)
    for kind in ("oom", "crash_at_start"):  # paid for: start-up and teardown, and nothing else
        r = failures[kind]
        assert (_f(r["time_startup_s"]) or 0) > 0 and r["time_teardown_s"] != "", kind
        assert r["time_warmup_s"] == "" and r["time_measure_s"] == "", kind
    assert _f(failures["oom"]["gpus"]) == 4 and _f(failures["crash_at_start"]["gpus"]) == 8
    assert (_f(failures["crash_after_requests:2"]["time_measure_s"]) or 0) > 0

    # summary.md and the console say it.
    md = outcome.report_files[SUMMARY_MD]
    assert "## GPU time" in md and f"**{total:.1f}**" in md
    assert f"GPU time: {total:,.1f} GPU-s" in text

    # MLflow: the search run's totals, each trial run's own figures.
    parent, runs = _mlflow("test-failures", root)
    assert parent.data.metrics["gpu_s_total"] == pytest.approx(shown(total))
    for part in PARTS:
        assert parent.data.metrics[f"gpu_s_{part}"] == pytest.approx(shown(bill["by_part"][part]))
    for stage in STAGES:
        assert parent.data.metrics[f"gpu_s_{stage}"] == pytest.approx(shown(bill["by_stage"][stage]))
    by_id = {r["trial_id"]: r for r in rows}
    logged = [run for run in runs if run.trial_id in by_id]
    assert len(logged) == len(rows)
    for run in logged:
        row = by_id[str(run.trial_id)]
        # Two roundings of one figure (the CSV's decimals, MLflow's four significant digits) may
        # differ by one unit in the last place.
        assert run.metrics["gpu_s"] == pytest.approx(_f(row["gpu_s"]), rel=1e-3, abs=1e-3)
        assert ("time_measure_s" in run.metrics) == (row["time_measure_s"] != "")  # unknown: absent
    _assert_no_emulator_left(sim_env)
# ---- interrupt and resume ----------------------------------------------------------------------
# SIGINT, resume, SIGKILL of the driver and of a trial's worker, then the budget done exactly once in
# MLflow and Optuna: tests/e2e/reliability/test_reliability_interrupts.py (it replaced a narrower copy here).


# ---- bad input ----------------------------------------------------------------------------------

BAD_SPACES = {
    "typo.yaml": (("name: bad\nbackend: sim\nprofile: kimi-k2.5-eagle3-tp8\nmodel_path: sim/K\n"
                   "draft_model_path: sim/D\nfixed_args: {speculative_algorithm: EAGLE3}\n"
                   "parameters:\n  speculative_num_steps: {type: int, low: 1, high: 3, stepz: 1}\n"),
                  8, "stepz"),
    # YAML reports where it gave up (the end of the file) and where the construct started.
    "yaml.yaml": ("name: bad\nbackend: sim\nparameters: {a: [1, 2\n", 4, "starts at line 3"),
    "slo.yaml": (("name: bad\nbackend: sim\nprofile: kimi-k2.5-eagle3-tp8\nmodel_path: sim/K\n"
                  "draft_model_path: sim/D\nfixed_args: {speculative_algorithm: EAGLE3}\n"
                  "constraints:\n  slos: [\"p99_ttft <= 500\"]\n"), 8, "p99_ttft_ms"),
}


@pytest.mark.slow  # a CLI subprocess per case / a search on Ray
@pytest.mark.parametrize("name", sorted(BAD_SPACES))
def test_bad_space_exits_2_with_file_and_line_before_ray(tmp_path: Path, name: str) -> None:
    text, line, hint = BAD_SPACES[name]
    path = tmp_path / name
    path.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": "127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-m", "autotune.search", "--space", str(path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == EXIT_CONFIG, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: {path}:{line}:"), proc.stderr
    assert hint in proc.stderr
    assert "Ray" not in proc.stderr and proc.stdout == ""
    # Nothing was started or created: no Ray storage, no MLflow store.
    assert not (tmp_path / "mlruns").exists()


def test_bad_options_exit_2_without_starting_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    def no_ray(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("ray.init was called for bad input")

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.chdir(tmp_path)
    space = str(SPACES / "slo.yaml")
    for flag in ("--trials", "--concurrency"):  # refused while parsing, the range said
        with pytest.raises(SystemExit) as stop:
            main(["--space", space, flag, "0", "--no-tracking"])
        assert stop.value.code == EXIT_CONFIG
        assert f"argument {flag}: must be an integer from 1 to 2147483647; got '0'" in capsys.readouterr().err
    assert main(["--space", space, "--resume", "--name", "never-ran", "--no-tracking"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "--resume: no earlier search named 'never-ran'" in err
    # A search that concluded is not resumed (its finalists' servers would be paid again).
    done = tmp_path / "mlruns" / "ray" / "done-before" / "run-20261205-100000"
    done.mkdir(parents=True)
    (done / "tuner.pkl").write_bytes(b"")
    (done / "concluded").write_text("2026-12-05 10:05:00 UTC\n")
    assert main(["--space", space, "--resume", "--name", "done-before", "--no-tracking"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert ("search 'done-before' already finished (run-20261205-100000 concluded at 2026-12-05 10:05:00 UTC)"
            in err and "without --resume" in err)
    assert main(["--space", str(tmp_path / "missing.yaml")]) == EXIT_CONFIG
    assert "missing.yaml" in capsys.readouterr().err


@pytest.mark.slow  # a CLI subprocess per case / a search on Ray
def test_a_search_where_nothing_runs_exits_1(tmp_path: Path, sim_env: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    # The exit-code table (autotune.cli): it ran, but nothing usable came of it.
    monkeypatch.chdir(tmp_path)
    code = main(["--space", str(SPACES / "nothing-runs.yaml"), "--no-tracking",
                 "--summary-json", str(tmp_path / "s.json")])
    out = capfd.readouterr().out
    assert code == 1, out[-2000:]
    assert "No config ran successfully: nothing to recommend." in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["winner_params"] is None and summary["trials"]["failed"] == 1
    # Beside the JSON, with tracking off too: the failed trial's figures are empty, not 0.
    assert "nothing to recommend" in (tmp_path / "s.md").read_text()
    rows = list(csv.DictReader(open(tmp_path / "s.trials.csv")))
    # The trial and the baseline it measured first, both failed, both with their reasons.
    assert sorted(r["kind"] for r in rows) == ["baseline", "trial"], rows
    assert all(r["status"] == "failed" and r["output_tok_s"] == "" and r["reason"] for r in rows), rows
    _assert_no_emulator_left(sim_env)


def test_the_closing_hint_fits_the_kind_of_store() -> None:
    from autotune.search.console import browse_hint

    view = "workflowType=machine_learning&viewStateShareKey=autotune-trials"
    server = browse_hint("http://127.0.0.1:5005/", "7", parent_run_id="r1")
    assert server == [f"Browse trials:  http://127.0.0.1:5005/#/experiments/7/runs?{view}",
                      "  search run:    http://127.0.0.1:5005/#/experiments/7/runs/r1?workflowType=machine_learning"]
    local = browse_hint("sqlite:////tmp/m/mlflow.db", "3", bindir=".venv/bin/")
    assert local[0].startswith("Browse trials:  .venv/bin/mlflow ui --backend-store-uri sqlite:////tmp/m/mlflow.db")
    assert local[1].endswith(f"http://127.0.0.1:5000/#/experiments/3/runs?{view}") and len(local) == 2


# ---- the tuner-overhead benchmark's arithmetic ------------------------------------------------

def test_overhead_gaps_from_server_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks.tuner_overhead reads server windows from log names (launch ms) and mtimes
    (stop), and charges each trial the time between servers that its own servers do not cover."""
    monkeypatch.syspath_prepend(str(REPO))  # benchmarks/ is a top-level package of the repo
    from benchmarks.tuner_overhead import gap_overheads, server_windows, trial_durations

    logs = tmp_path / "logs"
    logs.mkdir()
    t = 1_800_000_000.0
    # trial a: baseline 0-2 s, then its config 2.1-4 s; trial b: 4.5-6 s; trial c: 7.2-9 s.
    spans = [("trainable_aaaa-baseline-11-{}.log", t, t + 2.0),
             ("trainable_aaaa-11-{}.log", t + 2.1, t + 4.0),
             ("trainable_bbbb-11-{}.log", t + 4.5, t + 6.0),
             ("trainable_cccc-12-{}.log", t + 7.2, t + 9.0)]
    for pattern, start, end in spans:
        path = logs / pattern.format(int(start * 1000))
        path.write_text("[sim] shutting down\n")
        os.utime(path, (end, end))
    (logs / "notes.txt").write_text("not a server log")
    for trial, duration in (("aaaa", 4.0), ("bbbb", 1.6), ("cccc", 2.0)):
        d = tmp_path / f"trainable_{trial}_1_speculative_num_steps=2_2026-11-30_00-00-00"
        d.mkdir()
        result = {"trial_result": json.dumps({"duration_s": duration})}
        d.joinpath("result.json").write_text(json.dumps(result) + "\n")

    windows = server_windows(logs)
    assert sorted(windows) == ["trainable_aaaa", "trainable_bbbb", "trainable_cccc"]
    assert len(windows["trainable_aaaa"]) == 2
    gaps = gap_overheads(windows, trial_durations(tmp_path))
    assert [g["trial"] for g in gaps] == ["trainable_bbbb", "trainable_cccc"]
    # b: 6.0 - 4.0 = 2.0 s of wall, 1.5 s of server: 0.5 s overhead, 0.1 s of it inside the trial.
    assert gaps[0]["total_s"] == pytest.approx(0.5, abs=1e-3)
    assert gaps[0]["inside_s"] == pytest.approx(0.1, abs=1e-3)
    assert gaps[0]["between_s"] == pytest.approx(0.4, abs=1e-3)
    # c: 9.0 - 6.0 = 3.0 s of wall, 1.8 s of server: 1.2 s, 0.2 s of it inside the trial.
    assert gaps[1]["total_s"] == pytest.approx(1.2, abs=1e-3)
    assert gaps[1]["inside_s"] == pytest.approx(0.2, abs=1e-3)


# ---- a trial that errors inside Ray ----------------------------------------------------------------

@pytest.mark.slow  # 10 s at load ~8 (make test-fast leaves it out)
def test_a_trial_that_errors_inside_ray_is_a_failed_run_in_mlflow(tmp_path: Path) -> None:
    """Ray's callback for a trial whose process raised or was lost: the trial is a failed result in
    the table, in MLflow (FAILED, with Ray's error as its reason) and in the search's results. The
    callback and the tracker are the real ones; only Ray's Trial object is a stand-in (Ray calls
    ``on_trial_error`` with it after its retries), since making Ray lose a trial three times on
    purpose is the business of the cluster fault tests."""
    from autotune.search.callbacks import SearchCallback, SearchLedger
    from autotune.search.progress import ProgressTable
    from autotune.space.search_space import load_space

    space = load_space(SPACES / "slo.yaml")
    tracker = Tracker("errored", root=str(tmp_path)).connect()
    tracker.start_search(space_path=str(SPACES / "slo.yaml"), backend="sim")
    out = io.StringIO()
    ledger = SearchLedger(space=space)
    from autotune.tracking.durable import DurableTracker

    durable = DurableTracker(tracker, tmp_path / "tracking")
    callback = SearchCallback(table=ProgressTable(out), tracker=durable, ledger=ledger, key=str(tmp_path))

    class LostTrial:
        trial_id = "abc_00001"
        config = {"speculative_num_steps": 7, "speculative_num_draft_tokens": 8}

        def get_error(self) -> BaseException:
            return RuntimeError("The actor died unexpectedly before finishing this task.\n  worker: 9")

    callback.on_trial_error(0, [], LostTrial())
    tid, config, report = ledger.errored["abc_00001"]
    assert report.status == "failed" and report.objective is None and report.feasible is False
    assert "errored inside Ray: RuntimeError: The actor died unexpectedly" in report.reason
    assert "abc_00001" in out.getvalue() and "failed" in out.getvalue()
    # No traceback on the console: one line names the log that holds it.
    log = tmp_path / "trial-errors.log"
    assert "Traceback" not in out.getvalue() and f"(traceback: {log})" in out.getvalue()
    assert "RuntimeError: The actor died unexpectedly" in log.read_text()
    run = next(r for r in tracker.trial_runs(tracker.parent_run_id) if r.trial_id == "abc_00001")
    assert run.mlflow_status == "FAILED" and run.status == "failed" and run.kind == "trial"
    assert "The actor died unexpectedly" in (run.reason or "")
    assert run.output_tok_s is None and run.params.get("speculative_num_steps") == "7"
