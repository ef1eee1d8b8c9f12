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

Standard library only and no package-relative imports: it runs from its file path, and nothing of
autotune is loaded into the server it becomes.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import time


def _origin(module: object) -> str | None:
    where = getattr(module, "__file__", None)
    return os.path.realpath(where) if where else None


def main(argv: list[str]) -> int:
    module, preimport = argv[0], argv[1:]
    # `python FILE` put this file's folder first on sys.path, `python -m MODULE` puts the working
    # directory there. The imports run with neither; the caller checks that the server's working
    # directory would not give any top-level module imported ("roots") from another file, so
    # that a fresh launch would have imported the same files.
    sys.path.pop(0)
    t0 = time.monotonic()
    for name in preimport:
        importlib.import_module(name)
    # Where each top-level module came from (None for built-in ones).
    roots = {name: _origin(mod) for name, mod in list(sys.modules.items()) if "." not in name}
    sys.stdout.write(json.dumps({"ready": True, "import_s": round(time.monotonic() - t0, 3), "roots": roots}) + "\n")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        return 0
    order = json.loads(line)
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
    for name, value in (order.get("env") or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    sys.argv = [module, *order["args"]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
