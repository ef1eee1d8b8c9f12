"""The MLflow UI shows a search as a person sees it: a real ``mlflow ui`` and headless Chromium.

The store is populated through :class:`autotune.tracking.tracker.Tracker`; the UI is a real subprocess on
127.0.0.1 (killed by its process group afterwards); Chromium renders the React pages
(``--virtual-time-budget`` lets the scripts finish) and dumps the DOM or a screenshot. Screenshots go
to ``test-artifacts/`` (git-ignored) for a person to look at.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from tracking_helpers import eagle, failed, result

from autotune.tracking.tracker import Tracker

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SEARCH = "ui-search"

if CHROMIUM is None:
    pytest.skip("Debian chromium is not installed (apt-get install -y chromium)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def search(tmp_path_factory) -> Tracker:
    root = tmp_path_factory.mktemp("ui-project")
    tr = Tracker(SEARCH, root=root).connect()
    tr.start_search(backend="sim", budget=6, seed=1, sampler="tpe", ray_address="local")
    tr.log_trial("baseline_00000", result({}, 1000.0))
    for i, (steps, topk, tok) in enumerate([(3, 1, 1480.0), (5, 1, 1650.0), (4, 2, 1320.0), (7, 4, 940.0)]):
        tr.log_trial(f"a1b2_{i:05d}", result(eagle(steps, topk), tok,
                                             status="feasible" if tok > 1000 else "infeasible"))
    tr.log_trial("a1b2_00009", failed(eagle(8, 8, 64)))
    tr.finish_search()
    return tr


@pytest.fixture(scope="module")
def ui(search) -> str:
    """``mlflow ui`` on the populated store; yields its base URL."""
    port = _free_port()
    log = open(Path(search.root) / "mlflow-ui.log", "wb")  # noqa: SIM115 - closed after the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", search.tracking_uri,
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=search.root)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow ui exited with {proc.returncode}: "
                            + (Path(search.root) / "mlflow-ui.log").read_text()[-2000:])
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("mlflow ui did not answer /health within 90 s")
            time.sleep(0.5)
        yield url
    finally:
        # The UI runs uvicorn and a job runner as children: end the whole group it leads.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
        log.close()


def _chromium(tmp_path: Path, url: str, *, screenshot: Path | None = None, height: int = 1000) -> str:
    """Render a page in headless Chromium; the DOM as text, and a screenshot of the same render if asked
    (one Chromium start and one page load for both)."""
    profile = tmp_path / f"chromium-{time.monotonic_ns()}"
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--virtual-time-budget=20000",
            f"--window-size=1600,{height}", "--hide-scrollbars"]
    args += ["--dump-dom"] + ([f"--screenshot={screenshot}"] if screenshot else [])
    proc = subprocess.run([*args, url], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _text(dom: str) -> str:
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.DOTALL)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))


def test_experiment_page_lists_the_search(search, ui, tmp_path):
    shot = ARTIFACTS / "mlflow-ui.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    text = _text(_chromium(tmp_path, f"{ui}/#/experiments/{search.experiment_id}/runs", screenshot=shot))
    parent_name = search.client.get_run(search.parent_run_id).info.run_name
    assert SEARCH in text
    assert parent_name[:10] in text  # long names are cut with an ellipsis in the table
    assert re.search(r"\b7 matching runs\b", text), text[:3000]  # the search and its 6 nested runs
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_trial_page_shows_its_metrics_params_and_status(search, ui, tmp_path):
    winner = next(r for r in search.trial_runs() if r.trial_id == "a1b2_00001")
    url = f"{ui}/#/experiments/{search.experiment_id}/runs/{winner.run_id}"
    shot = ARTIFACTS / "mlflow-ui-run.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    # One render, tall enough for the metrics table in the screenshot; its DOM is what is checked.
    text = _text(_chromium(tmp_path, url, screenshot=shot, height=2400))
    assert re.search(r"output_tok_s 1650\b", text), text[:3000]
    assert re.search(r"speedup 1\.65\b", text) and re.search(r"accept_length 3\.2\b", text)
    assert re.search(r"speculative_num_steps 5\b", text)
    assert "autotune.status" in text and "feasible" in text
    assert "accept_length 0" not in text
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failed_trial_page_shows_the_reason(search, ui, tmp_path):
    run = next(r for r in search.trial_runs() if r.trial_id == "a1b2_00009")
    text = _text(_chromium(tmp_path, f"{ui}/#/experiments/{search.experiment_id}/runs/{run.run_id}"))
    assert "out of memory at start-up" in text
    assert not re.search(r"\boutput_tok_s \d", text)  # never measured: not shown as a number


def test_a_search_tracks_through_the_tracking_server_and_exports_from_it(ui, capsys):
    """The same server as a tracking URI: runs, artifacts (proxied) and export over HTTP."""
    from autotune.export import command as export

    tr = Tracker("via-http", tracking_uri=ui).connect()
    tr.start_search(backend="sim")
    tr.log_trial("base", result({}, 1000.0))
    run_id = tr.log_trial("t", result(eagle(4, 1), 1400.0))
    assert tr.log_trial("t", result(eagle(4, 1), 1410.0)) == run_id
    summary = tr.finish_search(winner_files=export.winner_files)
    assert summary.winner.run.run_id == run_id and summary.export_error is None
    assert {a.path for a in tr.client.list_artifacts(run_id)} >= {"launch.json", "phases.png"}
    assert export.main(["--name", "via-http", "--tracking-uri", ui, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert '"trial_id": "t"' in out.out and "1410.0 output tok/s" in out.err
    assert "View run" not in out.out and "View experiment" not in out.out  # MLflow's own prints
