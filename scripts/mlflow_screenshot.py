"""Screenshots of a finished MLflow store in the real MLflow UI (``mlflow ui`` and headless Chromium).

``python scripts/mlflow_screenshot.py --store DIR_OR_DB [--experiment NAME] --out DIR [--port 0]``

DIR_OR_DB is a folder holding ``mlflow.db`` (and optionally its artifact tree ``mlruns/artifacts`` or
``artifacts``), as unpacked from a GPU call's ``results.tar.gz`` and ``mlruns.tar.gz``, or the file itself.
The store is never written: ``mlflow ui`` serves a temporary copy, whose artifact locations (paths on the GPU
machine) point at the local tree. Playwright drives the system Chromium (Debian's ``chromium``) to shoot the
runs table with nested runs expanded, the parent run and one child run. Exit status: 0 shots taken and the
UI's run count equals the REST API's, 1 they differ, 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autotune.errors import ConfigError  # noqa: E402
from autotune.tracking.store_copy import find_db, relocated_copy  # noqa: E402
from autotune.tracking.ui_links import WORKFLOW, run_url  # noqa: E402

START_DEADLINE_S = 120.0  # mlflow ui answers after ~15 s on an idle 2-core box
RENDER_TIMEOUT_MS = 60_000
PARENT_TAG = "mlflow.parentRunId"
# MLflow 3.17's UI: where the runs table keeps its state, its run-name column, a row's expand button.
UI_STATE_KEY = 'MLflowLocalStorage-1.1-ExperimentPage-["{}"]-ReactComponentState'
RUN_NAME_COL = "attributes.`Run Name`"
EXPANDER = 'button[data-component-id$="runnamecellrenderer.tsx_46"]'
ROW = '.ag-center-cols-container [row-id="{}"]'
DEFAULT_COLUMNS = ("metrics.output_tok_s,metrics.speedup,metrics.accept_length,tags.autotune.status,"
                   "tags.autotune.winner")
ORDER_BY = "metrics.`rank`"  # the winner first (autotune.tracking.ui_links.ORDER_BY), where runs have it


class UsageError(Exception):
    """Bad input; the message says what is wrong and what would be right."""


def find_chromium(*, explicit: str | None) -> str:
    """A Chromium binary: ``explicit``, else ``$CHROMIUM``, else ``chromium``/``chromium-browser`` on PATH."""
    for name in (explicit,) if explicit else (os.environ.get("CHROMIUM"), "chromium", "chromium-browser"):
        if name and (path := shutil.which(name)):
            return path
    raise UsageError(f"Chromium not found{f' at {explicit!r}' if explicit else ' on PATH'}: install Debian's "
                     "(apt-get install -y chromium) or pass --chromium /path/to/chromium")


@contextlib.contextmanager
def mlflow_ui(*, db: Path, port: int, workdir: Path) -> Iterator[str]:
    """Run ``mlflow ui`` on ``db`` and ``port`` (0: a free one) in its own process group, from ``workdir``.

    Yields:
        The base URL, once ``/health`` answers; the group is ended on the way out.
    """
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", f"sqlite:///{db.resolve()}",
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log_path = workdir / "mlflow-ui.log"

    # MLflow's job runner (a huey consumer per job kind, each importing MLflow) serves GenAI jobs a
    # screenshot never needs, and costs several CPU-seconds on a 2-core box.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}

    def start() -> subprocess.Popen:
        with open(log_path, "wb") as log:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=workdir, env=env, start_new_session=True,
                                    preexec_fn=_die_with_parent)

    proc, url = start(), f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            if proc.poll() is not None and "--workers" in cmd and "No such option" in log_path.read_text():
                cmd = cmd[:-2]  # an MLflow without --workers: start again without it
                proc = start()
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow ui exited with {proc.returncode} before answering; its log:\n"
                                   + log_path.read_text(errors="replace")[-3000:])
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow ui did not answer {url}/health within {START_DEADLINE_S:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        end_group(proc=proc)


def _die_with_parent() -> None:
    """In the ``mlflow ui`` child, before exec: SIGTERM it when this script dies, even by SIGKILL
    (a caller's timeout), which the ``finally`` that ends its group cannot see; MLflow forwards the
    signal to its uvicorn. Linux only; elsewhere the ``finally`` is all there is."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def end_group(*, proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the process group that ``proc`` leads (uvicorn, MLflow's job runners), then SIGKILL it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader, so that only live members keep the group
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def api(*, url: str, endpoint: str, body: dict) -> dict:
    """POST ``body`` to MLflow's REST ``endpoint`` (``experiments/search``...); the JSON answer."""
    answer = httpx.post(f"{url}/api/2.0/mlflow/{endpoint}", json=body, timeout=30)
    answer.raise_for_status()
    return answer.json()


def pick_experiment(*, url: str, name: str | None) -> tuple[dict, list[dict]]:
    """The experiment called ``name`` (None: the one with most runs but "Default") and its active runs."""
    experiments = api(url=url, endpoint="experiments/search", body={"max_results": 1000}).get("experiments", [])
    chosen = [e for e in experiments if (e["name"] == name if name is not None else e["name"] != "Default")]
    if not chosen:
        raise UsageError(f"no experiment named {name!r} in the store; --experiment must be one of: "
                         + ", ".join(repr(e["name"]) for e in experiments) if name is not None else
                         "the store has no experiment but 'Default': nothing to show")
    found = []
    for exp in chosen:
        runs: list[dict[str, Any]] = []
        token: str | None = None
        while token != "":
            page = api(url=url, endpoint="runs/search", body={"experiment_ids": [exp["experiment_id"]],
                       "max_results": 1000, **({"page_token": token} if token else {})})
            runs, token = runs + page.get("runs", []), page.get("next_page_token", "")
        found.append((exp, runs))
    return max(found, key=lambda pair: len(pair[1]))


def tags(run: dict) -> dict[str, str]:
    """A REST run's tags as a dict."""
    return {t["key"]: t.get("value", "") for t in run.get("data", {}).get("tags", [])}


def children_of(runs: list[dict]) -> dict[str, list[dict]]:
    """Each parent run's id with its child runs."""
    children: dict[str, list[dict]] = {}
    for run in runs:
        if parent := tags(run).get(PARENT_TAG):
            children.setdefault(parent, []).append(run)
    return children


def shoot(*, chromium: str, url: str, exp_id: str, runs: list[dict], columns: str, pages: list[dict],
          out: Path) -> tuple[int, int, list[tuple[str, Path]]]:
    """Screenshot the runs table, then the page of each run in ``pages``.

    Args:
        chromium: The browser binary that Playwright launches.
        url: The UI's base URL.
        exp_id: The experiment to show.
        runs: Its runs (REST API); every parent among them is shown expanded.
        columns: ``kind.key`` columns for the table, comma-separated; those no run has are left out.
        pages: The runs whose pages to shoot: parent, then child (``mlflow-{parent,child}-run.png``).
        out: The folder for the PNGs.

    Returns:
        The run count the UI prints under the table, the rows it rendered, and ``(url, png)`` per shot.
    """
    from playwright.sync_api import sync_playwright

    children = children_of(runs)
    present = {f"{kind}.{item['key']}" for run in runs for kind in ("metrics", "params", "tags")
               for item in run.get("data", {}).get(kind, [])}
    state = {"selectedColumns": ["{}.`{}`".format(*c.split(".", 1)) for c in columns.split(",") if c in present],
             "runsExpanded": dict.fromkeys(children, True), "columnOrder": [RUN_NAME_COL],
             "columnWidths": {RUN_NAME_COL: 520},
             **({"orderByKey": ORDER_BY, "orderByAsc": True} if "metrics.rank" in present else {})}
    init = (f"localStorage.setItem({json.dumps(UI_STATE_KEY.format(exp_id))}, {json.dumps(json.dumps(state))});"
            "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');"
            "localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');")  # no chat panel over the page
    shots: list[tuple[str, Path]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            context = browser.new_context(viewport={"width": 1800, "height": min(4000, 700 + 30 * len(runs))})
            context.add_init_script(init)
            context.set_default_timeout(RENDER_TIMEOUT_MS)
            page = context.new_page()
            page.goto(link := f"{url}/#/experiments/{exp_id}/runs?{WORKFLOW}")  # its columns: the state above
            (matching := page.get_by_text(re.compile(r"^\s*\d+\s+matching runs?\s*$"))).wait_for()
            page.locator(f'[role="gridcell"][col-id="{RUN_NAME_COL}"]').first.wait_for()
            for _ in children:  # should the saved state not have expanded a parent, click its button
                shut = [p for p, kids in children.items() if page.locator(ROW.format(p)).count()
                        and not page.locator(ROW.format(kids[0]["info"]["run_id"])).count()]
                if not shut:
                    break
                page.locator(f'[row-id="{shut[0]}"] {EXPANDER}').first.click()
                page.locator(ROW.format(children[shut[0]][0]["info"]["run_id"])).wait_for()
            for run in pages:  # proof that the table rendered: the runs to be shown have rows, with names
                page.locator(ROW.format(run["info"]["run_id"])).wait_for()
                if name := tags(run).get("mlflow.runName"):
                    page.get_by_text(name[:20]).first.wait_for()
            counted = re.search(r"\d+", matching.inner_text())
            if counted is None:
                raise RuntimeError(f"no run count in the UI's text {matching.inner_text()!r}")
            ui_count = int(counted.group())
            rows = len({r.get_attribute("row-id") for r in page.locator(ROW.replace('="{}"', "")).all()})
            page.screenshot(path=out / "mlflow-experiment.png")
            shots.append((link, out / "mlflow-experiment.png"))
            page.set_viewport_size({"width": 1800, "height": 1600})
            for run, png in zip(pages, ("mlflow-parent-run.png", "mlflow-child-run.png"), strict=False):
                page.goto(link := run_url(url, exp_id, run["info"]["run_id"]))
                page.get_by_text(run["info"]["run_id"], exact=True).first.wait_for()
                page.get_by_text(re.compile(r"^(Metrics|Parameters) \(\d+\)$")).first.wait_for()
                page.screenshot(path=out / png)
                shots.append((link, out / png))
        finally:
            browser.close()
    return ui_count, rows, shots


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG, from its header."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise RuntimeError(f"{path} is not a PNG")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 agree, 1 the run counts differ, 2 bad input)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, type=Path, help="folder holding mlflow.db, or mlflow.db")
    ap.add_argument("--experiment", help="experiment name (default: the one with most runs, not 'Default')")
    ap.add_argument("--out", required=True, type=Path, help="folder for the PNGs")
    ap.add_argument("--port", type=int, default=0, help="port for mlflow ui (0: a free one)")
    ap.add_argument("--chromium", help="Chromium binary (default: $CHROMIUM, then chromium on PATH)")
    ap.add_argument("--columns", default=DEFAULT_COLUMNS, help="table columns, kind.key (those that exist)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the finally blocks end the UI
    try:
        db, chromium = find_db(store=args.store), find_chromium(explicit=args.chromium)
        try:
            import playwright.sync_api  # noqa: F401 - checked before the UI starts
        except ImportError as exc:
            raise UsageError("Playwright for Python is not installed: run make venv (or pip install "
                             "playwright); it drives the system Chromium, no browser download") from exc
        args.out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="mlflow-screenshot-") as tmp:
            copy = relocated_copy(db=db, into=Path(tmp))
            with mlflow_ui(db=copy, port=args.port, workdir=Path(tmp)) as url:
                exp, runs = pick_experiment(url=url, name=args.experiment)
                children = children_of(runs)
                parents = [r for r in runs if PARENT_TAG not in tags(r) and r["info"]["run_id"] in children]
                parent = max(parents, key=lambda r: len(children[r["info"]["run_id"]]), default=None)
                kids = children[parent["info"]["run_id"]] if parent else []
                print(f"experiment {exp['name']!r} id {exp['experiment_id']}: {len(runs)} runs (REST API); parent "
                      f"run {parent['info']['run_id'] if parent else 'none'} with {len(kids)} child runs")
                ui_count, rows, shots = shoot(chromium=chromium, url=url, exp_id=exp["experiment_id"], runs=runs,
                                              columns=args.columns, pages=([parent] if parent else []) + kids[:1],
                                              out=args.out)
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the UI's group is ended by now (mlflow_ui's finally)
        print("interrupted; mlflow ui stopped", file=sys.stderr)
        return 130
    for link, png in shots:
        print("shot {} -> {} ({}x{} px)".format(link, png, *png_size(png)))
    agree = ui_count == len(runs)
    print(f"runs: the UI table says {ui_count} matching runs ({rows} rows rendered), the REST API {len(runs)}"
          + ("" if agree else ": MISMATCH"))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
