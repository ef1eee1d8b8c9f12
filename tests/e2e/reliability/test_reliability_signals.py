"""Stop signals as a scheduler or a user sends them, on real processes (issue 36).

1. SIGTERM (what Slurm, Kubernetes and ``timeout`` send) to a search while trials run: the same
   clean stop as Ctrl-C (state saved, servers stopped, the MLflow search run KILLED with a
   ``finish`` record in its spool, one resume line, no Ray crash dump), exit 143; then
   ``--resume`` completes it.
2. SIGINT and SIGTERM while the embedded Ray is still starting: exit 130 / 143, a few lines and
   no traceback, and no process of the test's left within 15 s.
3. Ctrl-C of ``autotune trial`` while its server runs: exit 130, one line, no traceback, no server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.reliability import record
from tests.e2e.reliability.procs import (
    leftovers,
    new_token,
    processes_with_token,
    servers_with_token,
    wait_gone,
    wait_until,
)
from tests.e2e.reliability.searchrun import cli_env, start_cli
from tests.e2e.reliability.spaces import base_space, merged, write_space
from tests.e2e.reliability.tracking import rows, start_search

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: What Ray's native crash handler prints when a SIGTERM reaches it instead of ours.
CRASH_DUMP = ("SIGTERM received", "PC: @", "Traceback")
#: How long Ray's and the servers' processes may take to go after a stop while Ray starts.
GONE_S = 15.0


def _console(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def test_sigterm_mid_search_stops_like_ctrl_c_and_resumes(tmp_path: Path) -> None:
    token = new_token("sigterm")
    trials = 4  # two at a time, stopped at the first result with a server running: trials are left to resume
    _, search, log, driver = start_search(tmp_path, "sigterm", token, trials=trials, start_s=1.5, summary=False)
    assert wait_until(lambda: driver.poll() is not None or (rows(log) >= 1 and any(
        p.is_server for p in servers_with_token(token))), timeout_s=300, poll_s=0.2), _console(log)[-3000:]
    assert driver.poll() is None, _console(log)[-3000:]
    running = [p.pid for p in servers_with_token(token) if p.is_server]
    driver.send_signal(signal.SIGTERM)
    rc = driver.wait(timeout=240)
    still = wait_gone(running)
    left = leftovers(token, log_dir=search.ray_root, lock_dirs=[])
    text = _console(log)
    view = search.mlflow_view()
    parents = [s for _, s in view["parents"]]
    spool = next(search.ray_root.glob("run-*/tracking/spool.jsonl"))
    ops = [json.loads(line)["op"] for line in spool.read_text().splitlines() if line.startswith("{\"seq\"")]
    dumped = [w for w in CRASH_DUMP if w in text]
    ok = (rc == 143 and text.count("--resume") == 1 and not dumped and not still and left.count == 0
          and parents == ["KILLED"] and ops[-1] == "finish")
    record.record("interrupts", "SIGTERM mid-search (a scheduler's stop)", ok=ok, exit_code=rc,
                  resume_lines=text.count("--resume"), crash_dump=dumped, servers_left=len(still),
                  orphans=left.count, parent_run=parents, last_spool_record=ops[-1])
    assert rc == 143, text[-3000:]
    assert text.count("--resume") == 1 and not dumped, text[-3000:]
    assert not still and left.count == 0, left.describe()
    assert parents == ["KILLED"] and ops[-1] == "finish", (parents, ops)
    # The first line says what starts, before Ray does; the one resume command is the documented
    # one (README), and Ray Tune's own hint and checkpoint warnings are in the run folder, not here.
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines[0].startswith("Search 'sigterm': sim backend") and "starting an embedded Ray..." in lines[0], lines[:3]
    assert any(ln.startswith("Ray embedded ready after ") for ln in lines[1:]), text[-3000:]
    space_file = next(tmp_path.glob("sigterm.yaml"))
    assert f"  python -m autotune.search --space {space_file} --name sigterm --resume" in lines, text[-3000:]
    for leak in ("Tuner.restore", "FileNotFoundError", "autotune.search.run"):
        assert leak not in text, (leak, text[-3000:])

    log2 = tmp_path / "resume.log"
    resumed = start_cli(next(tmp_path.glob("sigterm.yaml")), "--resume", root=tmp_path, token=token, log=log2)
    rc2 = resumed.wait(timeout=600)
    view = search.mlflow_view()
    final = [r for r in view["trial_runs"] if r.status in ("feasible", "infeasible", "failed")]
    record.record("interrupts", "resume after SIGTERM", ok=rc2 == 0 and len(final) == trials
                  and [s for _, s in view["parents"]] == ["FINISHED"], exit_code=rc2, trial_runs=len(final))
    assert rc2 == 0, _console(log2)[-3000:]
    assert len(final) == trials and not view["running"], [(r.trial_id, r.status) for r in view["trial_runs"]]
    assert [s for _, s in view["parents"]] == ["FINISHED"], view["parents"]


def _ray_starting(token: str) -> bool:
    return any("gcs_server" in p.cmdline or "raylet" in p.cmdline for p in processes_with_token(token))


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_while_ray_starts_is_one_line_and_leaves_nothing(tmp_path: Path, sig: int, code: int) -> None:
    token = new_token("ray-start")
    space = write_space(tmp_path, merged(base_space("ray-start", token=token),
                                         parameters={"tp_size": {"type": "categorical", "choices": [1, 2]}}))
    log = tmp_path / "console.log"
    driver = start_cli(space, "--no-tracking", root=tmp_path, token=token, log=log)
    assert wait_until(lambda: driver.poll() is not None or _ray_starting(token), timeout_s=240, poll_s=0.05)
    assert driver.poll() is None, _console(log)[-3000:]
    driver.send_signal(sig)
    rc = driver.wait(timeout=120)
    gone = wait_until(lambda: not processes_with_token(token), timeout_s=GONE_S, poll_s=0.2)
    stray = [(p.pid, p.cmdline[:60]) for p in processes_with_token(token)]
    text = _console(log)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    record.record("interrupts", f"{signal.Signals(sig).name} while the embedded Ray starts",
                  ok=rc == code and gone and "Traceback" not in text and len(lines) <= 4,
                  exit_code=rc, console_lines=len(lines), processes_left_after_15s=stray[:5])
    assert rc == code, text[-3000:]
    assert "Traceback" not in text and len(lines) <= 4, text[-3000:]
    assert gone, f"left {GONE_S:g} s after the stop: {stray}"


def test_ctrl_c_of_a_trial_is_one_line_and_stops_its_server(tmp_path: Path) -> None:
    token = new_token("trial-int")
    space = write_space(tmp_path, merged(base_space("trial-int", token=token),
                                         fixed_env={"AUTOTUNE_SIM_FAULT": "slow_start:30"}))
    log = tmp_path / "trial.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "autotune.trial", "--space", str(space), "--workdir",
                                 str(tmp_path / "work")], cwd=tmp_path, env=cli_env(token), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    assert wait_until(lambda: proc.poll() is not None or any(p.is_server for p in servers_with_token(token)),
                      timeout_s=240, poll_s=0.1), _console(log)
    assert proc.poll() is None, _console(log)[-3000:]
    servers = [p.pid for p in servers_with_token(token) if p.is_server]
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=120)
    still = wait_gone(servers)
    text = _console(log)
    record.record("interrupts", "Ctrl-C of autotune trial", ok=rc == 130 and "Traceback" not in text and not still,
                  exit_code=rc, console_lines=len(text.splitlines()), servers_left=len(still))
    assert rc == 130 and "Traceback" not in text, text[-3000:]
    assert len([ln for ln in text.splitlines() if ln.strip()]) <= 3, text
    assert not still, still
