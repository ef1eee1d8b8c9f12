"""The distribution as a user installs it: a wheel's metadata and contents, and the example spaces
it carries, usable by name (``--space demo``) with no checkout around.

The wheel is built once per session from a copy of the sources (an in-tree build would leave
``build/`` and ``*.egg-info`` in the checkout), offline: ``--no-build-isolation`` uses this
environment's setuptools.
"""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from autotune import __version__, cli
from autotune.errors import ConfigError
from autotune.space import packaged
from autotune.space.search_space import load_space

ROOT = Path(__file__).resolve().parents[2]
DIST = "autotune-sglang"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    # benchmarks/ too, as in a checkout: it sits beside the package, and must stay out of the wheel.
    for name in ("autotune", "benchmarks"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("*.whl")
    return whl


def _metadata(whl: Path) -> tuple[email.message.Message, list[str]]:
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(meta).decode()), names


def test_the_wheel_is_the_free_name_with_its_license_and_command(wheel: Path) -> None:
    meta, names = _metadata(wheel)
    assert meta["Name"] == DIST and meta["Version"] == __version__
    assert meta["License-Expression"] == "Apache-2.0" and meta["Author"] == "autotune developers"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # The required pins stay exactly as they were.
    requires = meta.get_all("Requires-Dist")
    for pin in ("mlflow==3.17.2", "ray[tune]==2.60.*", "optuna==5.0.*", "httpx==0.28.*"):
        assert pin in requires, requires
    with zipfile.ZipFile(wheel) as zf:
        entry = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "[console_scripts]\nautotune = autotune.__main__:main" in entry
    assert "autotune/__main__.py" in names and "autotune/search/__main__.py" in names


def test_the_wheel_does_not_carry_the_benchmarks(wheel: Path) -> None:
    _, names = _metadata(wheel)
    research = [n for n in names if n.startswith(("benchmarks/", "autotune/search/benchmark/"))
                or n == "autotune/search/samplers/_peers.py"]
    assert not research, research
    assert "autotune/bench_search.py" in names  # the thin entry, which says it needs a checkout


def test_the_wheel_carries_every_packaged_space(wheel: Path) -> None:
    _, names = _metadata(wheel)
    shipped = {Path(n).stem for n in names if n.startswith("autotune/space/examples/") and n.endswith(".yaml")}
    assert "demo" in shipped and set(packaged.names()) <= shipped
    # search_spaces/ is the same folder (one copy of each file), not a second set.
    assert (ROOT / "search_spaces").resolve() == packaged.EXAMPLES
    assert sorted(p.name for p in (ROOT / "search_spaces").glob("*.yaml")) == \
        sorted(p.name for p in packaged.EXAMPLES.glob("*.yaml"))


def test_pyproject_pins_no_more_than_it_must() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    exact = sorted(d for d in project["dependencies"] if "==" in d)
    assert exact == ["httpx==0.28.*", "mlflow==3.17.2", "optuna==5.0.*", "ray[tune]==2.60.*"]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed once, with no dependencies, into a folder of its own (put it on PYTHONPATH)."""
    site = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                           "--target", str(site), str(wheel)],
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr
    return site


def test_an_installed_wheel_finds_demo_by_name_without_a_checkout(installed: Path, tmp_path: Path) -> None:
    site = installed
    work = tmp_path / "elsewhere"  # no search_spaces/ here
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = ("import autotune, json; from autotune.space.search_space import load_space; "
             "s = load_space('demo'); print(json.dumps([autotune.__file__, s.file, s.count()]))")
    shown = subprocess.run([sys.executable, "-c", probe], cwd=work, env=env, capture_output=True,
                           text=True, timeout=120, check=False)
    assert shown.returncode == 0, shown.stderr
    module, file, count = json.loads(shown.stdout)
    assert module.startswith(str(site)) and file.startswith(str(site / "autotune/space/examples"))
    assert count == load_space(ROOT / "search_spaces" / "demo.yaml").count()
    # And through a command: the model-only evaluator, no servers.
    run = subprocess.run([sys.executable, "-m", "autotune", "evaluate", "--space", "demo", "--optimum", "--json"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["configs"] == count


def test_bench_search_from_a_wheel_says_it_needs_a_checkout(installed: Path, tmp_path: Path) -> None:
    site = installed
    work = tmp_path / "elsewhere"  # no benchmarks/ here
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    for argv in (["-m", "autotune.bench_search", "--seeds", "1"], ["-m", "autotune", "bench-search"]):
        run = subprocess.run([sys.executable, *argv], cwd=work, env=env, capture_output=True, text=True,
                             timeout=120, check=False)
        assert run.returncode == cli.BAD_INPUT and run.stdout == "", (argv, run.stdout, run.stderr)
        (line,) = run.stderr.splitlines()
        assert "needs a source checkout" in line and "python -m benchmarks.search" in line


def test_a_local_file_wins_over_the_packaged_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = (ROOT / "search_spaces" / "demo.yaml").read_text().replace("name: demo", "name: mine")
    (tmp_path / "demo.yaml").write_text(mine)
    monkeypatch.chdir(tmp_path)
    assert load_space("demo.yaml").name == "mine"
    assert load_space("demo").name == "demo" and load_space("demo").file == str(packaged.EXAMPLES / "demo.yaml")


def test_an_unknown_name_lists_the_packaged_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_space("dmeo")
    text = str(err.value)
    assert text.startswith("dmeo: cannot read the search space") and "did you mean 'demo'?" in text
    assert all(name in text for name in packaged.names())
    # A path is never taken for a name: the message says the file is missing.
    with pytest.raises(ConfigError, match="no/such.yaml: cannot read the search space: no such file;"):
        load_space("no/such.yaml")


def test_a_bad_space_name_exits_2_listing_the_packaged_names(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "autotune.trial", "--space", "no-such-space", "--params", "{}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == cli.BAD_INPUT, proc.stderr
    assert "no-such-space" in proc.stderr and "Traceback" not in proc.stderr
    assert all(name in proc.stderr for name in packaged.names())


def test_autotune_spaces_lists_and_locates(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    listed = subprocess.run([sys.executable, "-m", "autotune", "spaces"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    tuning, bench, _ = listed.stdout.split("\n\n")
    rows = {line.split()[0] for line in tuning.splitlines()} | {line.split()[0] for line in bench.splitlines()[1:]}
    assert rows == set(packaged.names()) and "nccl-candidates-2xh200" not in tuning + bench
    where = subprocess.run([sys.executable, "-m", "autotune", "spaces", "--path", "demo"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    assert where.returncode == 0 and Path(where.stdout.strip()) == packaged.EXAMPLES / "demo.yaml"
    bad = subprocess.run([sys.executable, "-m", "autotune", "spaces", "--path", "nope"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == cli.BAD_INPUT and "demo" in bad.stderr


def test_help_text_is_plain() -> None:
    assert cli.plain("``python -m x``: rank :class:`~autotune.errors.ConfigError` by :mod:`a.b` ``n``") == \
        "Rank ConfigError by a.b n"
    parser = cli.command_parser("prog", "First ``literal`` line\nwrapped.\n\nNot shown.", examples=["prog --x"])
    text = parser.format_help()
    assert "First literal line wrapped." in text and "Not shown" not in text and "``" not in text
    assert "examples:\n  prog --x" in text
