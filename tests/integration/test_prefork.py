"""``measure.prefork``: a server's child processes forked from a fork server that imported their
modules while the server before it started, only where that is the same as a spawn.

A small launcher package written here stands in for SGLang's: like ``sglang.launch_server`` it
sets the ``spawn`` start method, sets a variable just before it starts its child with
``mp.Process``, and the child imports a slow module (which reads a variable at import). Real
standby and fork-server processes; each test waits for the events it checks.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.server._prefork.autotune_prefork import why_spawn
from autotune.server.standby import Standby, prefork_children
from tests.fakes.fake_launcher import dispose, env_for, write_package

LAUNCH = '''
import json, multiprocessing as mp, os, sys
from fakesrv import child

GOT = []


def main():
    import signal, time
    signal.signal(signal.SIGQUIT, lambda *_: GOT.append(1))  # as SGLang's launch-phase handler
    mp.set_start_method("spawn", force=True)
    os.environ["SET_BEFORE_SPAWN"] = "yes"  # as SGLang sets NCCL_CUMEM_ENABLE and the like
    r, w = mp.Pipe(duplex=False)
    p = mp.Process(target=child.run, args=(w,))
    p.start()
    said = r.recv()
    p.join()
    if os.environ.get("FAKE_QUIT"):
        deadline = time.monotonic() + 30
        while not GOT and time.monotonic() < deadline:
            time.sleep(0.05)
    said["launcher_got_sigquit"] = bool(GOT)
    said["launcher_pid"] = os.getpid()
    said["start_method"] = mp.get_start_method()
    print("RESULT " + json.dumps(said), flush=True)
    sys.exit(p.exitcode)

if __name__ == "__main__":
    main()
'''
CHILD = '''
import os

def run(w):
    import signal
    import fakesrv.heavy as heavy
    if os.environ.get("FAKE_QUIT"):  # as SGLang's scheduler tells its parent it failed
        os.kill(os.getppid(), signal.SIGQUIT)
    print("the child writes to the server log", flush=True)
    w.send({"pid": os.getpid(), "ppid": os.getppid(), "set_before_spawn": os.environ.get("SET_BEFORE_SPAWN"),
            "read_at_import": heavy.READ, "heavy_imported_in": heavy.PID})
'''
HEAVY = '''
import os, time
PID = os.getpid()
READ = os.environ.get("FAKE_READ_AT_IMPORT")
SCANNED = {k: v for k, v in os.environ.items() if k.startswith("FAKESCAN_")}
time.sleep(0.5)
'''


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    return write_package(tmp_path / "pkg", "fakesrv", {"__init__": "", "launch": LAUNCH, "child": CHILD,
                                                       "heavy": HEAVY})


def _env(pkg: Path, **extra: str) -> dict[str, str]:
    return env_for(pkg, drop="FAKE_", **extra)


def _run(pkg: Path, tmp_path: Path, *, prefork: list[str], start_env: dict[str, str],
         server_env: dict[str, str], scans: dict[str, list[str]] | None = None) -> tuple[Standby, dict, str]:
    standby = Standby(python=sys.executable, module="fakesrv.launch", preimport=["fakesrv.child"],
                      env=start_env, cwd=str(tmp_path), late_env=["FAKE*"], log_path=tmp_path / "standby.log",
                      prefork=prefork, prefork_scans={"fakesrv.heavy": ["FAKESCAN_"]} if scans is None else scans)
    try:
        assert standby.ready(timeout_s=120.0), (tmp_path / "standby.log").read_text()[-2000:]
        log = tmp_path / "server.log"
        proc, note = standby.launch([sys.executable, "-m", "fakesrv.launch"], env=server_env, cwd=tmp_path,
                                    log_path=log)
        assert proc is not None, note
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
        text = log.read_text()
        result = json.loads(next(ln for ln in text.splitlines() if ln.startswith("RESULT "))[7:])
        assert ("its fork server" if standby.prefork and standby.prefork["ok"] else "no fork server") in note["line"]
        return standby, result, text
    finally:
        dispose(standby)


def test_the_child_is_forked_from_the_pre_imported_server_with_the_launchers_environment(pkg, tmp_path):
    env = _env(pkg)
    standby, said, log = _run(pkg, tmp_path, prefork=["fakesrv.heavy"], start_env=env, server_env=env)
    assert standby.prefork is not None and standby.prefork["ok"] is True, standby.prefork
    # No NVML here, so no device question was answered without CUDA (tests/unit/server/test_prefork_cuda.py).
    assert standby.prefork["cuda_answers"] == {"capability": None, "name": None, "given": {}, "first_init": None}
    # Imported once, in the fork server, not again in the child; its parent is that fork server.
    assert said["heavy_imported_in"] == standby.prefork["pid"] != said["pid"]
    assert said["ppid"] == standby.prefork["pid"] != said["launcher_pid"]
    # What the launcher set just before the child started reached it, as a spawn's would.
    assert said["set_before_spawn"] == "yes"
    assert said["start_method"] == "spawn"  # what the launcher asked for, as it checks it
    # The child's output is in the server's log, not the standby's.
    assert "the child writes to the server log" in log
    children = prefork_children(tmp_path / "server.log")
    assert children == {"forked": 1, "spawned": 0, "why_spawned": [], "rebound": []}, log
    assert "SET_BEFORE_SPAWN" in log  # the log names what was set since the imports
    assert not list(tmp_path.glob("prefork-*")), "the fork server's status and module list are cleaned up"


def test_a_variable_the_imports_read_that_differs_sends_the_child_to_a_spawn(pkg, tmp_path):
    standby, said, log = _run(pkg, tmp_path, prefork=["fakesrv.heavy"], start_env=_env(pkg, FAKE_READ_AT_IMPORT="a"),
                              server_env=_env(pkg, FAKE_READ_AT_IMPORT="b"))
    assert standby.prefork is not None and standby.prefork["ok"] is True
    # Spawned: the child imported the module itself and read the server's value, not the standby's.
    assert said["heavy_imported_in"] == said["pid"]
    assert said["read_at_import"] == "b"
    assert said["ppid"] == said["launcher_pid"]
    children = prefork_children(tmp_path / "server.log")
    assert children is not None and children["forked"] == 0 and children["spawned"] == 1
    assert "FAKE_READ_AT_IMPORT" in children["why_spawned"][0]


def test_a_module_that_scans_the_environment_stops_forks_unless_its_prefixes_are_known(pkg, tmp_path):
    env = _env(pkg)
    new = {**env, "FAKESCAN_A": "1"}
    (tmp_path / "a").mkdir()
    standby, said, log = _run(pkg, tmp_path / "a", prefork=["fakesrv.heavy"], start_env=env, server_env=env,
                              scans={})
    assert standby.prefork is not None and standby.prefork["copied_by"] == ["fakesrv.heavy"]
    assert said["heavy_imported_in"] == said["pid"]
    assert "fakesrv.heavy copied the whole environment" in log
    # Told what it keeps: a fork where no such variable differs, a spawn where one does.
    (tmp_path / "b").mkdir()
    standby, said, log = _run(pkg, tmp_path / "b", prefork=["fakesrv.heavy"], start_env=env, server_env=env,
                              scans={"fakesrv.heavy": ["FAKESCAN_"]})
    assert standby.prefork is not None and standby.prefork["copied_by"] == []
    assert said["heavy_imported_in"] != said["pid"], log
    (tmp_path / "c").mkdir()
    standby, said, log = _run(pkg, tmp_path / "c", prefork=["fakesrv.heavy"], start_env=env, server_env=new,
                              scans={"fakesrv.heavy": ["FAKESCAN_"]})
    assert said["heavy_imported_in"] == said["pid"] and "FAKESCAN_A differ" in log, log


def test_a_module_that_cannot_be_imported_alone_is_skipped_and_left_to_the_child(pkg, tmp_path):
    env = _env(pkg)
    standby, said, log = _run(pkg, tmp_path, prefork=["fakesrv.missing", "fakesrv.heavy"], start_env=env,
                              server_env=env)
    assert standby.prefork is not None and standby.prefork["ok"] is True and standby.prefork["skipped"] == 1
    assert standby.prefork["modules"] == 2
    assert said["heavy_imported_in"] == standby.prefork["pid"]


def test_an_import_that_starts_a_thread_leaves_the_child_spawned(pkg, tmp_path):
    (pkg / "fakesrv" / "threaded.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(3600,), name='poller', daemon=True).start()\n")
    env = _env(pkg)
    standby, said, log = _run(pkg, tmp_path, prefork=["fakesrv.heavy", "fakesrv.threaded"], start_env=env,
                              server_env=env)
    assert standby.prefork is not None and standby.prefork["ok"] is False
    assert "started threads (poller)" in standby.prefork["why_not"]
    assert said["heavy_imported_in"] == said["pid"], log


def test_a_fork_server_whose_imports_fail_leaves_the_child_spawned(pkg, tmp_path):
    (pkg / "fakesrv" / "broken.py").write_text("raise RuntimeError('needs a GPU')\n")
    env = _env(pkg)
    standby, said, log = _run(pkg, tmp_path, prefork=["fakesrv.heavy", "fakesrv.broken"], start_env=env,
                              server_env=env)
    assert standby.prefork is not None and standby.prefork["ok"] is False
    assert "fakesrv.broken" in standby.prefork["why_not"]
    assert said["heavy_imported_in"] == said["pid"] and said["set_before_spawn"] == "yes"
    assert "spawned afresh: no fork server (fakesrv.broken: RuntimeError: needs a GPU" in log, log


def test_the_waiting_fork_server_takes_no_cpu_and_dies_with_the_standby(pkg, tmp_path):
    standby = Standby(python=sys.executable, module="fakesrv.launch", preimport=["fakesrv.child"], env=_env(pkg),
                      cwd=str(tmp_path), late_env=[], log_path=tmp_path / "standby.log", prefork=["fakesrv.heavy"])
    try:
        assert standby.ready(timeout_s=120.0), (tmp_path / "standby.log").read_text()[-2000:]
        assert standby.prefork is not None and standby.prefork["ok"] is True
        fork_server = int(standby.prefork["pid"])
        before = standby.cpu_s()
        time.sleep(1.0)
        after = standby.cpu_s()
        assert before is not None and after is not None and after - before <= 0.05
        assert Path(f"/proc/{fork_server}").exists()
    finally:
        dispose(standby)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{fork_server}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{fork_server}").exists(), "the fork server outlived its standby"


@pytest.mark.parametrize(("status", "env", "why"), [
    ({"ok": False, "why_not": "x"}, {}, "no fork server (x)"),
    ({"ok": True, "executable": "/other/python", "env": {}, "read": [], "copied_by": []}, {}, "interpreter"),
    ({"ok": True, "executable": sys.executable, "env": {}, "read": [], "copied_by": ["pkg.mod"]}, {},
     "pkg.mod copied the whole environment"),
    ({"ok": True, "executable": sys.executable, "env": {"A": "1"}, "read": ["A"], "copied_by": []}, {"A": "2"},
     "A differ"),
    ({"ok": True, "executable": sys.executable, "env": {}, "read": [], "copied_by": []}, {"LD_PRELOAD": "x.so"},
     "LD_PRELOAD differ"),
    ({"ok": True, "executable": sys.executable, "env": {"A": "1"}, "read": [], "copied_by": []}, {"A": "2", "B": "3"},
     None),
    ({"ok": True, "executable": sys.executable, "env": {}, "read": [], "copied_by": [], "read_prefixes": ["SGL_"]},
     {"SGL_X": "1"}, "SGL_X differ"),
    ({"ok": True, "executable": sys.executable, "env": {}, "read": [], "copied_by": [], "read_prefixes": ["SGL_"]},
     {"SGLANG_X": "1"}, None),
])
def test_why_spawn(status, env, why):
    got = why_spawn(env, status, executable=sys.executable)
    assert (got is None) if why is None else (got is not None and why in got), got


def test_a_childs_sigquit_reaches_the_launcher_through_the_fork_server(pkg, tmp_path):
    standby, said, log = _run(pkg, tmp_path, prefork=["fakesrv.heavy"], start_env=_env(pkg),
                              server_env=_env(pkg, FAKE_QUIT="1"))
    assert said["ppid"] == standby.prefork["pid"], log  # forked: its parent is the fork server
    assert said["launcher_got_sigquit"] is True, log


def test_a_standby_that_cannot_start_leaves_no_fork_server_orders(tmp_path):
    with pytest.raises(OSError):
        Standby(python=str(tmp_path / "no-such-python"), module="fakesrv.launch", preimport=[], env=dict(os.environ),
                cwd=str(tmp_path), late_env=[], log_path=tmp_path / "standby.log", prefork=["json"])
    assert not list(tmp_path.glob("prefork-spec-*"))


def test_a_fork_server_not_done_when_needed_is_dropped_and_the_standby_kept(pkg, tmp_path, monkeypatch):
    from autotune.trial import standby_slot

    # Imports that never end until killed: the fork server is still importing when the server
    # beside the standby is ready (as on a warm GPU host, where both take 15-20 s).
    (pkg / "fakesrv" / "stuck.py").write_text(textwrap.dedent('''
        import os, time
        with open(os.environ["FAKE_STUCK_PID"], "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(0.05)
    '''))
    pid_file = tmp_path / "stuck.pid"
    env = _env(pkg, FAKE_STUCK_PID=str(pid_file))
    standby = Standby(python=sys.executable, module="fakesrv.launch", preimport=["fakesrv.child"], env=env,
                      cwd=str(tmp_path), late_env=["FAKE*"], log_path=tmp_path / "standby.log",
                      prefork=["fakesrv.stuck"])
    monkeypatch.setattr(standby_slot, "_held", standby)
    try:
        deadline = time.monotonic() + 120
        while not (standby.imports_done and pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            assert not standby.ready(timeout_s=0.2), "the stuck fork server cannot be done"
        assert standby.imports_done, (tmp_path / "standby.log").read_text()[-2000:]
        fork_server = int(pid_file.read_text())
        importing_s = time.monotonic() - standby.started_at
        ended, waited = standby_slot.check_ready()
        assert ended is None  # kept: only its fork server was ended
        # It waited as long as the standby had been importing before it gave up on the fork server.
        assert waited >= 0.9 * importing_s, (waited, importing_s)
        assert standby_slot.take() is standby and standby.ready()
        assert standby.prefork is not None and standby.prefork["ok"] is False
        assert standby.prefork["why_not"].startswith("dropped: its imports were not done"), standby.prefork
        deadline = time.monotonic() + 30
        while Path(f"/proc/{fork_server}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{fork_server}").exists(), "the dropped fork server is still there"
        log = tmp_path / "server.log"
        proc, note = standby.launch([sys.executable, "-m", "fakesrv.launch"], env=env, cwd=tmp_path, log_path=log)
        assert proc is not None and note["used"] is True, note
        assert "no fork server: dropped" in note["line"]
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
        said = json.loads(next(ln for ln in log.read_text().splitlines() if ln.startswith("RESULT "))[7:])
        assert said["heavy_imported_in"] == said["pid"], "the child was spawned and imported for itself"
        assert prefork_children(log) == {"forked": 0, "spawned": 1, "rebound": [], "why_spawned": [
            "no fork server (dropped: its imports were not done when the server it started beside was ready)"]}
        assert not list(tmp_path.glob("prefork-*")), "the fork server's status and module list are cleaned up"
    finally:
        dispose(standby)


def test_a_standby_still_importing_itself_is_ended_whole(pkg, tmp_path, monkeypatch):
    from autotune.trial import standby_slot

    (pkg / "fakesrv" / "slowself.py").write_text("import time\ntime.sleep(3600)\n")
    standby = Standby(python=sys.executable, module="fakesrv.launch", preimport=["fakesrv.slowself"],
                      env=_env(pkg), cwd=str(tmp_path), late_env=[], log_path=tmp_path / "standby.log",
                      prefork=["fakesrv.heavy"])
    monkeypatch.setattr(standby_slot, "_held", standby)
    try:
        assert not standby.ready(timeout_s=1.0) and not standby.imports_done
        assert standby_slot.check_ready(wait=False)[0] == (
            "still importing when the server it started beside was ready")
        assert standby_slot.take() is None
        assert standby.proc.wait(timeout=30) is not None
    finally:
        dispose(standby)


def test_a_drop_order_that_comes_as_the_fork_server_finishes_is_moot(pkg, tmp_path):
    # The caller's order crossed the fork server's last import: the standby reads it after saying
    # ready, with its fork server done, and still runs the server it is then handed, forking.
    env = _env(pkg)
    standby = Standby(python=sys.executable, module="fakesrv.launch", preimport=["fakesrv.child"], env=env,
                      cwd=str(tmp_path), late_env=["FAKE*"], log_path=tmp_path / "standby.log",
                      prefork=["fakesrv.heavy"], prefork_scans={"fakesrv.heavy": ["FAKESCAN_"]})
    try:
        assert standby.ready(timeout_s=120.0), (tmp_path / "standby.log").read_text()[-2000:]
        assert standby.prefork is not None and standby.prefork["ok"] is True
        assert standby.proc.stdin is not None
        standby.proc.stdin.write(b'{"drop_prefork": "late"}\n')
        standby.proc.stdin.flush()
        log = tmp_path / "server.log"
        proc, note = standby.launch([sys.executable, "-m", "fakesrv.launch"], env=env, cwd=tmp_path, log_path=log)
        assert proc is not None and note["used"] is True, note
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:] + (tmp_path / "standby.log").read_text()[-2000:]
        assert prefork_children(log) == {"forked": 1, "spawned": 0, "why_spawned": [], "rebound": []}, \
            log.read_text()[-3000:]
    finally:
        dispose(standby)
