"""Server start-up with and without a standby launcher (``measure.standby``), in one process.

    python3 scripts/gpu/standby_ab.py [--space scripts/gpu/h200-llama-8b.yaml] [--budget-s 470]
        [--cycles 3] [--backend sim] [--prefork] --out DIR

One EAGLE3 config (3-1-4) on the space's lean start and a short workload (as
``scripts/gpu/startup_ab.py``: 2 x 256 tokens, 1 warm-up prompt, 3 repeats), measured by
:func:`autotune.trial.measure.measure` in this process, so that a standby started beside one server
can launch the next. Each cycle runs three servers, in this order:

- ``fresh``: a fresh launch while a standby for the next server imports beside its start-up;
- ``standby``: the launch by that standby;
- ``off``: a fresh launch with no standby anywhere (the one held is ended first).

``off`` comes last so that the host's first server, whose start-up pays cold caches (81 s against
64-70 s warm for the 8B shape in the ninth session), is never the reference a standby's start-up is
held against: one cycle is then a fair A/B (scripts/gpu/standby_verdict.py).

Printed per run and as medians per kind: SGLang's stages from the server log (launcher,
tokenizer+spawn, scheduler, warm-up), the prefill graphs' capture (seconds and sizes: the lean
start's prefill cap at work, against 9.1-12.1 s for 58 sizes in the committed logs without it),
autotune's ``startup_s``, the tok/s of the 3 repeats, and, for
the runs measured with a standby waiting beside them, its CPU seconds over the measurement (0
expected: it waits blocked on its stdin) and the GPU memory it holds by ``nvidia-smi`` (0 expected:
its imports create no CUDA context; a context there would shrink the next server's KV pool).
The questions: does ``standby`` start faster than ``off``
(by the launcher's imports), is ``fresh`` slower than ``off`` (two processes importing at once),
and do ``fresh`` and ``standby`` read the same tok/s as ``off`` (an idle standby beside them).
Written to ``DIR/standby-ab.json`` with every run's result; the server logs stay in ``DIR/logs``.
With ``--prefork`` it is the fork server's A/B (``measure.prefork``) instead: after one ``fresh``
server, ``standby`` (launched by a plain standby, a standby with a fork server waiting beside its
measurement) and ``prefork`` (launched by that standby, its scheduler and detokenizer forked from
the fork server) alternate, each cycle one of each; ``forked`` and ``spawned`` count how the
server's children started (from its log), and the waiting standby's CPU seconds and GPU memory
cover its fork server too (its whole session). Judged by ``scripts/gpu/prefork_verdict.py``.
``--backend sim`` dry-runs it on the emulator. Exit 0 when every run succeeded and every standby
expected to launch a server did.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE / "scripts" / "gpu"))
sys.path.insert(1, str(HERE))

from prefill_capture import captures  # noqa: E402
from startup_ab import EAGLE3, fmt_cell, variant  # noqa: E402
from startup_breakdown import breakdown  # noqa: E402

KINDS = ("fresh", "standby", "off")
COLUMNS = ("launcher", "tokenizer+spawn", "scheduler", "scheduler_e2e", "prefill_capture_s", "prefill_sizes",
           "warmup", "startup_s", "main_block", "next_waited_s", "tok_s", "standby_cpu_s", "standby_gpu_mib",
           "max_total_num_tokens")
PREFORK_KINDS = ("standby", "prefork")
PREFORK_COLUMNS = ("prefork_ok", "forked", "spawned")


def one_run(space_path: Path, *, kind: str, out: Path, next_prefork: bool = False) -> dict[str, Any]:
    """One server of ``kind``, measured in this process, with a standby for the next server beside
    it (one with a fork server where ``next_prefork``)."""
    from autotune.server.group import session_pids
    from autotune.space.search_space import load_space
    from autotune.space.workload import Workload
    from autotune.trial import standby_slot
    from autotune.trial.measure import measure
    from autotune.trial.measure_settings import settings_for

    space = load_space(space_path)
    if kind == "off":
        standby_slot.discard()
    settings = settings_for(space, workdir=str(out / "logs"), standby=kind != "off", prefork=next_prefork)
    t0 = time.monotonic()
    result = measure(space.trial_config(EAGLE3), Workload.from_spec(space.workload, file=space.file), settings,
                     name=f"{kind}")
    row: dict[str, Any] = {"kind": kind, "ok": result.ok, "reason": result.reason, "wall_s": time.monotonic() - t0,
                           "startup_s": result.startup_s, "repeats": result.output_tok_s_repeats,
                           "tok_s": result.output_tok_s, "standby": result.standby}
    if result.standby is not None:
        row["standby_cpu_s"] = result.standby.get("next_cpu_s_measuring")
        row["next_waited_s"] = result.standby.get("next_waited_s")
        row["used"] = result.standby.get("used")
        fork = result.standby.get("prefork")
        row["prefork_ok"] = None if fork is None else bool(fork.get("ok"))
        children = result.standby.get("children") or {}
        row["forked"], row["spawned"] = children.get("forked"), children.get("spawned")
        row["why_spawned"] = children.get("why_spawned")
        # The standby's imports from the launcher's main block: checked where it asked for them, or
        # the launcher re-executed as a fresh launch (autotune_main_block).
        checked = result.standby.get("main_block_checked") or {}
        row["main_block"] = ("relaunched" if checked.get("relaunched") else "checked" if checked.get("checked")
                             else None)
        row["main_block_why"] = checked.get("relaunched")
    # The KV pool SGLang sized: a standby holding GPU memory while this server started would shrink it.
    row["max_total_num_tokens"] = (result.server_info or {}).get("max_total_num_tokens")
    held = standby_slot._held  # the standby started beside this run, waiting for the next
    row["standby_gpu_mib"] = _gpu_mib(set(session_pids(held.pid))) if held is not None else None
    if result.log_path and Path(result.log_path).exists():
        stages = breakdown(Path(result.log_path))
        row.update({k: stages.get(k) for k in ("launcher", "tokenizer+spawn", "scheduler", "scheduler_e2e",
                                                "warmup")})
        # The lean start's prefill cap at work (the committed H200 logs without it: 9.1-12.1 s, 58 sizes).
        caught = captures(Path(result.log_path).read_text(errors="replace"), cap=0)
        row["prefill_capture_s"] = sum(c["elapsed_s"] for c in caught) if caught else None
        row["prefill_sizes"] = max((c["sizes"] for c in caught), default=None)
    (out / f"run-{len(list(out.glob('run-*.json'))):02d}-{kind}.json").write_text(
        json.dumps(result.to_dict(), indent=1, default=str))
    return row


def _fork_server_imports(modules: list[str]) -> None:
    """This A/B's fork servers import ``modules`` (the standby is started from this process)."""
    import dataclasses

    from autotune.backend import get_backend
    from autotune.trial import standby_slot

    real = get_backend

    def patched(name: str) -> Any:
        b = real(name)
        return dataclasses.replace(b, prefork=tuple(modules)) if b.prefork else b

    standby_slot.get_backend = patched
    print(f"the fork servers import {len(modules)} modules from the probe", flush=True)


def _gpu_mib(pids: set[int]) -> float | None:
    """The GPU memory ``pids`` hold by nvidia-smi (0: none, they have no CUDA context); None without
    nvidia-smi (the emulator's dry run)."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    used = [float(mib) for p, mib in (line.split(",") for line in out.splitlines() if "," in line)
            if p.strip() in {str(pid) for pid in pids}]
    return sum(used)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--space", type=Path, default=HERE / "scripts" / "gpu" / "h200-llama-8b.yaml")
    ap.add_argument("--budget-s", type=float, default=470.0)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--backend", choices=("sglang", "sim"), default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prefork", action="store_true", help="the fork server's A/B (measure.prefork)")
    ap.add_argument("--prefork-modules", type=Path, default=None,
                    help="what the fork server imports instead of the backend's list, one module a line "
                         "(scripts/gpu/prefork_probe.py's prefork-modules.txt)")
    args = ap.parse_args(argv)
    if args.prefork_modules is not None:
        _fork_server_imports(args.prefork_modules.read_text().split())
    t_end = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(HERE)]))
    if args.backend == "sim":
        os.environ.setdefault("AUTOTUNE_SIM_STARTUP_S", "3")
    space = variant(args.space, lean=True, keep_graphs=True, backend=args.backend)
    import yaml

    # The server the runs really had (the space's own where --backend is not given): the verdict
    # (standby_verdict.py) asks for a measured GPU figure only on a real GPU.
    backend = yaml.safe_load(space.read_text()).get("backend") or "sglang"
    rows: list[dict[str, Any]] = []
    kinds = ("fresh", *PREFORK_KINDS) if args.prefork else KINDS
    columns = (*COLUMNS, *PREFORK_COLUMNS) if args.prefork else COLUMNS
    order = ([(0, "fresh")] + [(c, k) for c in range(args.cycles) for k in PREFORK_KINDS] if args.prefork
             else [(c, k) for c in range(args.cycles) for k in KINDS])
    try:
        for at, (cycle, kind) in enumerate(order):
            # A host's first server is cold (its kernels compiled: 136 s against 43-62 s on an
            # H100), so it does not size the runs after it once a warm one has been seen.
            slowest = max((r["wall_s"] for r in rows[1:] or rows), default=150.0)
            if time.monotonic() + slowest * 1.1 > t_end:
                print(f"cycle {cycle} {kind}: not started, {t_end - time.monotonic():.0f} s left", flush=True)
                continue
            next_prefork = args.prefork and at + 1 < len(order) and order[at + 1][1] == "prefork"
            row = {"cycle": cycle, **one_run(space, kind=kind, out=args.out, next_prefork=next_prefork)}
            rows.append(row)
            print(" | ".join(f"{c}={fmt_cell(row.get(c))}" for c in ("cycle", "kind", "ok", "used", *columns)),
                  flush=True)
            if row.get("why_spawned"):
                print(f"  spawned: {'; '.join(row['why_spawned'])}", flush=True)
            if kind == "prefork" and not (row.get("prefork_ok") and row.get("spawned") == 0):
                # The verdict fails on this run already: the device time left is worth more elsewhere.
                print(f"stopping: the fork server was not used ({(row.get('standby') or {}).get('prefork')})",
                      flush=True)
                break
    finally:
        space.unlink(missing_ok=True)
        from autotune.trial import standby_slot

        standby_slot.discard()
    print("\n| kind | n | " + " | ".join(columns) + " |\n|---|---|" + "---|" * len(columns))
    summary: dict[str, dict[str, float | None]] = {}
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind and r["ok"]]
        summary[kind] = {c: _middle([r[c] for r in mine if r.get(c) is not None]) for c in columns}
        print(f"| {kind} | {len(mine)} | " + " | ".join(fmt_cell(summary[kind][c]) for c in columns) + " |")
    (args.out / "standby-ab.json").write_text(json.dumps(
        {"space": str(args.space), "backend": backend, "config": EAGLE3, "rows": rows,
         "summary": summary, "prefork": args.prefork}, indent=1, default=str))
    launched = all(r.get("used") for r in rows if r["kind"] in ("standby", "prefork"))
    return 0 if rows and all(r["ok"] for r in rows) and launched else 1


def _middle(values: list[Any]) -> Any:
    """The median of numbers; of words (``main_block``), each one and its count."""
    if not values:
        return None
    if all(isinstance(v, (int, float)) for v in values):
        return statistics.median(values)
    return ", ".join(f"{v} x{values.count(v)}" for v in sorted(set(map(str, values))))


if __name__ == "__main__":
    sys.exit(main())
