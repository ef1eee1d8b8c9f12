"""Tracking faults on real processes: a real ``mlflow server`` killed while a search runs.

Each search is the CLI as a subprocess with ``--tracking-uri`` on a real ``mlflow server`` (its
own process group, killed by that group's id). Afterwards, every case asserts the same things:
no result is lost (each Ray trial has one MLflow trial run with Ray's measured value, and one
COMPLETE Optuna trial with Ray's params and verdict), no trial
ran twice (one report per Ray trial), no duplicates, no run left RUNNING, no orphan process, and
no traceback on the console.

1. The server is killed after the first trial and started again while the search runs: the
   search spools what it cannot write, says so in one line, and writes it when the server
   answers again, with a trial's result before the last; nothing is left unsynced at its end.
   The driver is paused (SIGSTOP) while the server restarts, so that results are certainly still
   to come when it is back, however slowly it starts.
2. Nothing answers at the tracking URI for the whole search, from its first second: the search
   runs, says so in one line (where its results wait, the sync command) and exits 0; the spool
   holds everything from the search run's start to its end. A real server then started on that
   port gets it all from ``autotune sync``: the experiment, the search run, its trial runs nested
   under it, each once, all FINISHED; a second sync writes nothing.
3. The server is killed once the search run is open and stays down to the end: the search
   finishes, its summary says how many records wait and the command that syncs them; after a
   restart that command writes them all, and running it again writes nothing twice.
4. The disk of the MLflow store (sqlite on a 16 MiB tmpfs) fills up once the search run is open:
   the same as 3, with the kernel's ENOSPC ("database or disk is full"); synced once space is freed.
5. The driver is SIGKILLed while it waits on an MLflow write (the server is frozen with SIGSTOP
   before the first trial ends, so that write is certainly in flight): ``--resume`` replays the
   spooled records and finishes; every result printed before the kill is in MLflow.
6. A Ray worker node is removed mid-trial (``ray.cluster_utils.Cluster``, its raylet and
   processes killed at once): Ray runs the trial again elsewhere as attempt 2, attempt 1 is kept.

A server down from the start that comes back while the search runs is
``test_reliability_tracking_back.py``; the checks every case shares are ``reliability/tracking.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.e2e.reliability import record
from tests.e2e.reliability.mlflow_server import MlflowServer
from tests.e2e.reliability.procs import new_token, wait_until
from tests.e2e.reliability.searchrun import cli_env, start_cli
from tests.e2e.reliability.tracking import ROW, answered_again, check, clean, format_facts, rows, start_search

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: Each emulator server's start-up in cases 1-5. What they break is MLflow, not a server: every wait
#: below is for an event (a result row, a line, the driver paused), never for a server still starting,
#: so the servers start about as fast as the tiny profile's own 0.3 s (the fault space's default
#: 2 s only made each search longer: about 7 s a search of 3 trials and its finalist).
START_S = 0.5

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """One real tracking server for the module; each case kills and restarts it."""
    srv = MlflowServer(tmp_path_factory.mktemp("mlflow-server")).start()
    yield srv
    srv.kill()


def test_server_killed_and_restarted_mid_search(tmp_path: Path, server: MlflowServer) -> None:
    from autotune.tracking.durable import RETRY_AFTER_S

    token = new_token("mlflow-restart")
    trials = 6
    _, search, log, driver = start_search(tmp_path, "mlflow-restart", token, "--tracking-uri", server.url,
                                          trials=trials, start_s=START_S)
    paused = False
    try:
        assert wait_until(lambda: rows(log) >= 1 or driver.poll() is not None, timeout_s=240, poll_s=0.2)
        assert driver.poll() is None, log.read_text(errors="replace")[-3000:]
        server.kill()
        rows_at_kill = rows(log)
        # At least one trial ends while the server is down: its result can only go to the spool.
        assert wait_until(lambda: rows(log) > rows_at_kill or driver.poll() is not None, timeout_s=120,
                          poll_s=0.05)
        # The driver waits (SIGSTOP, that process only) while the server restarts, which took from
        # 20 s to longer than the whole search on two loaded cores, and until its retry pause has
        # passed: so results still to come are certainly handled with the server back.
        os.kill(driver.pid, signal.SIGSTOP)
        paused, paused_at = True, time.monotonic()
        rows_down = rows(log)
        server.start()
        wait_until(lambda: time.monotonic() - paused_at > RETRY_AFTER_S, timeout_s=RETRY_AFTER_S + 1)
        rows_back = rows(log)
        os.kill(driver.pid, signal.SIGCONT)
        paused = False
        rc = driver.wait(timeout=400)
    finally:
        if paused and driver.poll() is None:
            os.kill(driver.pid, signal.SIGCONT)
        if driver.poll() is None:
            driver.kill()
    console = log.read_text(errors="replace")
    lines = console.splitlines()
    back_at = answered_again(lines)
    summary = json.loads((tmp_path / "s.json").read_text())
    facts = check(search, server.url, token, console, trials)
    errors_log = next(search.ray_root.glob("run-*/tracking/tracking-errors.log"), None)
    facts.update({"exit code": rc, "trials done at kill": rows_at_kill,
                  "trials done while down": rows_down - rows_at_kill, "trials done when back": rows_back,
                  "result rows before it answered": (sum(1 for ln in lines[:back_at] if ROW.match(ln))
                                                     if back_at is not None else None),
                  "unsynced at the end": summary.get("tracking_unsynced"),
                  "one line named the log": bool(errors_log) and str(errors_log) in console,
                  "said it answers again": back_at is not None})
    # Replayed with a trial's result while trials were still to come, not only at the search's end.
    mid_search = facts["said it answers again"] and facts["result rows before it answered"] < trials
    ok = (clean(facts) and rc == 0 and facts["unsynced at the end"] == 0 and facts["one line named the log"]
          and mid_search and rows_down > rows_at_kill and rows_back < trials)
    record.record("tracking", "MLflow server killed and restarted mid-search", ok=ok, **facts)
    assert rc == 0, console[-3000:]
    assert rows_down > rows_at_kill and rows_back < trials, format_facts(facts)
    assert clean(facts), format_facts(facts)
    assert facts["unsynced at the end"] == 0 and mid_search, format_facts(facts) + "\n" + console[-3000:]
    assert facts["one line named the log"] and "Traceback" in errors_log.read_text(), console[-3000:]


def test_server_unreachable_from_the_start_then_synced(tmp_path: Path) -> None:
    from autotune.tracking.durable import TAG_SPOOL_ID
    from autotune.tracking.spool import Spool

    token = new_token("mlflow-never")
    trials = 3
    # A port nothing listens on for the whole search; the server is started there only afterwards.
    server = MlflowServer(tmp_path / "mlflow-server")
    _, search, log, driver = start_search(tmp_path, "mlflow-never", token, "--tracking-uri", server.url,
                                          trials=trials, start_s=START_S)
    try:
        rc = driver.wait(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
    console = log.read_text(errors="replace")
    spool = Spool(search.run_dirs()[-1] / "tracking")
    records = spool.records()
    said = [ln for ln in console.splitlines() if ln.startswith("tracking:")]
    unsynced = json.loads((tmp_path / "s.json").read_text()).get("tracking_unsynced")
    hint = re.search(r"Sync them when it answers:\s+(autotune sync .+)$", console, re.MULTILINE)
    ops = [r.op for r in records]
    try:
        assert rc == 0 and hint, console[-3000:]
        # One line says MLflow is unreachable, where the results wait and the command that syncs them.
        assert len(said) == 1 and "unreachable" in said[0] and str(spool.path) in said[0], said
        assert hint.group(1) in said[0], (said, hint.group(1))
        assert ops[0] == "start" and ops[-1] == "finish" and ops.count("trial") >= trials, ops
        assert unsynced == len(records) == len(spool.pending()), (unsynced, ops)
        assert (spool.header() or {}).get("parent_run_id") is None, spool.header()
        server.start()
        first = _sync(hint.group(1), tmp_path, token)
        again = _sync(hint.group(1), tmp_path, token)
        facts = check(search, server.url, token, console + first.stdout + first.stderr, trials)
        tracker = search.tracker(server.url)
        parents = tracker.parent_runs()
        tags = parents[0].data.tags if parents else {}
        inputs = parents[0].inputs.dataset_inputs if parents else []
        space_files = ([a.path for a in tracker.client.list_artifacts(parents[0].info.run_id, "space")]
                       if parents else [])
    finally:
        server.kill()
    facts.update({"exit code": rc, "unsynced at the end": unsynced, "sync exit code": first.returncode,
                  "second sync exit code": again.returncode, "second sync wrote": again.stderr.strip(),
                  "console lines about tracking": len(said), "records spooled": len(records),
                  "winner tagged after sync": bool(tags.get("autotune.winner_run_id")),
                  "search run is the spooled one": tags.get(TAG_SPOOL_ID) == records[0].data.get("spool_id"),
                  "space file and workload on the search run": bool(space_files) and bool(inputs)})
    ok = (clean(facts) and first.returncode == 0 and again.returncode == 0 and "written" not in again.stderr
          and facts["winner tagged after sync"] and facts["search run is the spooled one"]
          and facts["space file and workload on the search run"])
    record.record("tracking", "MLflow unreachable for the whole search (from the start), then synced", ok=ok,
                  **facts)
    assert first.returncode == 0, first.stdout + first.stderr
    assert again.returncode == 0 and "written" not in again.stderr, again.stdout + again.stderr
    assert clean(facts), format_facts(facts)
    assert facts["winner tagged after sync"] and facts["search run is the spooled one"], format_facts(facts)
    assert facts["space file and workload on the search run"], format_facts(facts)
    assert (Spool(spool.folder).header() or {}).get("parent_run_id") == parents[0].info.run_id


def test_server_killed_once_the_search_run_is_open_then_synced(tmp_path: Path, server: MlflowServer) -> None:
    token = new_token("mlflow-down")
    trials = 3
    _, search, log, driver = start_search(tmp_path, "mlflow-down", token, "--tracking-uri", server.url,
                                          trials=trials, start_s=START_S)
    rc, console, unsynced, hint, _ = _break_mid_search(tmp_path, log, driver, server.kill)
    assert rc == 0 and unsynced and hint, console[-3000:]
    server.start()
    first = _sync(hint.group(1), tmp_path, token)
    again = _sync(hint.group(1), tmp_path, token)
    facts = check(search, server.url, token, console + first.stdout + first.stderr, trials)
    winner = search.tracker(server.url).parent_runs()[0].data.tags.get("autotune.winner_run_id")
    facts.update({"exit code": rc, "unsynced at the end": unsynced, "sync exit code": first.returncode,
                  "second sync exit code": again.returncode, "second sync wrote": again.stderr.strip(),
                  "winner tagged after sync": bool(winner)})
    ok = (clean(facts) and first.returncode == 0 and again.returncode == 0 and bool(winner)
          and "written" not in again.stderr)
    record.record("tracking", "MLflow killed once the search run is open, down to the end, then synced",
                  ok=ok, **facts)
    assert first.returncode == 0, first.stdout + first.stderr
    assert again.returncode == 0 and "written" not in again.stderr, again.stdout + again.stderr
    assert clean(facts), format_facts(facts)
    assert winner, "the search run has no winner tag after the sync"


def _printed(log: Path) -> dict[str, str]:
    """Trial id -> the tok/s its result row showed (as printed, one decimal)."""
    shown = {}
    for line in log.read_text(errors="replace").splitlines():
        m = ROW.match(line)
        words = line.split()
        status = next((i for i, w in enumerate(words) if w in ("feasible", "infeasible", "failed")), None)
        if m and status is not None:
            shown[m.group(1)] = words[status - 3]
    return shown


def _attempt_values(tracker, run_id: str, folder: Path) -> list[str]:
    """The output tok/s of every attempt a trial run keeps (``attempts/<n>/result.json``), as printed."""
    values = []
    for attempt in tracker.client.list_artifacts(run_id, "attempts"):
        for item in tracker.client.list_artifacts(run_id, attempt.path):
            if item.path.endswith("result.json"):
                local = tracker.client.download_artifacts(run_id, item.path, str(folder))
                tok_s = json.loads(Path(local).read_text()).get("output_tok_s")
                values.append("-" if tok_s is None else f"{tok_s:.1f}")
    return values


def _break_mid_search(tmp: Path, log: Path, driver: subprocess.Popen, break_store: Callable[[], Any],
                      ) -> tuple[int, str, int | None, re.Match[str] | None, Any]:
    """Break the store once the search has opened its run in MLflow (the warm-start line), then
    let the search finish: ``(exit code, console, records unsynced at the end, the summary's sync
    hint, what break_store returned)``."""
    try:
        # The search run is open once the warm-start line is printed (the header, the first line, is
        # printed before Ray starts and MLflow is opened: a break then was MLflow unreachable from the
        # start, case 2's path, and the open itself found it so).
        assert wait_until(lambda: "Warm start:" in log.read_text(errors="replace") or driver.poll() is not None,
                          timeout_s=240, poll_s=0.1)
        assert "unreachable" not in log.read_text(errors="replace"), log.read_text(errors="replace")
        broken = break_store()
        rc = driver.wait(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
    console = log.read_text(errors="replace")
    unsynced = json.loads((tmp / "s.json").read_text()).get("tracking_unsynced")
    hint = re.search(r"Sync them when it answers:\s+(autotune sync .+)$", console, re.MULTILINE)
    return rc, console, unsynced, hint, broken


def _sync(hint: str, root: Path, token: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "autotune", *hint.split()[1:]]
    return subprocess.run(argv, cwd=root, env=cli_env(token), capture_output=True, text=True, timeout=300)


def _fill(folder: Path) -> Path:
    """Fill the filesystem of ``folder`` to the last byte; returns the filler file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = 1 << 20
        while size:
            try:
                os.write(fd, b"\0" * size)
            except OSError:  # ENOSPC: try a smaller piece, down to one byte
                size //= 2
    finally:
        os.close(fd)
    return filler


def test_full_disk_under_the_store_then_synced(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(store)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip()}); "
                    "tests/unit/tracking/test_tracking_spool.py covers ENOSPC with /dev/full")
    try:
        token = new_token("mlflow-enospc")
        trials = 3
        uri = f"sqlite:///{store}/mlflow.db"
        from autotune.tracking.tracker import Tracker

        # The store's tables, made while there is room; artifacts beside the search, not in this cwd.
        Tracker("mlflow-enospc", tracking_uri=uri, artifact_root=f"file://{tmp_path}/artifacts").connect()
        _, search, log, driver = start_search(tmp_path, "mlflow-enospc", token, "--tracking-uri", uri,
                                              trials=trials, start_s=START_S)
        rc, console, unsynced, hint, filler = _break_mid_search(tmp_path, log, driver, lambda: _fill(store))
        full_said = "full" in console
        assert rc == 0 and unsynced and hint, console[-3000:]
        filler.unlink()
        synced = _sync(hint.group(1), tmp_path, token)
        facts = check(search, uri, token, console + synced.stdout + synced.stderr, trials)
        facts.update({"exit code": rc, "unsynced at the end": unsynced, "sync exit code": synced.returncode,
                      "console named the full disk": full_said})
        ok = clean(facts) and synced.returncode == 0 and full_said
        record.record("tracking", "disk of the MLflow store full (16 MiB tmpfs), then synced", ok=ok, **facts)
        assert synced.returncode == 0, synced.stdout + synced.stderr
        assert clean(facts), format_facts(facts)
        assert full_said, console[-3000:]
    finally:
        subprocess.run(["umount", "-l", str(store)], check=False)


def test_driver_killed_during_an_mlflow_write_then_resumed(tmp_path: Path, server: MlflowServer) -> None:
    from autotune.tracking.spool import Spool

    token = new_token("mlflow-sigkill")
    trials = 4
    path, search, log, driver = start_search(tmp_path, "mlflow-sigkill", token, "--tracking-uri", server.url,
                                             trials=trials, start_s=START_S, summary=False)
    try:
        # The search run is open once the warm-start line is printed (the first line comes before
        # MLflow is opened: pausing then made the open itself wait out MLflow's 30 s timeout and 2
        # retries); from then on the server hangs, so the first trial's write (spooled, its row
        # printed, then sent) waits on it until the kill.
        assert wait_until(lambda: "Warm start:" in log.read_text(errors="replace") or driver.poll() is not None,
                          timeout_s=240, poll_s=0.1)
        assert "unreachable" not in log.read_text(errors="replace"), log.read_text(errors="replace")
        server.pause()
        assert wait_until(lambda: rows(log) >= 1 or driver.poll() is not None, timeout_s=240, poll_s=0.05)
        time.sleep(0.5)
        shown = _printed(log)
        spool = Spool(search.run_dirs()[-1] / "tracking")
        in_flight = len(spool.pending())
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        server.resume()
        if driver.poll() is None:
            driver.kill()
    log2 = tmp_path / "resume.log"
    resumed = start_cli(path, "--resume", "--tracking-uri", server.url, "--summary-json", str(tmp_path / "s.json"),
                        root=tmp_path, token=token, log=log2)
    rc = resumed.wait(timeout=400)
    console = log.read_text(errors="replace") + log2.read_text(errors="replace")
    summary = json.loads((tmp_path / "s.json").read_text())
    facts = check(search, server.url, token, log2.read_text(errors="replace"), trials)
    # Every result the killed driver printed is in MLflow, as one of its trial's attempts (Ray
    # runs again a trial whose end it had not saved: that is a second attempt, not a replacement).
    tracker = search.tracker(server.url)
    runs = {r.trial_id: r for r in tracker.trial_runs(tracker.latest_parent_run_id())}
    missing = sorted(f"{tid} {v}" for tid, v in shown.items()
                     if tid not in runs or v not in _attempt_values(tracker, runs[tid].run_id, tmp_path / "dl"))
    facts.update({"records in flight at the kill": in_flight, "resume exit code": rc,
                  "results printed before the kill": len(shown), "printed results missing in MLflow": missing,
                  "unsynced at the end": summary.get("tracking_unsynced")})
    ok = (clean(facts, reruns=True) and rc == 0 and in_flight >= 1 and facts["unsynced at the end"] == 0
          and not missing)
    record.record("tracking", "driver SIGKILLed during an MLflow write, then resumed", ok=ok, **facts)
    assert in_flight >= 1, console[-3000:]
    assert rc == 0, console[-3000:]
    assert clean(facts, reruns=True), format_facts(facts, reruns=True)
    assert facts["unsynced at the end"] == 0, format_facts(facts, reruns=True)
    assert not missing and shown, format_facts(facts)


def test_a_worker_node_removed_mid_trial(tmp_path: Path) -> None:
    from tests.e2e.reliability.cluster import NodeSpec, start_cluster
    from tests.e2e.reliability.procs import servers_with_token

    token = new_token("node-lost")
    cluster = start_cluster(tmp_path / "locks", token,
                            nodes=(NodeSpec("head", 0, 1), NodeSpec("doomed", 2, 2), NodeSpec("spare", 2, 2)))
    try:
        trials = 4
        _, search, log, driver = start_search(tmp_path, "node-lost", token, "--address", cluster.address,
                                              trials=trials, start_s=2)
        doomed = str(cluster.lock_dir("doomed")).encode()

        def on_doomed() -> list[int]:
            found = []
            for proc in servers_with_token(token):
                try:
                    env = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if proc.is_server and b"AUTOTUNE_SIM_GPU_LOCK_DIR=" + doomed in env:
                    found.append(proc.pid)
            return found

        try:
            # A server starting (2 s, against the 0.1 s poll that finds it) on the doomed node: its
            # trial is in flight there when the node goes.
            assert wait_until(lambda: bool(on_doomed()) or driver.poll() is not None, timeout_s=240, poll_s=0.1)
            assert driver.poll() is None, log.read_text(errors="replace")[-3000:]
            victims = on_doomed()
            cluster.remove_node("doomed")
            rc = driver.wait(timeout=400)
        finally:
            if driver.poll() is None:
                driver.kill()
        console = log.read_text(errors="replace")
        facts = check(search, None, token, console, trials)
        tracker = search.tracker()
        retried = [r for r in tracker.trial_runs(tracker.latest_parent_run_id())
                   if r.kind == "trial" and r.tags.get("autotune.attempt") != "1"]
        kept = {r.trial_id: sorted(a.path for a in tracker.client.list_artifacts(r.run_id, "attempts/1"))
                for r in retried}
        facts.update({"exit code": rc, "servers on the removed node": len(victims),
                      "trials retried": [f"{r.trial_id} attempt {r.tags.get('autotune.attempt')}" for r in retried],
                      "lost attempt kept": all("attempts/1/lost.txt" in v for v in kept.values()),
                      "console said so": "Ray runs it again" in console})
        ok = (clean(facts, reruns=True) and rc == 0 and bool(retried) and facts["lost attempt kept"]
              and facts["console said so"])
        record.record("tracking", "a Ray worker node removed mid-trial", ok=ok, **facts)
        assert rc == 0, console[-3000:]
        assert clean(facts, reruns=True), format_facts(facts, reruns=True)
        assert retried and facts["lost attempt kept"] and facts["console said so"], format_facts(facts)
    finally:
        cluster.shutdown()
