"""Whether a standby's main-block imports pass their check in SGLang's real launcher, in one short run.

    python3 scripts/gpu/main_block_check.py --out DIR [--timeout-s 90] -- SERVER ARGS...
    (in the GPU kit's environment; carry .gpu/kit)

A standby with the backend's ``preimport`` and ``main_block`` (``autotune.server.standby``) is started
in this environment and handed ``python -m sglang.launch_server SERVER ARGS``; the server log is read
until the standby's line says the main block was checked or the launcher re-executed itself (or the
time is up), and the server is stopped there: a check of the mechanism, not a measurement. Prints
the standby's report and the line; ``DIR/main-block-check.log`` is the server log. Exit 0 where the
main block was checked.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))

from autotune.backend import get_backend  # noqa: E402
from autotune.server.group import release_watchdog, stop_group  # noqa: E402
from autotune.server.standby import Standby, main_block_outcome  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout-s", type=float, default=90.0)
    parser.add_argument("--backend", default="sglang")
    parser.add_argument("server_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    b = get_backend(args.backend)
    env = dict(os.environ)
    t0 = time.monotonic()
    held = Standby(python=sys.executable, module=b.module, preimport=b.preimport, env=env, cwd=os.getcwd(),
                   late_env=b.late_env, log_path=args.out / "standby.log", main_block=b.main_block,
                   plugin_groups=b.plugin_groups)
    if not held.ready(timeout_s=args.timeout_s):
        print("the standby was not ready:", (args.out / "standby.log").read_text()[-2000:])
        held.discard()
        return 1
    print(f"standby ready after {time.monotonic() - t0:.1f} s: import_s {held.import_s}, "
          f"main block {held.main_block}", flush=True)
    log = args.out / "main-block-check.log"
    server_args = [a for a in args.server_args if a != "--"]
    proc = held.hand_over([sys.executable, "-m", b.module, *server_args], env=env, cwd=os.getcwd(), log_path=log)
    t1 = time.monotonic()
    outcome = None
    try:
        while time.monotonic() - t1 < args.timeout_s and proc.poll() is None:
            outcome = main_block_outcome(log)
            if outcome is not None:
                break
            time.sleep(0.2)
        outcome = outcome or main_block_outcome(log)
        print(f"after {time.monotonic() - t1:.1f} s: {outcome}; server exit {proc.poll()}", flush=True)
    finally:
        stop_group(proc, grace_s=5.0)
        reaper = held.take_watchdog()
        if reaper is not None:
            release_watchdog(reaper)
    return 0 if outcome is not None and outcome.get("checked") else 1


if __name__ == "__main__":
    sys.exit(main())
