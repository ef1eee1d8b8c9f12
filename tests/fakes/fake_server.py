"""A stand-in server for the ServerProcess tests: stdlib only, misbehaves on request.

It always starts a child (``sleep 600``) first, so tests can check that the whole process group,
grandchildren included, is stopped. ``GET /health`` (and ``/health_generate``) answers 503 until it
is ready, then 200; ``GET /pids`` answers ``{"pid", "pgid", "child_pid", "port"}``.

Run it as a script: ``python tests/fakes/fake_server.py --port 12345 [--startup-delay 1] ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--startup-delay", type=float, default=0.0,
                   help="seconds during which health answers 503 (bound and listening)")
    p.add_argument("--bind-delay", type=float, default=0.0,
                   help="seconds before binding the port at all (connection refused meanwhile)")
    p.add_argument("--crash-at-start", type=int, metavar="CODE", default=None,
                   help="print an error and exit with CODE before binding")
    p.add_argument("--never-ready", action="store_true", help="health answers 503 forever")
    p.add_argument("--crash-after", type=float, metavar="S", default=None,
                   help="exit S seconds after becoming ready")
    p.add_argument("--crash-code", type=int, default=3, help="exit code for --crash-after")
    p.add_argument("--ignore-sigterm", action="store_true",
                   help="ignore SIGTERM (the child inherits it), so only SIGKILL stops it")
    p.add_argument("--fail-bind-once", metavar="FLAG_FILE", default=None,
                   help="if FLAG_FILE does not exist: create it, report a lost port race and exit 1")
    p.add_argument("--no-child", action="store_true", help="do not start the sleep child")
    p.add_argument("--print-env", metavar="NAME", action="append", default=[],
                   help="print NAME=value of this environment variable at start")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the fake server until killed (or until a requested crash)."""
    args = _parse(argv)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child across exec
    child_pid = None
    if not args.no_child:
        child_pid = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL).pid
    print(f"fake_server: pid={os.getpid()} pgid={os.getpgid(0)} child_pid={child_pid} "
          f"port={args.port}", flush=True)
    for name in args.print_env:
        print(f"fake_server: env {name}={os.environ.get(name)}", flush=True)

    if args.fail_bind_once and not os.path.exists(args.fail_bind_once):
        open(args.fail_bind_once, "w").close()
        print("OSError: [Errno 98] Address already in use", file=sys.stderr, flush=True)
        return 1
    if args.crash_at_start is not None:
        print(f"fake_server: error: simulated start-up failure (exit {args.crash_at_start})",
              file=sys.stderr, flush=True)
        return args.crash_at_start

    time.sleep(args.bind_delay)
    started = time.monotonic()

    def ready() -> bool:
        return not args.never_ready and time.monotonic() - started >= args.startup_delay

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's naming
            if self.path in ("/health", "/health_generate"):
                self._send(200 if ready() else 503, {"ready": ready()})
            elif self.path == "/pids":
                self._send(200, {"pid": os.getpid(), "pgid": os.getpgid(0), "child_pid": child_pid,
                                 "port": args.port})
            else:
                self._send(404, {"error": f"no route {self.path}"})

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *a: object) -> None:
            pass  # keep the log to what the tests read

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"fake_server: listening on {args.host}:{args.port}", flush=True)

    if args.crash_after is not None:
        def crash() -> None:
            time.sleep(args.startup_delay + args.crash_after)
            print(f"fake_server: simulated crash (exit {args.crash_code})", file=sys.stderr, flush=True)
            os._exit(args.crash_code)
        threading.Thread(target=crash, daemon=True).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
