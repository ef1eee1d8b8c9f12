"""The one ``autotune`` command (``python -m autotune``, and the installed console script) and what
every command shares (``autotune.cli``): ``--version`` and the exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.__main__ import COMMANDS

REPO = Path(__file__).resolve().parents[2]
LANDSCAPE = "benchmarks/landscapes/recorded-h200-llama-8b.json"


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_help_lists_every_command_and_no_command_is_bad_input() -> None:
    shown = _run("autotune", "--help")
    assert shown.returncode == 0
    for name in COMMANDS:
        assert f"\n  {name} " in shown.stdout, name
    bare = _run("autotune")
    assert bare.returncode == 2 and "usage: autotune COMMAND" in bare.stderr
    unknown = _run("autotune", "serach")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: unknown command 'serach'")
    assert "search" in unknown.stderr and "Traceback" not in unknown.stderr


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_is_its_module_command_named_as_it_was_run(name: str) -> None:
    """Issue 35: every subcommand's usage said ``python -m autotune.X`` whatever was typed."""
    proc = _run("autotune", name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: python -m autotune {name} "), proc.stdout[:200]
    examples = proc.stdout.split("examples:\n", 1)[-1]
    assert "python -m autotune." not in examples, examples  # the examples name it so too


@pytest.mark.slow  # 3 s: one interpreter per entry (make test-fast leaves it out)
def test_module_entries_and_the_console_script_name_themselves() -> None:
    for module in ("autotune.export", "autotune.search", "autotune.trial", "autotune.nccl_probe",
                   "autotune.simtools.evaluate", "autotune.search.sync", "autotune.bench_search"):
        proc = _run(module, "--help")
        assert proc.returncode == 0 and proc.stdout.startswith(f"usage: python -m {module} "), proc.stdout[:200]
    bad = _run("autotune.export")
    assert bad.returncode == 2 and bad.stderr == (
        "python -m autotune.export: error: the following arguments are required: --name "
        "(python -m autotune.export --help lists the flags)\n")
    script = Path(sys.executable).with_name("autotune")
    if script.exists():  # installed (make test): the console script's own name
        proc = subprocess.run([str(script), "export", "--help"], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
        assert proc.stdout.startswith("usage: autotune export "), proc.stdout[:200]


def _in(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m autotune ARGS`` run from the empty folder ``tmp_path``, on this checkout."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize(("argv", "said"), [
    (["search", "--space", "demo", "--seed", "99999999999999999999999"],
     "argument --seed: must be an integer from 0 to 4294967295; got '99999999999999999999999'"),
    (["trial", "--space", "demo", "--repeats", "-1"], "argument --repeats: must be an integer from 1 to 2147483647"),
    (["trial", "--space", "demo", "--repeats", "0"], "argument --repeats: must be an integer from 1 to 2147483647"),
    (["evaluate", "--space", "demo", "--concurrency", "-5"], "argument --concurrency: must be an integer from 1"),
    (["evaluate", "--space", "demo", "--concurrency", "0"], "argument --concurrency: must be an integer from 1"),
    (["search", "--space", "demo", "-o", "no-such-folder/winner.json"],
     "argument -o/--output: cannot write no-such-folder/winner.json: the folder no-such-folder does not exist"),
])
def test_issue_36s_absurd_values_are_one_line_and_exit_2_before_anything_runs(tmp_path: Path, argv: list[str],
                                                                             said: str) -> None:
    proc = _in(tmp_path, *argv)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"python -m autotune {argv[0]}: error: {said}"), proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no mlruns/, no Ray state, no server log: nothing ran


def test_a_misspelt_parameter_is_named_first(tmp_path: Path) -> None:
    proc = _in(tmp_path, "trial", "--space", "demo", "--params", '{"speculative_num_stepz": 2}')
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: --params: unknown parameter 'speculative_num_stepz' (did you mean "
                                  "'speculative_num_steps'?)"), proc.stderr
    assert "missing parameter" not in proc.stderr


@pytest.mark.slow  # 7 s at load ~8 (make test-fast leaves it out)
def _without_secs(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        fields = line.split()
        # A strategy row: name median p90 success% ours/this fewer baselines failed dups secs GPU-s ...
        if len(fields) >= 12 and fields[3].endswith("%") and fields[0] != "sweep":
            del fields[9]
        if fields:
            rows.append(fields)
    return rows


@pytest.mark.slow  # 2.5 s: two bench-search subprocesses (make test-fast leaves it out)
def test_a_subcommand_prints_and_exits_as_its_module_does() -> None:
    args = ["--landscape", LANDSCAPE, "--seeds", "2"]
    via_autotune = _run("autotune", "bench-search", *args)
    via_module = _run("autotune.bench_search", *args)
    assert via_autotune.returncode == via_module.returncode == 0, via_autotune.stderr
    # The same figures; only a strategy row's wall seconds ("secs", before the GPU-seconds) may differ.
    assert _without_secs(via_autotune.stdout) == _without_secs(via_module.stdout)
    bad = _run("autotune", "trial", "--space", "no/such/space.yaml", "--params", "{}")
    assert bad.returncode == 2 and "no/such/space.yaml" in bad.stderr and "Traceback" not in bad.stderr


def test_version_everywhere() -> None:
    top = _run("autotune", "--version")
    sub = _run("autotune.trial", "--version")
    assert top.returncode == sub.returncode == 0
    assert top.stdout.startswith("autotune 0.1.0 (ray ") and "optuna" in top.stdout and "mlflow" in top.stdout
    assert sub.stdout == top.stdout


def test_the_installed_console_script_runs() -> None:
    script = Path(sys.executable).with_name("autotune")
    if not script.exists():
        pytest.skip(f"no console script beside {sys.executable}: the package is not installed here "
                    "(make test installs it)")
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("autotune 0.1.0")


def test_versions_read_a_slim_mlflow_install(tmp_path: Path) -> None:
    """The GPU kit carries mlflow-skinny, not the mlflow distribution: the H200's search run said
    ``version_mlflow: not installed`` while MLflow 3.17.2 recorded it. A process that sees only a
    mlflow-skinny distribution reports its version; one that sees neither says not installed."""
    site = tmp_path / "site"
    info = site / "mlflow_skinny-3.17.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mlflow-skinny\nVersion: 3.17.2\n")
    # Only the standard library, this checkout and the fake site: no installed mlflow, ray or optuna.
    code = ("import sys, sysconfig; sys.path = [p for p in sys.path if 'site-packages' not in p]"
            " + sys.argv[1:]; from autotune import cli; v = cli.versions();"
            " print(v['mlflow'], '|', v['ray'])")
    slim = subprocess.run([sys.executable, "-S", "-c", code, str(REPO), str(site)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert slim.returncode == 0, slim.stderr
    assert slim.stdout.strip() == "3.17.2 | not installed"
    none = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert none.returncode == 0 and none.stdout.strip() == "not installed | not installed", none.stderr
