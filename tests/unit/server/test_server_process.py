"""ServerProcess against a real subprocess (tests/fakes/fake_server.py) on 127.0.0.1.

Every case checks by pid that the server, its ``sleep`` child and the watchdog are gone afterwards,
and that the port is free again.
"""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from autotune.errors import ServerCrashed, ServerError, ServerStartupCrash, ServerStartupTimeout
from autotune.server._reaper import group_alive, pid_alive
from autotune.server.ports import PortReservation, port_in_use, reserve_port
from autotune.server.process import ServerProcess

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[3]
FAKE = str(REPO / "tests" / "fakes" / "fake_server.py")
FAST = {"poll_interval_s": 0.05, "grace_s": 2.0, "startup_timeout_s": 30.0}


@pytest.fixture(autouse=True)
def _temp_logs_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the kept-for-the-caller temporary logs out of /tmp (port locks do not move)."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


def fake(*flags: str) -> list[str]:
    return [sys.executable, FAKE, "--port", "{port}", *flags]


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def pids_from_log(path: Path) -> dict[str, int | None]:
    """The fake server's own report of its pid and its child's, from its first log line."""
    match = re.search(r"fake_server: pid=(\d+) pgid=(\d+) child_pid=(\d+|None)", path.read_text())
    assert match, f"no pid line in {path}:\n{path.read_text()}"
    child = None if match[3] == "None" else int(match[3])
    return {"pid": int(match[1]), "pgid": int(match[2]), "child_pid": child}


def pids_from_http(server: ServerProcess) -> dict[str, int]:
    return httpx.get(server.url + "/pids", trust_env=False, timeout=5).json()


def assert_all_gone(*pids: int | None, pgid: int | None = None, port: int | None = None) -> None:
    # A SIGKILLed grandchild dies a moment after the signal, and a port is released when its last
    # holder is gone: wait (bounded) for each to happen rather than assume it already has.
    for pid in pids:
        assert pid is not None
        assert wait_until(lambda pid=pid: not pid_alive(pid)), f"process {pid} is still alive"
    if pgid is not None:
        assert wait_until(lambda: not group_alive(pgid)), f"process group {pgid} still has members"
    if port is not None:
        assert wait_until(lambda: not port_in_use(port)), f"port {port} is still bound"
        reservation = PortReservation.try_acquire(port)
        assert reservation is not None, f"port {port} is still reserved"
        reservation.release()


def test_start_health_stop_leaves_nothing(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "server.log"
    with ServerProcess(fake("--startup-delay", "0.3"), log_path=log, **FAST) as server:
        assert httpx.get(server.url + "/health", trust_env=False).status_code == 200
        pids = pids_from_http(server)
        assert pids["pid"] == server.pid == server.pgid == pids["pgid"]
        assert pids["port"] == server.port
        assert server.alive() and pid_alive(pids["child_pid"]) and pid_alive(server.reaper_pid)
        assert port_in_use(server.port)
        server.ensure_alive()
        reaper = server.reaper_pid
    assert server.returncode == -signal.SIGTERM
    assert not server.alive()
    assert_all_gone(pids["pid"], pids["child_pid"], reaper, pgid=pids["pgid"], port=server.port)
    assert server.log_path == log and "listening on" in log.read_text()
    with pytest.raises(ServerError, match="stopped"):
        server.ensure_alive()
    assert server.stop() == -signal.SIGTERM  # idempotent


def test_callable_argv_env_and_custom_ready_path(tmp_path: Path) -> None:
    seen_ports: list[int] = []

    def argv(port: int) -> list[str]:
        seen_ports.append(port)
        return [sys.executable, FAKE, "--port", str(port), "--bind-delay", "0.3",
                "--print-env", "AUTOTUNE_TEST_MARK"]

    server = ServerProcess(argv, env={"AUTOTUNE_TEST_MARK": "xyz"}, ready_path="/health_generate",
                           **FAST)
    with server:
        assert seen_ports == [server.port]
        assert server.command == argv(server.port)
        assert server.attempts == 1
    assert "env AUTOTUNE_TEST_MARK=xyz" in server.log_tail()
    assert server.log_path is not None and server.log_path.exists()  # temp log is kept
    assert_all_gone(server.pid, pgid=server.pgid, port=server.port)


def test_crash_at_start_reports_code_and_log(tmp_path: Path) -> None:
    server = ServerProcess(fake("--crash-at-start", "7"), log_path=tmp_path / "s.log", **FAST)
    with pytest.raises(ServerStartupCrash) as info:
        server.start()
    err = info.value
    assert err.returncode == 7
    assert "simulated start-up failure" in err.log_tail
    assert "code 7" in str(err) and "simulated start-up failure" in str(err)
    pids = pids_from_log(tmp_path / "s.log")
    # The crashed server's orphaned child is still in its group and must have been killed too.
    assert_all_gone(pids["pid"], pids["child_pid"], pgid=pids["pgid"], port=server.port)


def test_log_tail_shortens_huge_lines(tmp_path: Path) -> None:
    server = ServerProcess(fake("--crash-at-start", "2", "--print-env", "HUGE"), env={"HUGE": "x" * 9000},
                           log_path=tmp_path / "s.log", **FAST)
    with pytest.raises(ServerStartupCrash) as info:
        server.start()
    huge = [line for line in info.value.log_tail.splitlines() if "HUGE=" in line]
    assert len(huge) == 1 and len(huge[0]) < 2100 and huge[0].endswith("more characters]")
    assert "x" * 9000 in (tmp_path / "s.log").read_text()  # the file itself is untouched


def test_missing_executable_is_a_startup_crash(tmp_path: Path) -> None:
    server = ServerProcess([str(tmp_path / "no-such-server"), "--port", "{port}"], **FAST)
    with pytest.raises(ServerStartupCrash, match="could not run"):
        server.start()
    assert server.pid is None
    assert not port_in_use(server.port)


def test_hang_raises_timeout_and_kills_group(tmp_path: Path) -> None:
    server = ServerProcess(fake("--never-ready"), log_path=tmp_path / "s.log",
                           **{**FAST, "startup_timeout_s": 1.0})
    started = time.monotonic()
    with pytest.raises(ServerStartupTimeout) as info:
        server.start()
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 1.0 + FAST["grace_s"] + 3.0
    assert "HTTP 503" in str(info.value)
    assert "listening on" in info.value.log_tail
    pids = pids_from_log(tmp_path / "s.log")
    assert_all_gone(pids["pid"], pids["child_pid"], pgid=pids["pgid"], port=server.port)


def test_crash_after_ready_raises_server_crashed(tmp_path: Path) -> None:
    with ServerProcess(fake("--crash-after", "0.5", "--crash-code", "5"), **FAST) as server:
        pids = pids_from_http(server)
        server.ensure_alive()
        assert wait_until(lambda: not server.alive(), 10.0)
        with pytest.raises(ServerCrashed) as info:
            server.check()
        assert info.value.returncode == 5
        assert "simulated crash" in info.value.log_tail and "code 5" in str(info.value)
        # The crash was detected inside the block; the group is already stopped there.
        assert_all_gone(pids["pid"], pids["child_pid"], pgid=pids["pgid"], port=server.port)
        with pytest.raises(ServerCrashed):
            server.ensure_alive()  # keeps reporting the crash
    assert server.returncode == 5


@pytest.mark.parametrize("exc_type", [ValueError, KeyboardInterrupt])
def test_exception_in_with_block_stops_group(exc_type: type[BaseException]) -> None:
    with pytest.raises(exc_type), ServerProcess(fake(), **FAST) as server:
        pids = pids_from_http(server)
        raise exc_type("boom")
    assert_all_gone(pids["pid"], pids["child_pid"], pgid=pids["pgid"], port=server.port)


def test_ctrl_c_during_startup_stops_group(tmp_path: Path) -> None:
    server = ServerProcess(fake("--never-ready"), log_path=tmp_path / "s.log", **FAST)
    # A shell starts background jobs with SIGINT ignored, and Python keeps it so: install the
    # usual Ctrl-C behaviour for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            server.start()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    pids = pids_from_log(tmp_path / "s.log")
    assert_all_gone(pids["pid"], pids["child_pid"], pgid=pids["pgid"], port=server.port)


def test_stop_from_another_thread_cancels_startup(tmp_path: Path) -> None:
    server = ServerProcess(fake("--never-ready"), log_path=tmp_path / "s.log", **FAST)
    timer = threading.Timer(0.8, server.stop)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(ServerError, match="cancelled by stop"):
            server.start()
    finally:
        timer.join()
    assert time.monotonic() - started < 10.0  # not the 30 s start-up timeout
    pids = pids_from_log(tmp_path / "s.log")
    assert_all_gone(pids["pid"], pids["child_pid"], pgid=pids["pgid"], port=server.port)


def test_sigterm_ignored_escalates_to_sigkill() -> None:
    server = ServerProcess(fake("--ignore-sigterm"), **{**FAST, "grace_s": 0.5}).start()
    pids = pids_from_http(server)
    started = time.monotonic()
    assert server.stop() == -signal.SIGKILL
    assert time.monotonic() - started >= 0.5
    assert_all_gone(pids["pid"], pids["child_pid"], pgid=pids["pgid"], port=server.port)


def test_concurrent_starts_get_distinct_ports() -> None:
    count = 4
    barrier = threading.Barrier(count)
    servers: list[ServerProcess] = []
    errors: list[BaseException] = []

    def run() -> None:
        server = ServerProcess(fake(), **FAST)
        servers.append(server)
        barrier.wait()
        try:
            server.start()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        ports = [s.port for s in servers]
        assert len(set(ports)) == count, ports
        # Each URL reaches its own server, not a neighbour that won a port race.
        reported = [pids_from_http(s) for s in servers]
        assert [r["pid"] for r in reported] == [s.pid for s in servers]
        assert all(s.alive() for s in servers)
    finally:
        for s in servers:
            s.stop()
    for s, r in zip(servers, reported, strict=True):
        assert_all_gone(r["pid"], r["child_pid"], pgid=r["pgid"], port=s.port)


def test_lost_port_race_relaunches_on_another_port(tmp_path: Path) -> None:
    flag = tmp_path / "failed-once"
    with ServerProcess(fake("--fail-bind-once", str(flag)), log_path=tmp_path / "s.log",
                       **FAST) as server:
        assert flag.exists()
        assert server.attempts == 2
        assert pids_from_http(server)["port"] == server.port
        text = (tmp_path / "s.log").read_text()
        assert "Address already in use" in text and "relaunching on another port" in text
    assert_all_gone(server.pid, pgid=server.pgid, port=server.port)


def test_lost_race_on_fixed_port_is_not_retried(tmp_path: Path) -> None:
    with reserve_port() as free:
        port = free.port
    server = ServerProcess(fake("--fail-bind-once", str(tmp_path / "flag")), port=port, **FAST)
    with pytest.raises(ServerStartupCrash, match="Address already in use"):
        server.start()
    assert server.attempts == 1


def test_fixed_port_in_use_or_reserved_is_refused() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        with pytest.raises(ServerError, match="already in use"):
            ServerProcess(fake(), port=busy, **FAST).start()
    with reserve_port() as held, pytest.raises(ServerError, match="reserved by another autotune server"):
        ServerProcess(fake(), port=held.port, **FAST).start()


def test_fixed_port_with_static_argv() -> None:
    with reserve_port() as free:
        port = free.port
    with ServerProcess([sys.executable, FAKE, "--port", str(port)], port=port, **FAST) as server:
        assert server.port == port and pids_from_http(server)["port"] == port
    assert_all_gone(server.pid, pgid=server.pgid, port=port)


def test_reservations_are_exclusive_until_released() -> None:
    first, second = reserve_port(), reserve_port()
    try:
        assert first.port != second.port
        assert PortReservation.try_acquire(first.port) is None
    finally:
        first.release()
        second.release()
    again = PortReservation.try_acquire(first.port)
    assert again is not None
    again.release()


@pytest.mark.parametrize("kwargs, message", [
    ({"argv": []}, "non-empty"),
    ({"argv": ["server", "--port", "30000"]}, "placeholder"),
    ({"argv": ["server", "{port}"], "ready_path": "health"}, "must start with '/'"),
    ({"argv": ["server", "{port}"], "startup_timeout_s": 0}, "startup_timeout_s"),
    ({"argv": ["server", "{port}"], "grace_s": -1}, "grace_s"),
    ({"argv": ["server", "{port}"], "port": 70000}, "1..65535"),
    ({"argv": ["server", "{port}"], "env": {"A": 1}}, "strings"),
])
def test_bad_arguments_are_rejected(kwargs: dict, message: str) -> None:
    argv = kwargs.pop("argv")
    with pytest.raises(ValueError, match=message):
        ServerProcess(argv, **kwargs)


def test_start_twice_is_refused() -> None:
    with ServerProcess(fake(), **FAST) as server, pytest.raises(RuntimeError, match="runs once"):
        server.start()
    stopped_first = ServerProcess(fake(), **FAST)
    assert stopped_first.stop() is None
    with pytest.raises(RuntimeError, match="runs once"):
        stopped_first.start()
    assert stopped_first.pid is None


def test_garbage_collection_stops_group() -> None:
    server = ServerProcess(fake(), **FAST).start()
    pids = pids_from_http(server)
    port = server.port
    del server
    gc.collect()
    assert wait_until(lambda: not group_alive(pids["pgid"]), 5.0)
    assert_all_gone(pids["pid"], pids["child_pid"], pgid=pids["pgid"], port=port)


# A driver process that starts a server, reports the pids on stdout, then waits to be killed or
# exits on its own. ``watchdog`` off isolates the atexit safety net from the reaper.
DRIVER = """
import json, sys, time, httpx
from autotune.server.process import ServerProcess
mode = sys.argv[1]
server = ServerProcess([sys.executable, {fake!r}, "--port", "{{port}}"], grace_s=2.0,
                       poll_interval_s=0.05, watchdog=(mode != "exit-no-watchdog"),
                       log_path=sys.argv[2])
server.start()
pids = httpx.get(server.url + "/pids", trust_env=False).json()
pids["reaper_pid"] = server.reaper_pid
print(json.dumps(pids), flush=True)
if mode == "wait":
    time.sleep(600)
"""


def run_driver(mode: str, log: Path) -> tuple[subprocess.Popen[str], dict]:
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(fake=FAKE), mode, str(log)],
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    line = driver.stdout.readline() if driver.stdout else ""
    assert line, f"driver exited {driver.wait()} without reporting pids"
    return driver, json.loads(line)


def test_driver_sigkill_kills_server_group(tmp_path: Path) -> None:
    driver, pids = run_driver("wait", tmp_path / "s.log")
    try:
        assert pid_alive(pids["pid"]) and pid_alive(pids["child_pid"]) and pid_alive(pids["reaper_pid"])
        driver.kill()  # SIGKILL: no finally, no atexit; only the watchdog is left
        driver.wait()
        assert wait_until(lambda: not group_alive(pids["pgid"]), 8.0), "server group outlived its owner"
        assert wait_until(lambda: not pid_alive(pids["reaper_pid"]), 5.0)
        assert_all_gone(pids["pid"], pids["child_pid"], pids["reaper_pid"], pgid=pids["pgid"],
                        port=pids["port"])
        assert f"owner pid {driver.pid} is gone" in (tmp_path / "s.log").read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if group_alive(pids["pgid"]):  # do not leak into other tests if the assertion failed
            os.killpg(pids["pgid"], signal.SIGKILL)


@pytest.mark.parametrize("mode", ["exit", "exit-no-watchdog"])
def test_driver_normal_exit_without_stop_kills_server_group(mode: str, tmp_path: Path) -> None:
    driver, pids = run_driver(mode, tmp_path / "s.log")
    try:
        assert driver.wait(timeout=20) == 0
        assert wait_until(lambda: not group_alive(pids["pgid"]), 5.0)
        reaper = [pids["reaper_pid"]] if pids["reaper_pid"] else []
        assert bool(reaper) == (mode == "exit")
        assert_all_gone(pids["pid"], pids["child_pid"], *reaper, pgid=pids["pgid"], port=pids["port"])
    finally:
        if group_alive(pids["pgid"]):
            os.killpg(pids["pgid"], signal.SIGKILL)
