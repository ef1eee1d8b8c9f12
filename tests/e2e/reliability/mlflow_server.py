"""A real ``mlflow server`` on 127.0.0.1 that a test can kill and start again on the same port.

The server runs in its own process group (it starts uvicorn workers), so :meth:`MlflowServer.kill`
ends exactly what :meth:`MlflowServer.start` started, by that group's id. Its backend store
(sqlite) and artifacts live in the test's directory and survive a kill, as a real server's
would across a restart.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from autotune.server.ports import port_in_use
from tests.e2e.reliability.procs import HANG_S, wait_until


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """``mlflow server`` with its store under ``folder``.

    Args:
        folder: Holds ``mlflow.db``, ``artifacts/`` and ``server.log``.
        port: The port; a free one if None (kept across restarts).
    """

    def __init__(self, folder: Path, port: int | None = None) -> None:
        self.folder = folder
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout_s: float = HANG_S) -> MlflowServer:
        """Start it and wait until ``/health`` answers."""
        mlflow = Path(sys.executable).parent / "mlflow"
        argv = [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                "--backend-store-uri", f"sqlite:///{self.folder}/mlflow.db",
                "--artifacts-destination", str(self.folder / "artifacts")]
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
        # Its GenAI job runner starts eight more processes a search never uses; on two cores they
        # double the start-up.
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        with open(self.folder / "server.log", "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=self.folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited ({self.proc.returncode}): "
                                   + (self.folder / "server.log").read_text(errors="replace")[-2000:])
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.kill()
        raise RuntimeError(f"mlflow server on {self.url} not healthy within {timeout_s} s")

    def pause(self) -> None:
        """SIGSTOP the server's group: it accepts connections but answers nothing (a hung server)."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the server's group after :meth:`pause`."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the server's process group (only what :meth:`start` started) and reap it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=HANG_S)
        self.proc = None
        # The port is free once the kernel closed the listener (no TIME_WAIT on a listen socket); a
        # restart on it before then fails to bind, so a port still open at the deadline is an error.
        if not wait_until(lambda: not port_in_use(self.port)):
            raise RuntimeError(f"port {self.port} still bound {HANG_S:g} s after the mlflow server was killed")
