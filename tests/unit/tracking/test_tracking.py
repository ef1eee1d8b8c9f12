"""MLflow tracking against real sqlite stores in temp dirs: nested runs, resume, artifacts, plots."""

from __future__ import annotations

import json
import math
import pickle
import socket
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.launch.spec import LaunchSpec
from autotune.tracking.content import spec_from_argv, trial_metrics, trial_params
from autotune.tracking.runs import TrialRun, select_winner
from autotune.tracking.stale import STALE_REASON
from autotune.tracking.store import default_store
from autotune.tracking.tracker import Tracker
from tests.tracking_helpers import SIM_ENV, eagle, failed, launch, result

ROOT = Path(__file__).resolve().parents[3]


# ``store`` (one sqlite store per module) and ``tracker`` (a fresh search in it) are tests/conftest.py's.
_names = iter(range(10_000))


def _artifacts(tr: Tracker, run_id: str, path: str = "") -> set[str]:
    return {a.path for a in tr.client.list_artifacts(run_id, path)}


def _read(tr: Tracker, run_id: str, path: str, tmp: Path) -> str:
    return Path(tr.client.download_artifacts(run_id, path, str(tmp))).read_text()


# --- pure functions -----------------------------------------------------------------------


def test_default_store_is_under_the_project_dir(tmp_path):
    uri, artifacts = default_store(tmp_path)
    assert uri == f"sqlite:///{tmp_path.resolve()}/mlruns/mlflow.db"
    assert artifacts == f"file://{tmp_path.resolve()}/mlruns/artifacts"


def test_trial_metrics_leave_unknowns_out():
    res = result(eagle(3, 1), 1500.0, accept=None, ttft_ms_p99=None, output_tok_s_spread=float("nan"))
    metrics = trial_metrics(res)
    assert metrics["output_tok_s"] == 1500.0
    assert metrics["phase_verify_ms"] == 5.2 and metrics["phase_verify_pct"] == 59.1
    for absent in ("accept_length", "ttft_ms_p99", "output_tok_s_spread", "phase_decode_ms",
                   "accept_length_meta_info", "decode_tok_s_p90"):
        assert absent not in metrics, absent
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())


def test_trial_params_use_space_names():
    params = eagle(4, 2, NCCL_ALGO="Ring", disable_custom_all_reduce=True)
    spec = launch(params)
    out = trial_params(result(params, 1200.0), spec)
    assert out["speculative_num_steps"] == "4" and out["speculative_eagle_topk"] == "2"
    assert out["NCCL_ALGO"] == "Ring" and out["disable_custom_all_reduce"] == "true"
    assert out["model_path"] == spec.model_path and out["speculative_draft_model_path"] == spec.draft_model_path
    assert out["AUTOTUNE_SIM_PROFILE"] == SIM_ENV["AUTOTUNE_SIM_PROFILE"]
    assert "port" not in out and "host" not in out


@pytest.mark.parametrize("params", [
    eagle(3, 1), eagle(5, 4, 8, NCCL_ALGO="Tree", attention_backend="fa3"), {},
    {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 8, "disable_custom_all_reduce": True},
])
@pytest.mark.parametrize("backend", ["sim", "sglang"])
def test_spec_from_argv_round_trips(params, backend):
    spec = launch(params, backend=backend)
    assert spec_from_argv(spec.argv(python="python"), spec.env) == spec


def test_spec_from_argv_rejects_other_commands():
    with pytest.raises(ValueError, match="not a server command"):
        spec_from_argv(["python", "-m", "http.server", "--port", "1"])


def _run(kind="trial", status="feasible", tok_s=None, confirmed=False, baseline=False, **metrics):
    m = dict(metrics)
    if tok_s is not None:
        m["output_tok_s"] = tok_s
    return TrialRun(run_id=f"r{tok_s}{kind}{confirmed}", trial_id=f"t{tok_s}", kind=kind, status=status,
                    reason=None, mlflow_status="FINISHED", is_baseline=baseline, confirmed=confirmed,
                    metrics=m, params={})


def test_select_winner_prefers_confirmed_over_faster_unconfirmed():
    runs = [_run(tok_s=1900.0), _run(kind="finalist", tok_s=1700.0, confirmed=True),
            _run(kind="baseline", tok_s=1000.0, baseline=True)]
    win = select_winner(runs)
    assert win.run.output_tok_s == 1700.0 and not win.is_baseline and "confirmed" in win.note


def test_select_winner_falls_back_to_baseline():
    runs = [_run(status="infeasible", tok_s=900.0), _run(status="failed"),
            _run(kind="baseline", tok_s=1000.0, baseline=True)]
    win = select_winner(runs)
    assert win.is_baseline and win.output_tok_s == 1000.0 and win.speedup == 1.0
    assert "no speculative config beat" in win.note


def test_select_winner_takes_a_faster_baseline_of_another_group():
    runs = [_run(tok_s=1200.0), _run(kind="baseline", tok_s=1500.0, baseline=True)]
    assert select_winner(runs).is_baseline


def test_select_winner_derives_the_baseline_when_none_was_logged():
    runs = [_run(status="infeasible", tok_s=900.0, baseline_tok_s=1000.0),
            _run(status="infeasible", tok_s=800.0, baseline_tok_s=1100.0)]
    win = select_winner(runs)
    assert win.derived_baseline and win.output_tok_s == 1100.0 and win.accept_length is None
    assert select_winner([_run(status="failed")]) is None


# --- real stores ----------------------------------------------------------------------------


@pytest.mark.slow  # the MLflow store
def test_trial_run_is_nested_with_params_metrics_tags_and_artifacts(tracker, tmp_path):
    params = eagle(3, 1, NCCL_ALGO="Ring")
    res = result(params, 1500.0)
    run_id = tracker.log_trial("a1b2_00000", res)
    run = tracker.client.get_run(run_id)
    assert run.info.status == "FINISHED"
    tags, metrics, logged = run.data.tags, run.data.metrics, run.data.params
    assert tags["mlflow.parentRunId"] == tracker.parent_run_id
    assert tags["autotune.trial_id"] == "a1b2_00000" and tags["autotune.kind"] == "trial"
    assert tags["autotune.status"] == "feasible" and tags["autotune.backend"] == "sim"
    assert logged["speculative_num_steps"] == "3" and logged["NCCL_ALGO"] == "Ring"
    assert logged["SGLANG_ENABLE_METRICS_DEVICE_TIMER"] == "1" and logged["tp_size"] == "1"
    assert metrics["output_tok_s"] == 1500.0 and metrics["speedup"] == 1.5
    assert metrics["break_even_accept_length"] == 1.7 and metrics["accept_length"] == 3.2
    assert metrics["phase_draft_ms"] == 2.1 and metrics["phase_cycle_ms"] == 8.8
    assert metrics["ttft_ms_p99"] == 80.0 and metrics["baseline_tok_s"] == 1000.0
    history = tracker.client.get_metric_history(run_id, "output_tok_s_repeat")
    assert sorted(m.value for m in history) == [1496.0, 1500.0, 1504.0]
    assert _artifacts(tracker, run_id) >= {"launch.sh", "launch.json", "result.json", "phases.json",
                                           "phases.png", "server_log_tail.txt", "requests.jsonl"}
    spec = tracker.load_spec(run_id)
    assert spec == launch(params)
    assert _read(tracker, run_id, "launch.sh", tmp_path).endswith(spec.shell_command())
    lines = _read(tracker, run_id, "requests.jsonl", tmp_path).splitlines()
    assert [json.loads(x) for x in lines] == res.records
    png = Path(tracker.client.download_artifacts(run_id, "phases.png", str(tmp_path)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # the MLflow store
def test_unknown_metrics_are_absent_not_zero(tracker):
    res = result(eagle(2, 1), 1300.0, accept=None, break_even=None, ttft_ms_p99=None, itl_ms_p99=None)
    run = tracker.client.get_run(tracker.log_trial("t-none", res))
    for absent in ("accept_length", "break_even_accept_length", "ttft_ms_p99", "itl_ms_p99",
                   "phase_decode_ms", "decode_tok_s_p90", "startup_s"):
        assert absent not in run.data.metrics, absent
    # The only zero is one that was measured as zero.
    assert {k for k, v in run.data.metrics.items() if v == 0} == {"failed_requests"}


@pytest.mark.slow  # the MLflow store
def test_failed_trial_keeps_reason_and_log_tail(tracker, tmp_path):
    res = failed(eagle(7, 8, 64))
    run_id = tracker.log_trial("t-oom", res)
    run = tracker.client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["autotune.status"] == "failed"
    assert run.data.tags["autotune.reason"] == res.reason
    assert "CUDA out of memory" in run.data.tags["mlflow.note.content"]
    assert "output_tok_s" not in run.data.metrics and "speedup" not in run.data.metrics
    assert "OutOfMemoryError" in _read(tracker, run_id, "server_log_tail.txt", tmp_path)
    assert "phases.png" not in _artifacts(tracker, run_id)


@pytest.mark.slow  # the MLflow store
def test_logging_a_trial_id_twice_updates_one_run(tracker):
    first = tracker.log_trial("dup_00001", result(eagle(4, 1), 1400.0))
    again = Tracker(tracker.name, root=tracker.root).connect()  # another process would start like this
    again.parent_run_id = tracker.parent_run_id
    second = again.log_trial("dup_00001", result(eagle(4, 1), 1450.0, accept=None))
    assert first == second
    runs = [r for r in tracker.trial_runs() if r.trial_id == "dup_00001"]
    assert len(runs) == 1
    assert runs[0].output_tok_s == 1450.0
    assert runs[0].metric("accept_length") is None  # the re-log did not know it: the old value is stale
    assert runs[0].tags["autotune.attempt"] == "2"


@pytest.mark.slow  # the MLflow store
def test_baseline_and_finalist_kinds_and_confirmation(tracker):
    tracker.log_trial("base_0", result({}, 1000.0))
    tracker.log_trial("fin_0", result(eagle(3, 1), 1520.0), kind="finalist", confirmed=True)
    tracker.log_trial("t_0", result(eagle(3, 1), 1550.0))
    tracker.set_confirmed("t_0", False)
    kinds = {r.trial_id: (r.kind, r.confirmed, r.is_baseline) for r in tracker.trial_runs()}
    assert kinds == {"base_0": ("baseline", False, True), "fin_0": ("finalist", True, False),
                     "t_0": ("trial", False, False)}
    with pytest.raises(ValueError, match="kind"):
        tracker.log_trial("x", result({}, 1.0), kind="winner")
    with pytest.raises(ValueError, match="trial id"):
        tracker.log_trial("bad id'", result({}, 1.0))


@pytest.mark.slow  # the MLflow store
def test_resume_marks_stale_running_runs_failed_and_reuses_them(tracker):
    running = tracker.start_trial("t_live", params=eagle(5, 1), spec=launch(eagle(5, 1)))
    done = tracker.log_trial("t_done", result(eagle(3, 1), 1500.0))
    assert tracker.client.get_run(running).info.status == "RUNNING"
    # The driver dies here; a new driver resumes the same search.
    resumed = Tracker(tracker.name, root=tracker.root).connect()
    parent = resumed.start_search(backend="sim", resume=True)
    assert parent == tracker.parent_run_id
    stale = resumed.client.get_run(running)
    assert stale.info.status == "FAILED"
    assert stale.data.tags["autotune.status"] == "failed" and stale.data.tags["autotune.reason"] == STALE_REASON
    assert resumed.client.get_run(done).info.status == "FINISHED"
    # Ray re-runs the interrupted trial: its run is finished, not duplicated.
    assert resumed.log_trial("t_live", result(eagle(5, 1), 1600.0)) == running
    rerun = resumed.client.get_run(running)
    assert rerun.info.status == "FINISHED" and rerun.data.tags["autotune.status"] == "feasible"
    assert len(resumed.trial_runs()) == 2


@pytest.mark.slow  # the MLflow store
def test_a_new_search_marks_the_search_of_a_killed_driver_failed(store):
    name = f"killed-{next(_names)}"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path[:0] = [{str(ROOT)!r}]
        from autotune.tracking.tracker import Tracker
        from tests.tracking_helpers import eagle
        tr = Tracker({name!r}, root={str(store)!r}).connect()
        print(tr.start_search(backend="sim"), tr.start_trial("t1", params=eagle(3, 1)), flush=True)
        os._exit(9)  # killed: nothing gets to end the runs
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 9, proc.stderr
    old_parent, old_trial = proc.stdout.split()
    tr = Tracker(name, root=store).connect()
    assert tr.client.get_run(old_parent).info.status == "RUNNING"
    new_parent = tr.start_search(backend="sim")
    assert new_parent != old_parent
    assert tr.client.get_run(old_parent).info.status == "FAILED"
    assert tr.client.get_run(old_trial).info.status == "FAILED"
    assert tr.client.get_run(new_parent).info.status == "RUNNING"


@pytest.mark.slow  # the MLflow store
def test_parent_run_has_settings_versions_and_space(store, tmp_path):
    space = ROOT / "search_spaces" / "demo.yaml"
    tr = Tracker(f"params-{next(_names)}", root=store).connect()
    parent = tr.start_search(space_path=space, backend="sim", profile="llama-3.1-8b-eagle3-h100", budget=12,
                             seed=5, sampler="tpe", ray_address="local", params={"workers": 2, "skip": None})
    run = tr.client.get_run(parent)
    p = run.data.params
    assert p["space_path"] == str(space.resolve()) and p["budget"] == "12" and p["seed"] == "5"
    assert p["sampler"] == "tpe" and p["ray_address"] == "local" and p["workers"] == "2"
    assert p["version_mlflow"] == "3.17.2" and "version_optuna" in p and "version_sglang" in p
    assert "skip" not in p
    assert run.data.tags["autotune.kind"] == "search"
    # Who ran it and from what code, on the parent and on every trial run.
    import getpass
    import subprocess

    from autotune import __version__

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()
    trial = tr.client.get_run(tr.log_trial("t", result(eagle(3, 1), 1200.0)))
    for tags in (run.data.tags, trial.data.tags):
        assert tags["mlflow.user"] == getpass.getuser() and tags["autotune.version"] == __version__
        assert tags.get("autotune.sglang_version") == (None if p["version_sglang"] == "not installed"
                                                       else p["version_sglang"])
        assert tags.get("mlflow.source.git.commit") == (commit or None)
    assert _read(tr, parent, "space/demo.yaml", tmp_path) == space.read_text()
    exp = tr.client.get_experiment(tr.experiment_id)
    assert exp.artifact_location == f"file://{store.resolve()}/mlruns/artifacts/{tr.name}"


def _log_from_worker(blob: bytes, worker: int) -> list[str]:
    tr = pickle.loads(blob)
    return [tr.log_trial(f"w{worker}_{j}", result(eagle(j + 2, 1), 1100.0 + 10 * worker + j)) for j in range(3)]


@pytest.mark.slow  # the MLflow store
def test_workers_in_several_processes_log_under_one_parent(tracker):
    blob = pickle.dumps(tracker)
    with ProcessPoolExecutor(3, mp_context=get_context("spawn")) as pool:
        ids = [rid for batch in pool.map(_log_from_worker, [blob] * 3, range(3)) for rid in batch]
    runs = tracker.trial_runs()
    assert len(ids) == len(set(ids)) == len(runs) == 9
    assert {r.trial_id for r in runs} == {f"w{w}_{j}" for w in range(3) for j in range(3)}
    assert all(r.mlflow_status == "FINISHED" for r in runs)


@pytest.mark.slow  # the MLflow store
def test_finish_search_logs_summary_plots_and_winner_command(tracker, tmp_path):
    tracker.log_trial("base", result({}, 1000.0))
    for i, (steps, topk, tok) in enumerate([(3, 1, 1500.0), (5, 1, 1650.0), (3, 4, 1300.0), (7, 4, 950.0),
                                            (2, 1, 1200.0), (6, 2, 1100.0)]):
        status = "feasible" if tok > 1000 else "infeasible"
        tracker.log_trial(f"t{i}", result(eagle(steps, topk), tok, status=status,
                                          accept=1.5 + steps * 0.3, break_even=1.4 + steps * 0.2))
    tracker.log_trial("t_fail", failed(eagle(8, 8, 64)))
    from autotune.export.launch_command import winner_files

    summary = tracker.finish_search(winner_files=winner_files)
    parent = tracker.client.get_run(tracker.parent_run_id)
    assert parent.info.status == "FINISHED"
    assert summary.winner.run.trial_id == "t1"
    assert parent.data.tags["autotune.winner_run_id"] == summary.winner.run.run_id
    assert parent.data.tags["autotune.winner_trial_id"] == "t1"
    m = parent.data.metrics
    assert m["winner_output_tok_s"] == 1650.0 and m["winner_speedup"] == 1.65 and m["baseline_tok_s"] == 1000.0
    # Counters named for what they count: the baseline beside the trials counted apart (feasible_total
    # was 6 here, the baseline among them); the trials' own are the search's (test_sequential).
    assert {k: m[k] for k in summary.counts} == {"baselines": 1, "feasible_baselines": 1, "finalists": 0,
                                                 "feasible_finalists": 0}
    assert not [k for k in m if k.endswith("_total")]
    plots = _artifacts(tracker, tracker.parent_run_id, "plots")
    assert {"plots/tok_s_by_steps.png", "plots/accept_vs_break_even.png"} <= plots
    assert {"plots/param_importances.png", "plots/parallel_coordinate.png", "plots/slice.png"} <= plots, \
        summary.skipped_plots
    assert _artifacts(tracker, tracker.parent_run_id, "winner") == {
        "winner/launch.sh", "winner/config.yaml", "winner/launch.json"}
    script = _read(tracker, tracker.parent_run_id, "winner/launch.sh", tmp_path)
    assert "python -m sglang.launch_server" in script and "AUTOTUNE_SIM" not in script
    assert "--speculative-num-steps 5" in script and "t1" in script
    assert summary.export_error is None


@pytest.mark.slow  # the MLflow store
def test_finish_search_of_a_tiny_search_skips_what_it_cannot_plot(tracker):
    tracker.log_trial("only", result(eagle(3, 1), 1500.0))
    summary = tracker.finish_search()
    assert summary.winner.run.trial_id == "only"
    assert set(summary.skipped_plots) == {"param_importances", "parallel_coordinate", "slice"}
    assert "plots/skipped.json" in _artifacts(tracker, tracker.parent_run_id, "plots")


@pytest.mark.slow  # the MLflow store
def test_finish_search_uses_the_given_optuna_study(tracker):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    study.optimize(lambda t: t.suggest_int("speculative_num_steps", 1, 8) * 10.0
                   + t.suggest_categorical("speculative_eagle_topk", [1, 2, 4]), n_trials=6)
    tracker.log_trial("t", result(eagle(3, 1), 1500.0))
    summary = tracker.finish_search(study=study)
    assert "plots/param_importances.png" in summary.plots and "param_importances" not in summary.skipped_plots


def test_unreachable_tracking_server_fails_fast_with_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=rf"http://127.0.0.1:{port} does not answer"):
        Tracker("x", tracking_uri=f"http://127.0.0.1:{port}").connect()
    assert time.monotonic() - t0 < 10


def test_export_side_needs_an_existing_store(tmp_path):
    with pytest.raises(ConfigError, match="no MLflow store"):
        Tracker("x", root=tmp_path).connect(create=False)
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.slow  # the MLflow store
def test_unknown_experiment_is_a_config_error(store):
    with pytest.raises(ConfigError, match="no experiment named 'nope'"):
        Tracker("nope", root=store).connect(create=False)


@pytest.mark.slow  # the MLflow store
def test_tracker_needs_a_search_run_before_trials(store):
    tr = Tracker(f"no-parent-{next(_names)}", root=store).connect()
    with pytest.raises(RuntimeError, match="start_search"):
        tr.log_trial("t", result({}, 1.0))


@pytest.mark.slow  # the MLflow store
def test_launch_spec_survives_mlflow(tracker):
    spec = LaunchSpec(model_path="/models/with space/x", draft_model_path=None,
                      server_args={"tp_size": 2, "enable_metrics": True}, env={"NCCL_PROTO": "LL128"},
                      backend="sim")
    run_id = tracker.log_trial("odd", result({}, 900.0), spec=spec)
    assert tracker.load_spec(run_id) == spec
    assert tracker.client.get_run(run_id).data.params["model_path"] == "/models/with space/x"


def test_phase_figure_draws_only_known_phases_that_took_time():
    from autotune.tracking import _plots

    assert _plots.phase_figure({"draft_ms": None, "cycle_ms": None}) is None
    fig = _plots.phase_figure({"draft_ms": 1.0, "verify_ms": 4.0, "decode_ms": 0.0, "extend_ms": None,
                               "other_ms": 0.5, "cycle_ms": 5.5, "verify_pct": 72.7}, title="t")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["draft", "verify", "other"]
    notes = [t.get_text() for t in fig.axes[0].texts]
    assert "4.00 ms (72.7%)" in notes and "1.00 ms" in notes  # no share known for draft: none shown


@pytest.mark.slow  # 23 s at load ~8 (make test-fast leaves it out)
def test_a_plot_that_cannot_be_drawn_never_costs_the_trial(tmp_path):
    """Seen on the GPU machine: the kit's IPython stand-in lacked ``version_info``, matplotlib's
    Figure() raised, the tracking callback raised, and Ray ran every trial again. The same
    stand-in must leave the run logged, the other artifacts there and the reason kept. A fresh
    process: matplotlib looks at IPython once per process."""
    script = textwrap.dedent(f"""
        import json, sys, types
        sys.path.insert(0, {str(ROOT)!r})
        sys.modules["IPython"] = types.ModuleType("IPython")
        from matplotlib.figure import Figure
        try:
            Figure()
            raised = None
        except AttributeError as exc:
            raised = str(exc)
        from tests.tracking_helpers import eagle, result
        from autotune.tracking.tracker import Tracker
        tr = Tracker("bad-ipython", root={str(tmp_path)!r}).connect()
        tr.start_search(backend="sim")
        run_id = tr.log_trial("t1", result(eagle(3, 1), 1200.0))
        names = sorted(a.path for a in tr.client.list_artifacts(run_id))
        metric = tr.client.get_run(run_id).data.metrics["output_tok_s"]
        summary = tr.finish_search()
        print(json.dumps({{"raised": raised, "names": names, "metric": metric,
                          "skipped": summary.skipped_plots}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["raised"] and "version_info" in out["raised"]  # the failure is real there
    assert {"launch.sh", "phases.json", "phases_png_error.txt"} <= set(out["names"])
    assert "phases.png" not in out["names"]
    assert out["metric"] == 1200.0
    assert any("could not draw it" in why for why in out["skipped"].values())


@pytest.mark.slow  # the MLflow store
def test_winner_files_under_sglang_0517_keep_a_flag_its_config_loader_refuses(tracker, tmp_path):
    """On the H200 (SGLang 0.5.17) the MoE search's winner/ folder was empty and the search run said
    ``autotune.export_error``: 0.5.17's --config loader refuses cuda_graph_max_bs_decode (a deprecated
    alias shares its field), and that one format's failure lost launch.sh too. Now the flag stays on
    the command line beside --config, and every format is logged and parses back."""
    from autotune.export.launch_command import winner_files
    from autotune.sglang import flags as sglang_flags
    from autotune.sglang.args import parse_server_args

    table = Path(__file__).resolve().parents[2] / "data" / "sglang-0.5.17-flags.json"
    with sglang_flags.using_flags(sglang_flags.flags_from_table(str(table))):
        tracker.log_trial("base", result({"cuda_graph_max_bs_decode": 4}, 234.0))
        tracker.log_trial("t0", result(eagle(5, 1, cuda_graph_max_bs_decode=4), 352.0, baseline_tok_s=234.0))
        summary = tracker.finish_search(winner_files=winner_files)
        assert summary.export_error is None
        assert "autotune.export_error" not in tracker.client.get_run(tracker.parent_run_id).data.tags
        assert _artifacts(tracker, tracker.parent_run_id, "winner") == {
            "winner/launch.sh", "winner/config.yaml", "winner/launch.json"}
        config = _read(tracker, tracker.parent_run_id, "winner/config.yaml", tmp_path)
        import yaml

        assert "cuda-graph-max-bs-decode" not in yaml.safe_load(config)
        assert "--config <this file> --cuda-graph-max-bs-decode 4" in config
        path = tmp_path / "config.yaml"
        path.write_text(config)
        parsed = parse_server_args(["--config", str(path), "--cuda-graph-max-bs-decode", "4"])
    assert parsed["cuda_graph_max_bs_decode"] == 4 and parsed["speculative_num_steps"] == 5


@pytest.mark.slow  # the MLflow store
def test_a_capped_trial_is_tagged_with_its_load_and_an_uncapped_one_says_so(tracker):
    note = "ran 48 of 64; 16 queued; server cap 48; 41% of the window was tail"
    capped = result(eagle(3, 1), 2900.0, load_asked=64, load_cap=48, load_ran=48, load_queued=16,
                    load_tail_pct=41.0, load_client_tail_pct=38.0, load_capped=True, load_capped_windows=3,
                    load_note=note, load_comparison="compared at the load each sustained: this config ran "
                    "48 of 64 (capped), its baseline 64 of 64")
    run = tracker.client.get_run(tracker.log_trial("t-capped", capped))
    tags, metrics = run.data.tags, run.data.metrics
    assert tags["autotune.load_capped"] == "true" and tags["autotune.load"] == note
    assert tags["autotune.load_comparison"].startswith("compared at the load each sustained")
    assert (metrics["load_ran"], metrics["load_asked"], metrics["load_queued"]) == (48, 64, 16)
    assert metrics["load_tail_pct"] == 41.0 and metrics["load_capped_windows"] == 3
    free = result(eagle(3, 1), 3000.0, load_asked=16, load_cap=48, load_ran=16, load_queued=0,
                  load_capped=False, load_capped_windows=0)
    run = tracker.client.get_run(tracker.log_trial("t-free", free))
    assert run.data.tags["autotune.load_capped"] == "false" and "autotune.load" not in run.data.tags
    assert run.data.metrics["load_capped_windows"] == 0 and "load_tail_pct" not in run.data.metrics


def test_both_windows_figures_are_metrics_and_an_unknown_steady_one_is_absent():
    res = result(eagle(3, 1), 1500.0, output_tok_s_whole=1400.0, output_tok_s_steady=1500.0, steady_waves=5.5,
                 output_tok_s_whole_range_pct=2.5)
    metrics = trial_metrics(res)
    assert (metrics["output_tok_s_whole"], metrics["output_tok_s_steady"]) == (1400.0, 1500.0)
    assert metrics["steady_waves"] == 5.5 and metrics["output_tok_s_whole_range_pct"] == 2.5
    whole_only = trial_metrics(result(eagle(3, 1), 1400.0, output_tok_s_whole=1400.0))
    assert "output_tok_s_steady" not in whole_only and "steady_share_pct" not in whole_only
