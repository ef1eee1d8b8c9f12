"""One GPU's share of the real-SGLang run: each config through ``python -m autotune.trial``.

Usage (on the remote GPU host, from the repo root, CUDA_VISIBLE_DEVICES naming one GPU):
    python3 scripts/gpu/lane.py [--fast SPACE] [--full SPACE] OUTDIR CONFIG [CONFIG ...]

CONFIG is ``plain`` or ``STEPS-TOPK-DRAFT@ACC`` (EAGLE3 with SGLANG_SIMULATE_ACC_LEN=ACC), optionally
prefixed ``full:`` to use the twin space that keeps prefill CUDA graphs. Every call names the same
``--baseline-store``, so a lane measures its plain baseline once (the first ``plain``) and every
speculative config is judged against it. Each call's JSON, stderr, phase table and wall time land in
OUTDIR; ``lane.json`` lists them in order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SPACES = {"fast": "scripts/gpu/real-sglang-h200.yaml",
          "full": "scripts/gpu/real-sglang-h200-full-graphs.yaml"}


def params_of(spec: str) -> dict:
    """``plain`` or ``S-K-N@ACC`` as the space's parameters."""
    if spec == "plain":
        return {"speculative_algorithm": None}
    shape, acc = spec.split("@")
    steps, topk, draft = (int(x) for x in shape.split("-"))
    return {"speculative_algorithm": "EAGLE3", "speculative_num_steps": steps,
            "speculative_eagle_topk": topk, "speculative_num_draft_tokens": draft,
            "SGLANG_SIMULATE_ACC_LEN": acc}


_stopped: list[int] = []


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run one trial CLI; a SIGTERM to this lane (its time is up) stops the trial, which stops its
    server, and the lane starts no further config."""
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop(signum: int, _frame: object) -> None:
        _stopped.append(signum)
        child.send_signal(signum)

    old = signal.signal(signal.SIGTERM, stop)
    try:
        stdout, stderr = child.communicate()
    finally:
        signal.signal(signal.SIGTERM, old)
    return subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fast", default=SPACES["fast"], help="space for plain configs")
    parser.add_argument("--full", default=SPACES["full"], help="space for full: configs")
    parser.add_argument("out")
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()
    spaces = {"fast": args.fast, "full": args.full}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lane = []
    for item in args.configs:
        kind, _, spec = item.rpartition(":")
        kind = kind or "fast"
        name = f"{kind}-{spec.replace('@', '-acc')}"
        cmd = [sys.executable, "-m", "autotune.trial", "--space", spaces[kind], "--params",
               json.dumps(params_of(spec)), "--json", "--baseline-store", str(out / f"baselines-{kind}"),
               "--workdir", str(out / "work" / name)]
        t0 = time.monotonic()
        proc = _run(cmd)
        wall = time.monotonic() - t0
        (out / f"{name}.json").write_text(proc.stdout)
        (out / f"{name}.err").write_text(proc.stderr)
        entry = {"name": name, "kind": kind, "spec": spec, "rc": proc.returncode, "wall_s": round(wall, 1),
                 "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "command": cmd}
        try:
            res = json.loads(proc.stdout)
            entry.update({k: res.get(k) for k in ("status", "output_tok_s", "output_tok_s_spread",
                                                   "baseline_tok_s", "speedup", "accept_length",
                                                   "break_even_accept_length", "startup_s", "duration_s")})
        except ValueError:
            entry["status"] = "no-json"
        lane.append(entry)
        (out / "lane.json").write_text(json.dumps(lane, indent=1))
        print(json.dumps({k: v for k, v in entry.items() if k != "command"}), flush=True)
        if _stopped:
            print(f"lane stopped by signal {_stopped[0]}; configs not run: "
                  f"{args.configs[len(lane):]}", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
