"""The one ``autotune`` command (``python -m autotune``, and the installed console script) and what
every command shares (``autotune.cli``): ``--version`` and the exit codes."""

from __future__ import annotations

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
def test_every_subcommand_is_its_module_command(name: str) -> None:
    proc = _run("autotune", name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: "), proc.stdout[:200]


@pytest.mark.slow  # 7 s at load ~8 (make test-fast leaves it out)
def test_a_subcommand_prints_and_exits_as_its_module_does() -> None:
    args = ["--landscape", LANDSCAPE, "--seeds", "2"]
    via_autotune = _run("autotune", "bench-search", *args)
    via_module = _run("autotune.bench_search", *args)
    assert via_autotune.returncode == via_module.returncode == 0, via_autotune.stderr
    strip = lambda text: [line.rsplit(None, 1)[0] for line in text.splitlines() if line.strip()]  # noqa: E731
    # The same figures; only the seconds column (last) may differ.
    assert strip(via_autotune.stdout) == strip(via_module.stdout)
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
