"""A server launcher that has already imported what its module imports first, waiting for its argv.

Run by :class:`autotune.server.standby.Standby` as ``python FILE MODULE [PREIMPORT ...]`` in the
environment the next server will have. It imports ``PREIMPORT`` (what
``python -m MODULE`` imports before the first statement of its main block), prints ``ready`` and
blocks reading one JSON line from stdin: ``{"args": [...], "log": PATH, "cwd": DIR, "env": {NAME:
VALUE or null}}``, ``env`` being the few variables the caller found different and allowed to be (only the
server's child processes read them, after this point). Then it becomes that server: its stdout
and stderr go to the log, stdin to /dev/null, and it runs ``MODULE`` as ``__main__`` with
``args``, as ``python -m MODULE ARGS`` would, in the same process (so the same pid, session and
process group the caller already watches). End of file on stdin, before a line comes, means it is
not wanted: it exits 0.

With ``--prefork FILE`` after the imports (FILE: ``{"modules": [...], "scans": {MODULE: [PREFIX, ...]},
"rebind": {VARIABLE: {...}}, "dir": DIR}``, removed once read), it
also starts multiprocessing's fork server, which imports those modules (what the server's child
processes import) meanwhile, and says ``ready`` only when both are done; the server then forks its
children from it where that is the same as a spawn (``autotune/server/_prefork/autotune_prefork.py``).
Where its own imports are done first it says so (``{"importing": "the fork server", ...}``) and,
until the fork server is done, takes one order on stdin: ``{"drop_prefork": WHY}`` ends the fork
server, and the standby says ``ready`` without one (the caller's server started sooner than the
fork server's imports ended, and nothing may import while it is measured). One that crosses the
fork server's end finds nothing to drop: it is read and ignored before the launch order.

Standard library only and no package-relative imports: it runs from its file path, and nothing of
autotune is loaded into the server it becomes but, with ``--prefork``, the fork server's own module
(standard library only as well).
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import sys
import tempfile
import time
from types import ModuleType
from typing import Any

#: How long the fork server's imports may take before it is given up (the standby's own have no cap:
#: the caller discards a standby still importing when it is needed).
_PREFORK_TIMEOUT_S = 600.0


def _origin(module: object) -> str | None:
    where = getattr(module, "__file__", None)
    return os.path.realpath(where) if where else None


class _Orders:
    """What the caller says on stdin while the fork server imports: only ``drop_prefork``."""

    def __init__(self) -> None:
        self.ended = False

    def dropped(self) -> str | None:
        """Why the fork server is no longer wanted, where the caller said so (or went away)."""
        if not select.select([sys.stdin], [], [], 0)[0]:
            return None
        line = sys.stdin.readline()
        if not line:
            self.ended = True
            return "the standby was ended"
        order = json.loads(line)
        if "drop_prefork" not in order:
            raise ValueError(f"a standby whose fork server imports takes only drop_prefork, not {line.strip()!r}")
        return f"dropped: {order['drop_prefork']}"


def _say(said: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(said) + "\n")
    sys.stdout.flush()


def _boot(name: str = "autotune_prefork") -> ModuleType:
    """One of the standard-library helpers beside this file, imported by its name (the fork server's
    module by the name its pickled functions carry)."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_prefork")
    sys.path.append(folder)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(folder)


def _option(args: list[str], name: str) -> str | None:
    """Removes ``name VALUE`` from ``args`` (the options follow the module names); returns VALUE."""
    if name not in args:
        return None
    at = args.index(name)
    value = args[at + 1]
    del args[at:at + 2]
    return value


def main(argv: list[str]) -> int:
    module, preimport = argv[0], argv[1:]
    prefork: dict[str, object] = {}
    spec_path = _option(preimport, "--prefork")
    main_block = json.loads(_option(preimport, "--main-block") or "{}")
    if spec_path is not None:
        with open(spec_path) as f:
            prefork = json.load(f)
        os.unlink(spec_path)
    # `python FILE` put this file's folder first on sys.path, `python -m MODULE` puts the working
    # directory there. The imports run with neither; the caller checks that the server's working
    # directory would not give any top-level module imported ("roots") from another file, so
    # that a fresh launch would have imported the same files.
    sys.path.pop(0)
    # What a fresh launch starts from (the imports below may add to it): the launcher re-executes
    # itself in this, given the caller's late variables, where a main-block check fails.
    started_env = dict(os.environ)
    t0 = time.monotonic()
    # The fork server's status and module list go beside the standby's log (the trial's folder).
    folder = str(prefork.get("dir") or tempfile.gettempdir())
    boot, status_path = (_boot(), os.path.join(folder, f"prefork-{os.getpid()}.json")) if prefork else (None, "")
    fork_server = _boot("autotune_prefork_server") if prefork else None
    if fork_server is not None:  # its imports run beside this process's own
        fork_server.start(prefork["modules"], status_path, scans=prefork.get("scans"), rebind=prefork.get("rebind"))
    for name in preimport:
        importlib.import_module(name)
    # Its environment helper applies the caller's late variables at the hand-over too, with or without
    # a main block: loaded here, before the hand-over, not on the launch's path.
    helpers = _boot("autotune_main_block")
    ahead: ModuleType | None = None
    plan: dict[str, dict[str, Any]] = {}
    said_main: dict[str, object] | None = None
    if main_block.get("modules"):
        ahead = helpers
        plugins = ahead.plugins_installed(main_block.get("unless") or [])
        failed: list[str] = []
        if not plugins:
            plan = ahead.import_ahead(main_block["modules"], scans=main_block.get("scans") or {}, failed=failed)
        said_main = {"modules": sum(len(group["modules"]) for group in plan.values()), "failed": failed,
                     "why_not": f"plugins installed: {', '.join(plugins)}" if plugins else None}
    import_s = round(time.monotonic() - t0, 3)
    # Where each top-level module came from (None for built-in ones).
    roots = {name: _origin(mod) for name, mod in list(sys.modules.items()) if "." not in name}
    said: dict[str, object] = {"ready": True, "import_s": import_s}
    if said_main is not None:
        said["main_block"] = said_main
    status: dict[str, object] = {}
    if fork_server is not None:
        orders = _Orders()
        if not os.path.exists(status_path):
            _say({"importing": "the fork server", "import_s": import_s})
        status = fork_server.wait(status_path, timeout_s=_PREFORK_TIMEOUT_S, dropped=orders.dropped)
        for done in (status_path, status_path + ".modules", status_path + ".tmp"):
            if os.path.exists(done):
                os.unlink(done)
        if orders.ended:
            return 0
        roots = {**(status.get("roots") or {}), **roots}  # type: ignore[dict-item]
        read = status.get("read")
        said["prefork"] = {"ok": bool(status.get("ok")), "why_not": status.get("why_not"), "pid": status.get("pid"),
                           "import_s": status.get("import_s"), "ready_s": round(time.monotonic() - t0, 3),
                           "read": len(read) if isinstance(read, list) else None,
                           "copied_by": status.get("copied_by"), "modules": status.get("modules"),
                           "skipped": status.get("skipped_n"), "cuda_answers": status.get("cuda_answers"),
                           "driver_init": status.get("driver_init"), "rebind": status.get("rebind")}
    said["roots"] = roots
    _say(said)
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        order = json.loads(line)
        # A drop order sent as the fork server finished its imports finds it done: nothing to drop.
        if "drop_prefork" not in order:
            break
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.open(order["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.chdir(order["cwd"])
    sys.path.insert(0, os.getcwd())
    late = order.get("env") or {}
    helpers.given(os.environ, late)
    if boot is not None:  # where the fork server is not there, each child says so in the log
        boot.install(status)
    if ahead is not None and plan:
        _check_main_block(ahead, plan, module=module, args=order["args"], late=main_block.get("late") or [],
                          fresh_env=ahead.given(started_env, late))
    sys.argv = [module, *order["args"]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def _check_main_block(ahead: ModuleType, plan: dict[str, dict[str, Any]], *, module: str, args: list[str],
                      late: list[str], fresh_env: dict[str, str]) -> None:
    """From here, each group imported ahead from the main block is checked where the launcher asks
    for it; where one read or wrote another value, this process becomes the fresh launch, in
    ``fresh_env``."""

    def relaunch(why: str) -> None:
        _log(f"{ahead.TAG}{ahead.RELAUNCHED}{why}")
        os.execve(sys.executable, [sys.executable, "-m", module, *args], fresh_env)

    ahead.Check(plan, late=late, relaunch=relaunch, say=_log).install()


def _log(line: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
