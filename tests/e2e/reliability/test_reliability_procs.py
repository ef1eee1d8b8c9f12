"""The leftover checks of the reliability tests, on real processes: a port a process still holds is
named with its holder, a port another process (not the test's) took since is not the test's
leftover, and :func:`reliability.procs.leftovers` waits for a port on its way out instead of
looking once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.reliability import procs
from tests.e2e.reliability.procs import TOKEN_ENV, held_ports, leftovers, new_token

pytestmark = pytest.mark.timeout(120)

# Holds a port until its stdin closes: bound by a listening socket ("bind"), or reserved as a
# ServerProcess reserves it ("reserve"). Prints the port once it holds it.
_HOLDER = """
import socket, sys
from autotune.server.ports import reserve_port
if sys.argv[1] == "bind":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); port = s.getsockname()[1]
else:
    r = reserve_port(); port = r.port
print(port, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()  # only what this test started, by its pid
        proc.wait()


def _hold(how: str, token: str, started: list[subprocess.Popen[str]]) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, TOKEN_ENV: token}
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, how], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    started.append(proc)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


@pytest.mark.parametrize("how", ["bound", "reserved"])
def test_a_held_port_names_its_holder_and_a_foreign_holder_is_not_ours(
        how: str, holders: list[subprocess.Popen[str]]) -> None:
    token = new_token("held")
    proc, port = _hold("bind" if how == "bound" else "reserve", token, holders)
    [held] = held_ports([port], token)
    assert (held.port, held.how) == (port, how)
    assert [pid for pid, _ in held.holders] == [proc.pid], held
    assert f"{port} {how} by pid {proc.pid}" in str(held)
    # Without a token every holder counts; with another test's token this one's port is not its.
    assert [h.port for h in held_ports([port])] == [port]
    assert held_ports([port], new_token("other")) == []
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=procs.HANG_S)
    assert held_ports([port], token) == []


def test_leftovers_waits_for_a_port_on_its_way_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  holders: list[subprocess.Popen[str]]) -> None:
    token = new_token("on-its-way-out")
    proc, port = _hold("reserve", token, holders)
    # The server log note the check reads its ports from; no server process is left, only the
    # reservation of a process that has not exited yet (a Ray worker after its server was killed).
    (tmp_path / "trial-1-2.log").write_text(f"[autotune] launch 1 on port {port}: python -m x\n")
    looks: list[list[procs.HeldPort]] = []

    def look(ports, token=None):  # noqa: ANN001, ANN202 - the real one, watched
        found = held_ports(ports, token)
        looks.append(found)
        if len(looks) == 1:
            assert proc.stdin is not None
            proc.stdin.close()  # its owner goes once the check has seen the port held
        return found

    monkeypatch.setattr(procs, "held_ports", look)
    left = leftovers(token, log_dir=tmp_path, lock_dirs=[])
    assert [(h.port, h.how) for h in looks[0]] == [(port, "reserved")], looks[0]
    assert left.count == 0 and len(looks) >= 2, left.describe()
    assert proc.wait(timeout=procs.HANG_S) == 0
