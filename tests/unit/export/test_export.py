"""``python -m autotune.export`` on real MLflow stores; every output re-read by SGLang's parser."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.cli.export import main as export_main
from autotune.errors import LaunchArgsError
from autotune.export import launch_command as export
from autotune.launch.serving import serving_spec
from autotune.launch.spec import LaunchSpec
from autotune.sglang.args import parse_server_args, sglang_available
from autotune.tracking.search_reader import MlflowReader
from autotune.tracking.tracker import Tracker
from autotune.trial.gpu_time import GpuTime
from autotune.trial.result import stopped_result
from tests.tracking_helpers import eagle, failed, launch, result

ROOT = Path(__file__).resolve().parents[3]
PARSER = {"use_sglang": True} if sglang_available() else {}


# ``store``: tests/conftest.py's sqlite store, one per module.


def _search(store: Path, name: str, trials: list[tuple[str, object, dict]]) -> Tracker:
    tr = Tracker(name, root=store).connect()
    tr.start_search(backend="sim")
    for trial_id, res, kw in trials:
        tr.log_trial(trial_id, res, **kw)
    return tr


@pytest.fixture(scope="module")
def demo(store) -> Tracker:
    """A search whose winner is t_best (steps 5, topk 1, NCCL_ALGO=Ring)."""
    return _search(store, "demo", [
        ("base", result({}, 1000.0), {}),
        ("t_best", result(eagle(5, 1, NCCL_ALGO="Ring"), 1650.0), {}),
        ("t_ok", result(eagle(3, 4), 1300.0), {}),
        ("t_slow", result(eagle(7, 4), 950.0, status="infeasible"), {}),
        ("t_oom", failed(eagle(8, 8, 64)), {}),
    ])


def _export(store: Path, *args: str, capsys) -> tuple[int, str, str]:
    code = export_main(["--root", str(store), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _script_command(text: str) -> tuple[dict[str, str], list[str]]:
    """What bash would run: the exported env and the command words."""
    env, command = {}, []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "export":
            name, value = words[1].split("=", 1)
            env[name] = value
        elif words:
            command = words
    return env, command


@pytest.mark.slow  # 13 s at load ~8 (make test-fast leaves it out)
def test_sh_export_is_the_real_sglang_command_of_the_winner(demo, store, tmp_path, capsys):
    out = tmp_path / "launch.sh"
    code, _, err = _export(store, "--name", "demo", "--format", "sh", "-o", str(out), capsys=capsys)
    assert code == 0, err
    text = out.read_text()
    assert os.stat(out).st_mode & stat.S_IXUSR
    env, command = _script_command(text)
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    assert env == {"NCCL_ALGO": "Ring", "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}  # no AUTOTUNE_SIM_*
    args = parse_server_args(command[3:], **PARSER)
    assert (args["speculative_algorithm"], args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == ("EAGLE3", 5, 1, 6)
    assert args["enable_metrics"] is True and args["mem_fraction_static"] == 0.85
    assert "# from trial t_best" in text and "1650.0 output tok/s" in text and "1.650x" in text
    assert "accept length 3.20" in text and "sim backend" in text
    assert "trial t_best" in err and "1650.0 output tok/s" in err


@pytest.mark.slow  # 30 s at load ~5 (make test-fast leaves it out)
def test_the_exported_script_runs_that_command_under_bash(demo, store, tmp_path, capsys):
    """bash runs the script with a stand-in ``python`` that records what it was given."""
    code, text, err = _export(store, "--name", "demo", capsys=capsys)
    assert code == 0, err
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "ran.json"
    (bindir / "python").write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, sys
        json.dump({{"argv": sys.argv[1:], "env": {{k: os.environ.get(k) for k in
                   ("NCCL_ALGO", "SGLANG_ENABLE_METRICS_DEVICE_TIMER", "AUTOTUNE_SIM_PROFILE")}}}},
                  open({str(record)!r}, "w"))
    """))
    (bindir / "python").chmod(0o755)
    script = tmp_path / "launch.sh"
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM")}
    env["PATH"] = f"{bindir}:{env['PATH']}"
    subprocess.run(["bash", str(script)], check=True, env=env, timeout=30)
    ran = json.loads(record.read_text())
    assert ran["env"] == {"NCCL_ALGO": "Ring", "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1",
                          "AUTOTUNE_SIM_PROFILE": None}
    assert ran["argv"][:2] == ["-m", "sglang.launch_server"]
    assert parse_server_args(ran["argv"][2:], **PARSER)["speculative_num_steps"] == 5


def test_yaml_export_loads_as_an_sglang_config_file(demo, store, tmp_path, capsys):
    out = tmp_path / "config.yaml"
    code, _, err = _export(store, "--name", "demo", "--format", "yaml", "-o", str(out), capsys=capsys)
    assert code == 0, err
    from_config = parse_server_args(["--config", str(out)], **PARSER)
    reader = MlflowReader(demo)
    _, command = _script_command(export.render(export.winner_spec(reader, export.choose(reader)), "sh"))
    assert from_config == parse_server_args(command[3:], **PARSER)
    assert from_config["speculative_num_steps"] == 5 and from_config["enable_metrics"] is True
    text = out.read_text()
    assert "#   export NCCL_ALGO=Ring" in text and "AUTOTUNE_SIM" not in text
    assert "# from trial t_best" in text


def test_json_export_has_argv_env_and_provenance(demo, store, tmp_path, capsys):
    code, text, err = _export(store, "--name", "demo", "--format", "json", capsys=capsys)
    assert code == 0, err
    data = json.loads(text)
    assert data["argv"][:3] == ["python", "-m", "sglang.launch_server"]
    assert data["env"] == {"NCCL_ALGO": "Ring", "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}
    assert parse_server_args(data["argv"][3:], **PARSER)["speculative_num_steps"] == 5
    prov = data["autotune"]
    assert prov["trial_id"] == "t_best" and prov["output_tok_s"] == 1650.0 and prov["speedup"] == 1.65
    assert prov["accept_length"] == 3.2 and prov["is_baseline"] is False


def test_strip_metrics_host_and_port(demo, store, capsys):
    code, text, err = _export(store, "--name", "demo", "--format", "json", "--strip-metrics",
                              "--host", "0.0.0.0", "--port", "30010", capsys=capsys)
    assert code == 0, err
    data = json.loads(text)
    assert data["env"] == {"NCCL_ALGO": "Ring"}
    args = parse_server_args(data["argv"][3:], **PARSER)
    assert args["enable_metrics"] is False and args["host"] == "0.0.0.0" and args["port"] == 30010


def test_a_confirmed_finalist_beats_a_faster_unconfirmed_trial(store, capsys):
    _search(store, "confirmed", [
        ("base", result({}, 1000.0), {}),
        ("lucky", result(eagle(6, 1), 1800.0), {}),
        ("steady", result(eagle(4, 1), 1600.0), {"kind": "finalist", "confirmed": True}),
    ])
    code, text, err = _export(store, "--name", "confirmed", "--format", "json", capsys=capsys)
    assert code == 0, err
    data = json.loads(text)
    assert data["autotune"]["trial_id"] == "steady" and data["autotune"]["confirmed"] is True
    assert "confirmed by re-measurement" in err


def test_the_baseline_is_exported_when_nothing_beats_it(store, capsys):
    _search(store, "no-win", [
        ("base", result({}, 1000.0), {}),
        ("t1", result(eagle(3, 1), 950.0, status="infeasible"), {}),
        ("t2", failed(eagle(7, 4)), {}),
    ])
    code, text, err = _export(store, "--name", "no-win", capsys=capsys)
    assert code == 0, err
    _, command = _script_command(text)
    args = parse_server_args(command[3:], **PARSER)
    assert args["speculative_algorithm"] is None and args["speculative_draft_model_path"] is None
    assert not any(w.startswith("--speculative") for w in command)
    assert "no speculative config beat its baseline" in err and "from baseline base" in err
    assert "speedup 1.000x" in err


def test_the_baseline_is_derived_when_no_baseline_run_was_logged(store, capsys):
    _search(store, "derived", [
        ("t1", result(eagle(3, 1), 950.0, status="infeasible", baseline_tok_s=1010.0), {}),
        ("t2", result(eagle(2, 1, NCCL_ALGO="Tree"), 900.0, status="infeasible", baseline_tok_s=1020.0), {}),
    ])
    code, text, err = _export(store, "--name", "derived", "--format", "json", capsys=capsys)
    assert code == 0, err
    data = json.loads(text)
    assert not any(w.startswith("--speculative") for w in data["argv"])
    assert data["env"]["NCCL_ALGO"] == "Tree"  # the twin of t2, whose baseline was fastest
    assert data["autotune"]["output_tok_s"] == 1020.0 and data["autotune"]["is_baseline"] is True
    assert parse_server_args(data["argv"][3:], **PARSER)["speculative_algorithm"] is None


def test_run_id_of_a_trial_exports_exactly_it_and_of_a_search_chooses_within(demo, store, capsys):
    other = next(r for r in demo.trial_runs() if r.trial_id == "t_ok")
    code, text, err = _export(store, "--name", "demo", "--format", "json", "--run-id", other.run_id,
                              capsys=capsys)
    assert code == 0, err
    assert json.loads(text)["autotune"]["trial_id"] == "t_ok"
    code, text, _ = _export(store, "--name", "demo", "--format", "json", "--run-id", demo.parent_run_id,
                            capsys=capsys)
    assert code == 0 and json.loads(text)["autotune"]["trial_id"] == "t_best"


def test_the_newest_search_run_is_used(store, capsys):
    tr = _search(store, "twice", [("t", result(eagle(3, 1), 1500.0), {})])
    tr.finish_search()
    _search(store, "twice", [("u", result(eagle(4, 1), 1400.0), {})])
    code, text, err = _export(store, "--name", "twice", "--format", "json", capsys=capsys)
    assert code == 0, err
    assert json.loads(text)["autotune"]["trial_id"] == "u"


def test_a_stopped_trial_ends_killed_and_is_never_exported(store, capsys):
    """A trial Ray Tune stopped after a round (its rounds faster than anything else) ends its run
    KILLED, not FINISHED, and the export still chooses among the judged trials."""
    stopped = stopped_result(eagle(6, 1), is_baseline=False, rounds=1, cap=4, tok_s=[2400.0],
                             gpu_time=GpuTime(startup_s=5.0, warmup_s=1.0, measure_s=2.0))
    tr = _search(store, "with-stopped", [
        ("base", result({}, 1000.0), {}),
        ("t_stop", stopped, {}),
        ("t_ok", result(eagle(3, 1), 1400.0), {}),
    ])
    ended = {r.trial_id: r.mlflow_status for r in tr.trial_runs()}
    assert ended == {"base": "FINISHED", "t_stop": "KILLED", "t_ok": "FINISHED"}
    code, text, err = _export(store, "--name", "with-stopped", "--format", "json", capsys=capsys)
    assert code == 0, err
    assert json.loads(text)["autotune"]["trial_id"] == "t_ok"


def test_nothing_feasible_exits_1(store, capsys):
    _search(store, "all-failed", [("t", failed(eagle(3, 1)), {}), ("b", failed({}), {})])
    code, text, err = _export(store, "--name", "all-failed", capsys=capsys)
    assert code == 1 and text == ""
    assert "no feasible trial and no baseline" in err


def test_bad_names_and_run_ids_exit_2(demo, store, tmp_path, capsys):
    code, _, err = _export(store, "--name", "nope", capsys=capsys)
    assert code == 2 and "no experiment named 'nope'" in err
    code, _, err = _export(store, "--name", "demo", "--run-id", "0" * 32, capsys=capsys)
    assert code == 2 and "no run" in err
    code, _, err = _export(tmp_path, "--name", "demo", capsys=capsys)
    assert code == 2 and "no MLflow store" in err


def test_render_refuses_a_launch_sglang_rejects():
    bad = LaunchSpec(model_path="m", draft_model_path="d",
                     server_args={"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                  "speculative_eagle_topk": "many"})
    for fmt in export.FORMATS:
        with pytest.raises(LaunchArgsError):
            export.render(bad, fmt)


def test_real_spec_drops_emulator_env_and_keeps_the_rest():
    spec = launch(eagle(3, 1, NCCL_PROTO="LL"))
    real = serving_spec(spec)
    assert real.backend == "sglang" and real.module == "sglang.launch_server"
    assert real.env == {"NCCL_PROTO": "LL", "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}
    assert real.server_args == spec.server_args and real.port is None
    stripped = serving_spec(spec, strip_metrics=True)
    assert "enable_metrics" not in stripped.server_args and stripped.env == {"NCCL_PROTO": "LL"}


@pytest.mark.slow  # 10 s at load ~8 (make test-fast leaves it out)
def test_cli_as_a_module(demo, store, tmp_path):
    out = tmp_path / "w.yaml"
    proc = subprocess.run([sys.executable, "-m", "autotune.export", "--name", "demo", "--format", "yaml",
                           "-o", str(out)], cwd=store, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "from trial t_best" in proc.stderr and f"wrote yaml to {out}" in proc.stderr
    assert parse_server_args(["--config", str(out)], **PARSER)["speculative_num_steps"] == 5


# ---- per concurrency level (workload.concurrency: [..]) ----------------------------------------

def _leveled(params: dict, by_level: dict[int, tuple[float, str]], primary: int = 8):
    """A result measured at several levels, as trial.level_results.with_levels and judge leave it."""
    from dataclasses import replace

    from autotune.trial.level_results import level_record

    per = {c: result(params, tok, status=status) for c, (tok, status) in by_level.items()}
    return replace(per[primary], levels=[level_record(c, r) for c, r in per.items()])


@pytest.fixture(scope="module")
def levels(store) -> Tracker:
    """Steps 5 win at concurrency 1, steps 2 at 8 (steps 5 lose to the baseline there)."""
    return _search(store, "levels", [
        ("base", _leveled({}, {1: (100.0, "feasible"), 8: (700.0, "feasible")}), {}),
        ("t_long", _leveled(eagle(5, 1), {1: (180.0, "feasible"), 8: (650.0, "infeasible")}), {}),
        ("t_short", _leveled(eagle(2, 1), {1: (150.0, "feasible"), 8: (760.0, "feasible")}), {}),
    ])


def test_the_per_level_table_names_each_levels_winner_and_launch(levels, store, capsys):
    code, out, err = _export(store, "--name", "levels", "--per-level", capsys=capsys)
    assert code == 0, err
    rows = json.loads(out)["levels"]
    assert [(r["concurrency"], r["winner"]["trial_id"]) for r in rows] == [(1, "t_long"), (8, "t_short")]
    assert rows[0]["winner"]["output_tok_s"] == 180.0 and rows[1]["winner"]["output_tok_s"] == 760.0
    steps = [parse_server_args(r["winner"]["argv"][3:], **PARSER)["speculative_num_steps"] for r in rows]
    assert steps == [5, 2]


def test_the_adaptive_export_is_read_back_by_sglang(levels, store, tmp_path, capsys):
    config = tmp_path / "adaptive.json"
    code, out, err = _export(store, "--name", "levels", "--adaptive-config", str(config), capsys=capsys)
    assert code == 0, err
    assert json.loads(config.read_text()) == {"1": {"candidate_steps": [5]}, "8": {"candidate_steps": [2]}}
    _, command = _script_command(out)
    parsed = parse_server_args(command[3:], **PARSER)
    assert parsed["speculative_adaptive"] is True and parsed["speculative_adaptive_config"] == str(config)
    assert "1: 5 steps, 8: 2 steps" in out and "was not measured" in out


def test_a_tree_winner_or_a_single_level_search_has_no_adaptive_form(demo, store, tmp_path, capsys):
    _search(store, "levels-tree", [
        ("base", _leveled({}, {1: (100.0, "feasible"), 8: (700.0, "feasible")}), {}),
        ("t_tree", _leveled(eagle(3, 4), {1: (200.0, "feasible"), 8: (500.0, "infeasible")}), {}),
    ])
    code, _, err = _export(store, "--name", "levels-tree", "--adaptive-config",
                           str(tmp_path / "a.json"), capsys=capsys)
    assert code == 2 and "concurrency 1's winner" in err and "topk 1" in err
    code, out, err = _export(store, "--name", "levels-tree", "--per-level", capsys=capsys)
    assert code == 0, err
    rows = json.loads(out)["levels"]
    assert rows[1]["winner"]["is_baseline"] is True and rows[1]["winner"]["accept_length"] is None
    code, _, err = _export(store, "--name", "demo", "--per-level", capsys=capsys)
    assert code == 1 and "one load level only" in err


# ---- the two readers of a search's record (autotune.tracking.search_reader) -----------------------

def test_every_export_form_is_byte_identical_through_either_reader(demo, levels, store, tmp_path, capsys):
    _search(store, "slo-miss", [  # a baseline that misses the SLO too: nothing to export, never a winner
        ("base", result({}, 1000.0, status="infeasible", reason="p99 TTFT 900 ms > 500 ms"), {}),
        ("t1", result(eagle(3, 1), 1200.0, status="infeasible", reason="p99 TTFT 950 ms > 500 ms"), {}),
        ("t2", failed(eagle(7, 4)), {}),
    ])
    trial = next(r.run_id for r in demo.trial_runs() if r.trial_id == "t_ok")
    forms = [["--name", "demo"], ["--name", "demo", "--format", "yaml"], ["--name", "demo", "--json"],
             ["--name", "demo", "--run-id", trial, "--strip-metrics", "--host", "0.0.0.0", "--port", "30010"],
             ["--name", "demo", "--run-id", demo.parent_run_id],
             ["--name", "levels", "--per-level"], ["--name", "levels", "--adaptive-config", "ADAPTIVE"],
             ["--name", "nope"], ["--name", "demo", "--run-id", "0" * 32], ["--name", "demo", "--run-id", "../x"],
             ["--name", "levels", "--per-level", "--run-id", "0" * 32], ["--name", "slo-miss"]]
    adaptive = tmp_path / "adaptive.json"
    for form in forms:
        seen = []
        for via in ([], ["--via-mlflow"]):
            adaptive.unlink(missing_ok=True)
            code, out, err = _export(store, *[str(adaptive) if a == "ADAPTIVE" else a for a in form], *via,
                                     capsys=capsys)
            seen.append((code, out, err, adaptive.read_text() if adaptive.exists() else None))
        assert seen[0] == seen[1], form
    assert seen[0][0] == 1 and "no feasible trial and no baseline" in seen[0][2]  # slo-miss: exit 1


def test_the_export_of_a_local_store_never_imports_mlflow(demo, levels, store, tmp_path):
    """What makes ``autotune export`` answer in about 0.3 s here instead of 3-5 s (issue 35)."""
    script = textwrap.dedent("""
        import contextlib, io, sys
        from autotune.cli.export import main
        codes = []
        for argv in (sys.argv[1:], ["--name", "levels", "--per-level"], ["--name", "nope"]):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                codes.append(main(argv))
        print(codes, sorted({m.split(".")[0] for m in sys.modules} & {"mlflow", "sqlalchemy", "alembic"}))
    """)
    # (--via-mlflow imports all three: 8 s more of this test, and the byte-identical test covers it.)
    proc = subprocess.run([sys.executable, "-c", script, "--name", "demo", "--format", "yaml"],
                          cwd=store, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[0,", "0,", "2]", "[]"], proc.stdout
