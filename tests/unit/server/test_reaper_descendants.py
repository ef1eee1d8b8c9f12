"""The search driver's watchdog (``autotune.server._reaper --descendants``) on real processes: what
it lists, what it kills when the owner dies, what it leaves alone, and that a release kills nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import IO

import pytest

from autotune.server._reaper import Descendants, children_of, pid_alive

SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]

#: The owner: a child from before the watchdog, then (on "go") a plain child and a group leader
#: with a child of its own; it prints each pid as a line.
OWNER = textwrap.dedent(f"""
    import subprocess, sys, time
    sleeper = {SLEEPER!r}
    before = subprocess.Popen(sleeper)
    print(before.pid, flush=True)
    if sys.argv[1] == "watched":
        from autotune.server.group import release_watchdog, watch_descendants
        watchdog = watch_descendants(log=sys.stderr.buffer, poll_s=0.05)
        print(watchdog.pid, flush=True)
    sys.stdin.readline()
    child = subprocess.Popen(sleeper)
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               f"print(subprocess.Popen({{sleeper!r}}).pid, flush=True); time.sleep(300)"],
                              start_new_session=True, stdout=subprocess.PIPE, text=True)
    grandchild = int(leader.stdout.readline())
    print(child.pid, leader.pid, grandchild, flush=True)
    if sys.argv[1] == "watched":
        sys.stdin.readline()
        release_watchdog(watchdog)
        print("released", flush=True)
    time.sleep(300)
""")


def _owner(mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.Popen([sys.executable, "-c", OWNER, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)


def _line(stream: IO[str] | None) -> list[int]:
    assert stream is not None
    return [int(x) for x in stream.readline().split()]


@pytest.fixture
def pids() -> Iterator[list[int]]:
    """Pids the test learns of; whatever is still alive at the end is killed, by pid."""
    found: list[int] = []
    yield found
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_owners_later_descendants_are_listed_and_killed_and_its_earlier_child_is_not(pids: list[int]) -> None:
    owner = _owner("plain")
    pids.append(owner.pid)
    [before] = _line(owner.stdout)
    pids.append(before)
    spare = children_of(owner.pid)
    assert {pid for pid, _ in spare} == {before}
    tree = Descendants(owner.pid, me=os.getpid(), spare=spare)
    assert owner.stdin is not None
    owner.stdin.write("go\n")
    owner.stdin.flush()
    child, leader, grandchild = _line(owner.stdout)
    pids.extend([child, leader, grandchild])
    tree.refresh()
    assert {child, leader, grandchild} <= set(tree.known) and before not in tree.known, tree.known
    owner.kill()
    owner.wait()
    # The owner is gone and its children re-parented: the list kept while it lived still finds them.
    count, left = tree.kill()
    assert count == 3 and left == [], (count, left)
    assert not any(pid_alive(p) for p in (child, leader, grandchild))
    assert pid_alive(before), "a child the owner had before the watchdog was killed"


def test_a_released_sidecar_exits_and_kills_nothing(pids: list[int]) -> None:
    owner = _owner("watched")
    pids.append(owner.pid)
    [before] = _line(owner.stdout)
    [watchdog] = _line(owner.stdout)
    pids.extend([before, watchdog])
    assert owner.stdin is not None and owner.stdout is not None
    owner.stdin.write("go\n")
    owner.stdin.flush()
    later = _line(owner.stdout)
    pids.extend(later)
    owner.stdin.write("release\n")
    owner.stdin.flush()
    assert owner.stdout.readline().strip() == "released"
    assert not pid_alive(watchdog), "release_watchdog returned before the watchdog exited"
    owner.kill()
    owner.wait()
    assert all(pid_alive(p) for p in [before, *later]), "a released watchdog killed something"
