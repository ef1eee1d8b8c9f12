"""The MLflow UI shows a search as a person sees it: a real ``mlflow ui`` and headless Chromium.

The store is populated through :class:`autotune.tracking.tracker.Tracker`; the UI is a real subprocess on
127.0.0.1 (killed by its process group afterwards). The links a search prints at its end are opened as a
person opens them, in a fresh browser profile (Playwright driving the system Chromium, each check waiting
for what it looks at to render). Screenshots go to ``test-artifacts/`` (git-ignored) for a person to look
at.
"""

from __future__ import annotations

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

from autotune.search.console import browse_hint
from autotune.tracking.tracker import Tracker
from autotune.tracking.ui_links import run_url
from tests.tracking_helpers import eagle, failed, result

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SEARCH = "ui-search"

if CHROMIUM is None:
    pytest.skip("Debian chromium is not installed (apt-get install -y chromium)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Each trial took this long (its result's own clock), as an emulator trial does.
TRIAL_S = 15.0
SUMMARY = "# autotune search `ui-search`\n\n5 trials: 3 feasible, 1 infeasible, 1 failed.\n\n## Finalists\n"


@pytest.fixture(scope="module")
def search(tmp_path_factory) -> Tracker:
    root = tmp_path_factory.mktemp("ui-project")
    tr = Tracker(SEARCH, root=root).connect()
    tr.start_search(backend="sim", budget=6, seed=1, sampler="tpe", ray_address="local")
    began = time.time() - 10 * TRIAL_S
    tr.log_trial("baseline_00000", result({}, 1000.0, started_at=began, duration_s=TRIAL_S))
    # The fastest run broke an SLO: it must not head the table, the winner does.
    for i, (steps, topk, tok) in enumerate([(3, 1, 1480.0), (5, 1, 1650.0), (4, 2, 1320.0), (7, 4, 940.0),
                                            (6, 1, 1730.7654)]):
        status, reason = (("feasible", None) if 1000 < tok < 1700 else
                          ("infeasible", "p99 TTFT 260 ms over its SLO of 200 ms" if tok > 1000 else None))
        tr.log_trial(f"a1b2_{i:05d}", result(eagle(steps, topk), tok, status=status, reason=reason,
                                             started_at=began + (i + 1) * TRIAL_S, duration_s=TRIAL_S))
    tr.log_trial("a1b2_00009", failed(eagle(8, 8, 64)))
    tr.finish_search(report_files={"summary.md": SUMMARY})
    return tr


@pytest.fixture(scope="module")
def ui(search) -> str:
    """``mlflow ui`` on the populated store; yields its base URL."""
    port = _free_port()
    log = open(Path(search.root) / "mlflow-ui.log", "wb")  # noqa: SIM115 - closed after the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", search.tracking_uri,
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=search.root,
        # MLflow's GenAI job runner (several processes importing MLflow) is not what this tests.
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # ~15 s idle; minutes when the two cores are busy
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
                pytest.fail("mlflow ui did not answer /health within 180 s")
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


def _shown(page) -> str:
    """The page's text as a person reads it, runs of white space as one space."""
    return " ".join(page.inner_text("body").split())


@pytest.fixture(scope="module")
def browser():
    """Playwright's Chromium: the system one, as ``scripts/mlflow_screenshot.py`` drives it."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python drives Chromium here")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                      args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    """A page in a fresh profile (nothing remembered: a person's first visit), 1600x1000."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    context.set_default_timeout(90_000)  # a cold UI on two busy cores
    expect.set_options(timeout=90_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def _printed(search, ui: str) -> tuple[str, str]:
    """The runs table's and the search run's URLs as the end of a search prints them."""
    lines = browse_hint(ui, search.experiment_id, parent_run_id=search.parent_run_id)
    assert [line.split(":")[0].strip() for line in lines] == ["Browse trials", "search run"], lines
    return lines[0].split()[-1], lines[1].split()[-1]


def _current_tab(page, name: str):
    """The side navigation's link to the screen shown (MLflow marks it ``aria-current``)."""
    return page.locator('a[aria-current="page"]').filter(has_text=re.compile(rf"^\s*{name}\s*$"))


@pytest.mark.timeout(600)
def test_the_printed_link_opens_the_runs_table_with_the_trials_figures(search, ui, page):
    from playwright.sync_api import expect

    shot = ARTIFACTS / "mlflow-ui.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    runs_link, _ = _printed(search, ui)
    page.goto(runs_link)
    matching = page.get_by_text(re.compile(r"^\s*\d+\s+matching runs?\s*$"))
    expect(matching).to_have_text(re.compile(r"\b8 matching runs\b"))  # the search and its 7 nested runs
    # The training-runs screens, not MLflow's GenAI ones (traces first, "Evaluation runs").
    assert "/runs" in page.url and "workflowType=machine_learning" in page.url
    expect(_current_tab(page, "Runs")).to_be_visible()
    expect(page.get_by_text("Evaluation runs", exact=True)).to_have_count(0)
    expect(page.get_by_text("autotune: trials, winner first").first).to_be_visible()
    # The winner marker and the trials' figures are columns a person sees without picking them.
    for column in ("metrics.`output_tok_s`", "metrics.`speedup`", "tags.`autotune.status`", "tags.`autotune.winner`"):
        expect(page.locator(f'[role="columnheader"][col-id="{column}"]')).to_be_in_viewport(ratio=1)
    # The winner heads the table, marked, though a faster run (that broke an SLO) exists; then the
    # other feasible runs, fastest first.
    by_trial = {r.trial_id: r.run_id for r in search.trial_runs()}
    rows = page.locator(".ag-center-cols-container [row-index]")
    expect(rows.nth(3)).to_be_visible()

    def row(index: int):
        return page.locator(f'.ag-center-cols-container [row-index="{index}"]')

    expect(row(0)).to_have_attribute("row-id", by_trial["a1b2_00001"])
    expect(row(0).locator('[col-id="tags.`autotune.winner`"]')).to_have_text("true")
    expect(row(0).locator('[col-id="metrics.`output_tok_s`"]')).to_have_text("1650")
    expect(row(0).locator('[col-id="metrics.`speedup`"]')).to_have_text("1.65")
    for index, trial in enumerate(("a1b2_00000", "a1b2_00002", "baseline_00000"), start=1):
        expect(row(index)).to_have_attribute("row-id", by_trial[trial])
        expect(row(index).locator('[col-id="tags.`autotune.winner`"]')).to_have_text("-")  # MLflow: no tag
    # Rounded where shown: 1730.7654 tok/s reads 1730.8, its speedup 1.731.
    fast = page.locator(f'.ag-center-cols-container [row-id="{by_trial["a1b2_00004"]}"]')
    expect(fast.locator('[col-id="metrics.`output_tok_s`"]')).to_have_text("1730.8")
    expect(fast.locator('[col-id="metrics.`speedup`"]')).to_have_text("1.731")
    # Durations are the trials' own (15 s each), not the instant their results were logged.
    duration = page.locator('[role="columnheader"]').filter(has_text=re.compile(r"^\s*Duration\s*$")).first
    column = duration.get_attribute("col-id")
    for trial in ("a1b2_00001", "a1b2_00000", "baseline_00000"):
        cell = page.locator(f'[row-id="{by_trial[trial]}"] [col-id="{column}"]').first
        expect(cell).to_have_text(re.compile(r"^\s*15(\.0)?\s*s\s*$"))
    page.screenshot(path=shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@pytest.mark.timeout(600)
def test_the_printed_search_run_link_opens_under_runs_not_evaluations(search, ui, page):
    """MLflow 3.17 titles a run "Evaluations" in its GenAI screens, which it shows unless the URL
    (or the browser's remembered toggle) says otherwise; the printed link says otherwise. Its own
    links (a run's name in the table) do not: the docs say so, and the second half pins it."""
    from playwright.sync_api import expect

    runs_link, search_link = _printed(search, ui)
    parent = search.client.get_run(search.parent_run_id).info.run_name
    page.goto(search_link)
    expect(page.get_by_text(search.parent_run_id, exact=True).first).to_be_visible()
    expect(page.get_by_text(re.compile(r"^Metrics \(\d+\)$")).first).to_be_visible()
    expect(page.get_by_text(parent, exact=True).first).to_be_visible()  # the page title: rendered
    # Its description is the top of its summary.md, rendered as markdown.
    expect(page.get_by_text("5 trials: 3 feasible, 1 infeasible, 1 failed.").first).to_be_visible()
    expect(page.get_by_text("Finalists", exact=True)).to_have_count(0)  # the summary's sections stay in summary.md
    expect(_current_tab(page, "Runs")).to_be_visible()
    expect(page.get_by_text("Evaluations", exact=True)).to_have_count(0)
    expect(page.get_by_text("Evaluation runs", exact=True)).to_have_count(0)
    # From the runs table, MLflow's own link to the same run drops workflowType: GenAI screens again.
    page.goto(runs_link)
    page.get_by_role("link", name=parent[:20]).first.click()
    expect(page.get_by_text(search.parent_run_id, exact=True).first).to_be_visible()
    assert "workflowType" not in page.url, page.url
    expect(page.get_by_text("Evaluations", exact=True).first).to_be_visible()


@pytest.mark.timeout(600)
def test_trial_page_shows_its_metrics_params_and_status(search, ui, page):
    from playwright.sync_api import expect

    winner = next(r for r in search.trial_runs() if r.trial_id == "a1b2_00001")
    shot = ARTIFACTS / "mlflow-ui-run.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    page.set_viewport_size({"width": 1600, "height": 2400})  # tall enough for the metrics table
    page.goto(run_url(ui, search.experiment_id, winner.run_id))
    expect(page.get_by_text(re.compile(r"^Metrics \(\d+\)$")).first).to_be_visible()
    expect(page.get_by_text("speculative_num_steps", exact=True).first).to_be_visible()
    expect(page.get_by_text("autotune.status").first).to_be_visible()
    text = _shown(page)
    assert re.search(r"output_tok_s 1650\b", text), text[:3000]
    assert re.search(r"speedup 1\.65\b", text) and re.search(r"accept_length 3\.2\b", text)
    assert re.search(r"speculative_num_steps 5\b", text)
    assert "feasible" in text and "accept_length 0" not in text
    page.screenshot(path=shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(600)
def test_failed_trial_page_shows_the_reason(search, ui, page):
    from playwright.sync_api import expect

    run = next(r for r in search.trial_runs() if r.trial_id == "a1b2_00009")
    page.goto(run_url(ui, search.experiment_id, run.run_id))
    expect(page.get_by_text(re.compile(r"^Metrics \(\d+\)$")).first).to_be_visible()
    expect(page.get_by_text("out of memory at start-up").first).to_be_visible()
    assert not re.search(r"\boutput_tok_s \d", _shown(page))  # never measured: not shown as a number


def test_a_search_tracks_through_the_tracking_server_and_exports_from_it(ui, capsys):
    """The same server as a tracking URI: runs, artifacts (proxied) and export over HTTP."""
    from autotune.cli.export import main as export_main
    from autotune.export import launch_command as export

    tr = Tracker("via-http", tracking_uri=ui).connect()
    tr.start_search(backend="sim")
    tr.log_trial("base", result({}, 1000.0))
    run_id = tr.log_trial("t", result(eagle(4, 1), 1400.0))
    assert tr.log_trial("t", result(eagle(4, 1), 1410.0)) == run_id
    summary = tr.finish_search(winner_files=export.winner_files)
    assert summary.winner.run.run_id == run_id and summary.export_error is None
    assert {a.path for a in tr.client.list_artifacts(run_id)} >= {"launch.json", "phases.png"}
    assert export_main(["--name", "via-http", "--tracking-uri", ui, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert '"trial_id": "t"' in out.out and "1410.0 output tok/s" in out.err
    assert "View run" not in out.out and "View experiment" not in out.out  # MLflow's own prints
