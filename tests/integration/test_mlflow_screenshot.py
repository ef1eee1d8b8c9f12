"""``scripts/mlflow_screenshot.py`` on a tiny real store: a real ``mlflow ui``, Playwright and Debian's Chromium.

The store (a parent run with two nested child runs) is written with the MLflow client in the layout a GPU
call brings back (``mlflow.db`` beside ``mlruns/artifacts``); the script runs as a subprocess, as a person
would run it. The error tests need neither the UI nor a browser.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "mlflow_screenshot.py"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def _store(root: Path) -> Path:
    """``root/mlflow.db`` with experiment ``shot-search``: a parent run and two nested child runs."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    exp = client.create_experiment("shot-search", artifact_location=(root / "mlruns" / "artifacts" /
                                                                     "shot-search").as_uri())
    parent = client.create_run(exp, run_name="search shot-search", tags={"autotune.kind": "search"})
    for i, tok in enumerate((1450.0, 1620.0)):
        child = client.create_run(exp, run_name=f"trial t{i} steps={i + 3}",
                                  tags={"mlflow.parentRunId": parent.info.run_id, "autotune.status": "feasible"})
        client.log_metric(child.info.run_id, "output_tok_s", tok)
        client.log_param(child.info.run_id, "speculative_num_steps", i + 3)
        client.set_terminated(child.info.run_id)
    client.set_terminated(parent.info.run_id)
    return root / "mlflow.db"


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC, f"{path} is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_screenshots_of_a_tiny_store_show_its_three_runs(tmp_path):
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed (apt-get install -y chromium; make test does it)")
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("Playwright for Python is not installed (make venv installs the test extras)")
    db = _store(tmp_path / "store")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    out = tmp_path / "shots"
    proc = _run("--store", str(db.parent), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert re.search(r"experiment 'shot-search' id \d+: 3 runs \(REST API\); parent run [0-9a-f]{32} "
                     r"with 2 child runs", proc.stdout), proc.stdout
    assert "the UI table says 3 matching runs (3 rows rendered), the REST API 3" in proc.stdout, proc.stdout
    for name in ("mlflow-experiment.png", "mlflow-parent-run.png", "mlflow-child-run.png"):
        png = out / name
        width, height = _png_size(png)
        assert (width, height >= 600) == (1800, True) and png.stat().st_size > 20_000, (name, width, height)
        assert f"{png} ({width}x{height} px)" in proc.stdout
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # the store was only read
    assert not list(db.parent.glob("mlflow.db-*")) and sorted(p.name for p in db.parent.iterdir()) == ["mlflow.db"]


def test_a_missing_store_says_what_it_wants(tmp_path):
    proc = _run("--store", str(tmp_path / "nowhere"), "--out", str(tmp_path / "shots"), timeout=60)
    assert proc.returncode == 2
    assert f"no MLflow sqlite store at {tmp_path / 'nowhere' / 'mlflow.db'}" not in proc.stderr  # not a folder
    assert f"no MLflow sqlite store at {tmp_path / 'nowhere'}: the store must be a folder holding mlflow.db" \
        in proc.stderr


def test_a_chromium_that_is_not_there_is_named(tmp_path):
    (tmp_path / "mlflow.db").write_bytes(b"")
    proc = _run("--store", str(tmp_path), "--out", str(tmp_path / "shots"), "--chromium", "/no/chromium",
                timeout=60)
    assert proc.returncode == 2
    assert "Chromium not found at '/no/chromium': install Debian's (apt-get install -y chromium)" in proc.stderr


_HOLDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import mlflow_screenshot as shot
with shot.mlflow_ui(db=Path(sys.argv[2]), port=0, workdir=Path(sys.argv[3])) as url:
    print(url, flush=True)
    time.sleep(600)
"""


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow  # a real MLflow UI
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's")
@pytest.mark.timeout(300)
def test_the_ui_dies_with_a_script_killed_by_sigkill(tmp_path):
    """A caller's timeout SIGKILLs the script, whose ``finally`` never runs: the ``mlflow ui`` it
    started (its own session) once stayed behind with MLflow's job runners. It now goes with it."""
    db = _store(tmp_path / "store")
    ui: list[int] = []
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(SCRIPT.parent), str(db), str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        url = holder.stdout.readline().strip()  # printed once /health answers
        assert url.startswith("http://127.0.0.1:"), url
        ui = _children(holder.pid)
        assert len(ui) == 1, ui
        holder.kill()
        holder.wait(timeout=30)
        deadline = time.monotonic() + 120
        while Path(f"/proc/{ui[0]}").exists() and time.monotonic() < deadline:
            with open(f"/proc/{ui[0]}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break  # dead, only not reaped (its parent is gone; init reaps it)
            time.sleep(0.5)
        alive = (Path(f"/proc/{ui[0]}").exists()
                 and open(f"/proc/{ui[0]}/stat").read().rsplit(")", 1)[1].split()[0] != "Z")
        assert not alive, f"mlflow ui {ui[0]} outlived the script"
    finally:
        if holder.poll() is None:
            holder.kill()
        for pid in ui:  # the ui leads its own session: its group is everything it started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
