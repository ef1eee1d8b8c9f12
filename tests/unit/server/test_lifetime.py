"""A server's start-up and teardown seconds (autotune.server.lifetime), against the real fake server.

The GPU bill (autotune.trial.gpu_time) counts start-up and teardown apart on every path: a
failed start's own teardown (a start-up timeout stops the group before raising) must not be
counted as start-up.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autotune.errors import ServerStartupCrash, ServerStartupTimeout
from autotune.server.lifetime import Lifetime
from autotune.server.process import ServerProcess
from tests.unit.server.test_server_process import FAST, fake

pytestmark = pytest.mark.timeout(60)


def test_a_ready_server_times_spawn_to_healthy_then_stop_to_gone(tmp_path: Path) -> None:
    began = time.monotonic()
    server = ServerProcess(fake("--startup-delay", "0.3", "--ignore-sigterm"), log_path=tmp_path / "s.log",
                           **{**FAST, "grace_s": 0.5})
    assert server.lifetime.startup_s is None and server.lifetime.teardown_s is None
    server.start()
    ready = time.monotonic()
    life = server.lifetime
    assert life.startup_s is not None and 0.3 <= life.startup_s <= ready - began
    assert life.teardown_s is None and life.stop_began is None  # not stopped yet: unknown, not 0
    stopping = time.monotonic()
    server.stop()
    gone = time.monotonic()
    # SIGTERM is ignored: the group goes at SIGKILL, after the grace.
    assert life.teardown_s is not None and 0.5 <= life.teardown_s <= gone - stopping
    assert life.stop_began is not None and stopping <= life.stop_began <= gone
    server.stop()  # a second stop finds the group gone: nothing more is counted
    assert life.teardown_s <= gone - stopping


def test_a_start_up_timeout_keeps_its_teardown_out_of_start_up(tmp_path: Path) -> None:
    server = ServerProcess(fake("--never-ready", "--ignore-sigterm"), log_path=tmp_path / "s.log",
                           **{**FAST, "startup_timeout_s": 1.0, "grace_s": 1.0})
    began = time.monotonic()
    with pytest.raises(ServerStartupTimeout):
        server.start()
    elapsed = time.monotonic() - began
    life = server.lifetime
    assert life.startup_s is not None and life.teardown_s is not None
    assert life.teardown_s >= 1.0  # the grace before SIGKILL
    assert 1.0 <= life.startup_s < elapsed - 1.0  # the timeout, not the grace after it
    assert life.startup_s + life.teardown_s <= elapsed


def test_a_crash_at_start_has_start_up_and_teardown(tmp_path: Path) -> None:
    server = ServerProcess(fake("--startup-delay", "0.2", "--crash-at-start", "7"), log_path=tmp_path / "s.log",
                           **FAST)
    with pytest.raises(ServerStartupCrash):
        server.start()
    life = server.lifetime
    assert life.startup_s is not None and life.startup_s > 0
    assert life.teardown_s is not None  # its orphaned child was killed: that was paid too


def test_a_server_never_started_has_no_times() -> None:
    life = Lifetime()
    life.started()  # start() never began: nothing to time
    assert life.startup_s is None and life.teardown_s is None and life.stop_began is None
