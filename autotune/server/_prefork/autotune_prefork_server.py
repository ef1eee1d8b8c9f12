"""The standby's half of ``measure.prefork``: it starts multiprocessing's fork server with
``autotune_prefork`` as its preload and waits for that module's imports (``_preload``) to be done.

Standard library only, imported by its file's folder as ``autotune_prefork`` is
(``autotune/server/_standby.py``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import autotune_prefork  # type: ignore[import-not-found]  # beside this file, found by its folder


def start(modules: list[str], status_path: str, *, scans: dict[str, list[str]] | None = None,
          rebind: dict[str, dict[str, str]] | None = None) -> None:
    """In the standby, before its own imports: start multiprocessing's fork server with this module
    as its preload, importing ``modules`` (it writes ``status_path`` when done, see :func:`_preload`);
    ``scans``: the prefixes of the variables each module known to iterate the environment keeps;
    ``rebind``: the variables bound at import that each forked child binds again
    (``autotune_prefork_rebind``)."""
    import multiprocessing
    import multiprocessing.forkserver

    here = os.path.dirname(os.path.abspath(__file__))
    pythonpath = os.environ.get("PYTHONPATH")
    # In a file: a list of a few thousand modules would pass the kernel's limit for one variable.
    modules_file = status_path + ".modules"
    with open(modules_file, "w") as f:
        f.write("\n".join(modules) + "\n")
    os.environ[autotune_prefork.SPEC] = json.dumps({"modules_file": modules_file, "status": status_path,
                                                    "pythonpath": pythonpath, "scans": scans or {},
                                                    "rebind": rebind or {}})
    # Found by the fork server through PYTHONPATH (it ignores the sys.path it is given in 3.11), in a
    # folder that holds nothing else; _preload takes it off again.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, pythonpath]))
    try:
        multiprocessing.set_forkserver_preload([autotune_prefork.__name__])
        multiprocessing.forkserver.ensure_running()
    finally:
        os.environ.pop(autotune_prefork.SPEC, None)
        if pythonpath is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = pythonpath


def wait(status_path: str, *, timeout_s: float, dropped: Any = None) -> dict[str, Any]:
    """The fork server's status once its imports are done (``ok`` False where it exited, took
    longer than ``timeout_s``, or ``dropped``, a callable asked meanwhile, returned why it is no
    longer wanted; it is then ended)."""
    import multiprocessing.forkserver

    server: Any = multiprocessing.forkserver._forkserver
    pid = server._forkserver_pid
    t_end = time.monotonic() + timeout_s
    while True:
        if os.path.exists(status_path):
            with open(status_path) as f:
                status: dict[str, Any] = json.load(f)
            break
        if pid is None or not autotune_prefork.fork_server_alive(pid):
            status = {"ok": False, "why_not": "the fork server exited during its imports"}
            break
        if time.monotonic() > t_end:
            status = {"ok": False, "why_not": f"its imports took more than {timeout_s:.0f} s"}
            break
        why = dropped() if dropped is not None else None
        if why is not None:
            status = {"ok": False, "why_not": why}
            break
        time.sleep(0.05)
    if not status.get("ok"):
        _end(server)
    return status


def _end(server: Any) -> None:
    """multiprocessing's fork server ``server`` ended, whether it is importing, waiting or gone."""
    pid = server._forkserver_pid
    if pid is None:
        return
    if autotune_prefork.fork_server_alive(pid):
        # It notices the closed pipe that _stop() relies on only once its imports are done: ended
        # now instead (this process's own child, by pid).
        os.kill(pid, signal.SIGKILL)
        server._stop()
        return
    # Already reaped (by _fork_server_alive), which _stop()'s own wait would fail on.
    os.close(server._forkserver_alive_fd)
    server._forkserver_alive_fd = server._forkserver_pid = None
    address, server._forkserver_address = server._forkserver_address, None
    from multiprocessing import util

    if address and not util.is_abstract_socket_namespace(address):
        try:
            os.unlink(address)
        except OSError:
            pass
