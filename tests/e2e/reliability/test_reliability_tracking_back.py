"""MLflow comes back while a search that started without it runs: the search writes it all itself.

A real search (the CLI as a subprocess, real Ray, real emulator servers) starts with
``--tracking-uri http://127.0.0.1:PORT`` where nothing listens. Once its first trial's result is
in its spool, a real ``mlflow server`` is started on that port. Required, with no ``autotune sync``:
the search's own replay writes everything, in order and once (one search run, holding the space
file and the workload; every Ray trial one FINISHED trial run with Ray's value; nothing RUNNING; no
duplicate), it starts at a trial's result before the search's end, and the summary reports
nothing unsynced and prints no sync hint. Two console lines about tracking: unreachable, then
answers again.

The driver is paused (SIGSTOP, that one process) from the first spooled result until the server
answers and the driver's retry pause has passed, then let go (SIGCONT): the results that arrive
after that are certainly handled with MLflow up, however slowly the server starts on a loaded box.
Ray's trials go on meanwhile; only the driver's handling of them waits.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.reliability import record
from tests.e2e.reliability.mlflow_server import MlflowServer
from tests.e2e.reliability.procs import new_token, wait_until
from tests.e2e.reliability.tracking import ANSWERED, ROW, answered_again, check, clean, format_facts, start_search

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _spooled_trials(folder: Path) -> int:
    """Trial results in the search's spool so far (the spool file read as the driver wrote it)."""
    from autotune.tracking.spool import Spool

    return sum(1 for r in Spool(folder).records() if r.op == "trial")


def test_server_down_from_the_start_comes_back_mid_search(tmp_path: Path) -> None:
    from autotune.tracking.durable import RETRY_AFTER_S, TAG_SPOOL_ID
    from autotune.tracking.spool import Spool

    token = new_token("mlflow-back")
    # Four trials, two at a time: at most two results are handled before the pause, so at least
    # two come after it, and the first of those finds MLflow up with the last still to come.
    trials = 4
    server = MlflowServer(tmp_path / "mlflow-server")  # its port: nothing listens there yet
    _, search, log, driver = start_search(tmp_path, "mlflow-back", token, "--tracking-uri", server.url,
                                          trials=trials, start_s=0.5)
    paused_at = None
    try:
        folder = lambda: (search.run_dirs() or [tmp_path / "none"])[-1] / "tracking"  # noqa: E731
        assert wait_until(lambda: _spooled_trials(folder()) >= 1 or driver.poll() is not None,
                          timeout_s=300, poll_s=0.05)
        assert driver.poll() is None, log.read_text(errors="replace")[-3000:]
        os.kill(driver.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        spooled_when_down = _spooled_trials(folder())
        server.start()
        # The driver replays at a result once RETRY_AFTER_S have passed since its last try (made
        # at or before the pause): the condition its own code checks, not a guess at timing.
        wait_until(lambda: time.monotonic() - paused_at > RETRY_AFTER_S, timeout_s=RETRY_AFTER_S + 1)
        paused_s = time.monotonic() - paused_at
        os.kill(driver.pid, signal.SIGCONT)
        paused_at = None
        rc = driver.wait(timeout=400)
    finally:
        if paused_at is not None and driver.poll() is None:
            os.kill(driver.pid, signal.SIGCONT)
        if driver.poll() is None:
            driver.kill()
    try:
        console = log.read_text(errors="replace")
        lines = console.splitlines()
        said = [(i, ln) for i, ln in enumerate(lines) if ln.startswith("tracking:")]
        back_at = answered_again(lines)
        row_lines = [i for i, ln in enumerate(lines) if ROW.match(ln)]
        summary = json.loads((tmp_path / "s.json").read_text())
        spool = Spool(folder())
        records = spool.records()
        facts = check(search, server.url, token, console, trials)
        tracker = search.tracker(server.url)
        parents = tracker.parent_runs()
        parent = parents[0] if parents else None
        space_files = ([a.path for a in tracker.client.list_artifacts(parent.info.run_id, "space")]
                       if parent else [])
        written = ANSWERED.match(lines[back_at]) if back_at is not None else None
    finally:
        server.kill()
    facts.update({
        "exit code": rc, "unsynced at the end": summary.get("tracking_unsynced"),
        "results spooled while down (trials, baselines)": spooled_when_down,
        "driver paused while the server started (s)": round(paused_s, 1),
        "console lines about tracking": [ln.split(";")[0] for _, ln in said],
        "records written when it answered": int(written.group(1)) if written else None,
        "result rows before it answered": (sum(1 for i in row_lines if i < back_at)
                                           if back_at is not None else None),
        # No line of the summary's for records MLflow lacks (console._print_unsynced).
        "summary says nothing waits": "does not hold" not in console and "Sync them when it answers" not in console,
        "records left pending": len(spool.pending()), "records spooled": len(records),
        "search run is the spooled one": bool(parent) and records[0].op == "start"
        and parent.data.tags.get(TAG_SPOOL_ID) == records[0].data.get("spool_id"),
        "space file and workload on the search run": bool(space_files) and bool(parent.inputs.dataset_inputs),
        "winner tagged": bool(parent) and bool(parent.data.tags.get("autotune.winner_run_id")),
        "search.json names the run": bool(parent) and (spool.header() or {}).get("parent_run_id")
        == parent.info.run_id,
    })
    replayed_mid_search = (facts["result rows before it answered"] is not None
                           and facts["result rows before it answered"] < trials)
    ok = (clean(facts) and rc == 0 and facts["unsynced at the end"] == 0
          and facts["summary says nothing waits"] and len(said) == 2 and "unreachable" in said[0][1]
          and back_at == said[1][0] and replayed_mid_search
          and facts["records left pending"] == 0 and facts["search run is the spooled one"]
          and facts["space file and workload on the search run"] and facts["winner tagged"]
          and facts["search.json names the run"] and spooled_when_down >= 1)
    record.record("tracking", "MLflow unreachable from the start, back mid-search (no sync)", ok=ok, **facts)
    assert rc == 0, console[-3000:]
    assert clean(facts), format_facts(facts)
    assert facts["unsynced at the end"] == 0 and facts["summary says nothing waits"], console[-3000:]
    # One line when it was unreachable, one when it answered again, and the replay came with a
    # trial's result while trials were still to come, not only with the search's end.
    assert len(said) == 2 and "unreachable" in said[0][1] and back_at == said[1][0], said
    assert replayed_mid_search, format_facts(facts) + "\n" + console[-3000:]
    assert facts["records left pending"] == 0 and facts["search.json names the run"], format_facts(facts)
    assert facts["search run is the spooled one"] and facts["space file and workload on the search run"], \
        format_facts(facts)
    assert facts["winner tagged"], format_facts(facts)
