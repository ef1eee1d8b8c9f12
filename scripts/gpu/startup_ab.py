"""Warm trial start-up before and after the lean start, through ``python -m autotune.trial``.

    python3 scripts/gpu/startup_ab.py [--space scripts/gpu/h200-llama-8b.yaml] [--budget-s 470]
        [--pairs 3] [--keep-space-graphs] [--backend sim] --out DIR

Two variants of the space, each a copy written beside it (so its relative model paths hold):
``before`` is today's launch (``measure.lean_start: false``), ``after`` the lean start
(``autotune.sglang.trial_start``). Both drop the space's own ``cuda_graph_max_bs_decode`` (unless
``--keep-space-graphs``), so ``before`` captures SGLang's default decode graphs as a space that does
not set them does, and ``after`` shows the cut. Both measure a short workload (2 prompts of 256
tokens, 1 warm-up prompt, 3 repeats, no stabilising passes: the case where the trial's own warm-up
is smallest, so a first repeat slowed by a skipped SGLang warm-up would show).

Runs alternate before/after (the order swapped every pair); the pairs run the plain config, then
the EAGLE3 config (3-1-4) twice, then again from plain; each run is a fresh ``python -m autotune.trial
--json`` process. The first plain run of a variant stores its baseline, which that variant's EAGLE3
runs reuse (so each run starts one server). A run
starts only if the slowest run so far (or 150 s) fits in what is left of ``--budget-s``. Printed per
run and as medians per variant: SGLang's stages from the server log
(``scripts/gpu/startup_breakdown.py``: launcher, tokenizer+spawn, scheduler, warm-up), autotune's
``startup_s`` and its ratio to SGLang's scheduler start plus warm-up (target <= 1.5), the stop
(SIGTERM to the log's last line), ``duration_s`` (the server's whole GPU time), the first repeat
against the median of the others, and the process's wall time. Written to ``DIR/startup-ab.json``
with every run's trial JSON and server log. Exit 0 when every run that started succeeded.

``--backend sim`` dry-runs the same on the emulator (no GPU): 2 s start-ups and SGLang's 5 s stop
pause (``AUTOTUNE_SIM_STOP_DIAG_S``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE / "scripts" / "gpu"))

from prefill_capture import captures  # noqa: E402
from startup_breakdown import breakdown  # noqa: E402

EAGLE3 = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
          "speculative_num_draft_tokens": 4}
PLAIN = {"speculative_algorithm": None}
WORKLOAD = {"num_prompts": 2, "warmup_prompts": 1, "output_len": 256}
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]")
FIRST_RUN_GUESS_S = 150.0


def variant(space: Path, *, lean: bool, keep_graphs: bool, backend: str | None) -> Path:
    """The space with this variant's measure settings, written beside it."""
    data = yaml.safe_load(space.read_text())
    if not keep_graphs:
        for key in ("cuda_graph_max_bs_decode", "cuda_graph_max_bs"):
            (data.get("fixed_args") or {}).pop(key, None)
    data["workload"] = {**data["workload"], **WORKLOAD}
    measure = dict(data.get("measure") or {})
    measure.pop("warmup_until_stable_pct", None)
    measure.pop("warmup_max_rounds", None)
    data["measure"] = {**measure, "repeats": 3, "lean_start": lean}
    data["name"] = f"{data['name']}-startup-{'after' if lean else 'before'}"
    if backend == "sim":
        data.update(backend="sim", profile="llama-3.1-8b-eagle3-h100", model_path="sim/Llama-3.1-8B-Instruct",
                    draft_model_path="sim/EAGLE3-LLaMA3.1-Instruct-8B")
    out = space.parent / f".startup-ab-{'after' if lean else 'before'}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _stop_s(log: Path) -> float | None:
    """SIGTERM to the log's last stamped line (whole seconds): how long the server took to stop."""
    import datetime as dt

    sigterm = last = None
    for line in log.read_text(errors="replace").splitlines():
        m = STAMP.match(line)
        if not m:
            continue
        when = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
        last = when
        if sigterm is None and ("SIGTERM" in line or "Received SIGTERM" in line):
            sigterm = when
    return None if sigterm is None or last is None else last - sigterm


def _first_vs_rest(repeats: list[float]) -> float | None:
    """The first repeat's tok/s over the median of the others (below 1: the first was slower)."""
    if len(repeats) < 2:
        return None
    return repeats[0] / statistics.median(repeats[1:])


def one_run(space: Path, params: dict[str, Any], *, out: Path, tag: str, store: Path | None,
            env: dict[str, str]) -> dict[str, Any]:
    """One ``python -m autotune.trial`` process and what its record and server log say."""
    rec_path = out / f"{tag}.json"
    logs = out / f"{tag}-logs"
    cmd = [sys.executable, "-m", "autotune.trial", "--space", str(space), "--params", json.dumps(params),
           "--json", "-o", str(rec_path), "--workdir", str(logs)]
    if store is not None:
        cmd += ["--baseline-store", str(store)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    row: dict[str, Any] = {"run": tag, "rc": proc.returncode, "wall_s": wall}
    if proc.returncode != 0 or not rec_path.exists():
        row["error"] = (proc.stderr or proc.stdout)[-2000:]
        return row
    rec = json.loads(rec_path.read_text())
    row.update(startup_s=rec.get("startup_s"), duration_s=rec.get("duration_s"),
               output_tok_s=rec.get("output_tok_s"), repeats=rec.get("output_tok_s_repeats"),
               first_vs_rest=_first_vs_rest(rec.get("output_tok_s_repeats") or []),
               launch_command=rec.get("launch_command"))
    log = Path(rec["log_path"]) if rec.get("log_path") else None
    if log is not None and log.exists():
        stages = breakdown(log)
        row.update({k: stages.get(k) for k in ("launcher", "tokenizer+spawn", "scheduler", "warmup", "total")})
        row["stop_s"] = _stop_s(log)
        # The prefill graphs' capture (target and draft), which the lean start caps.
        caught = captures(log.read_text(errors="replace"), cap=0)
        row["prefill_capture_s"] = sum(c["elapsed_s"] for c in caught) if caught else None
        row["prefill_sizes"] = max((c["sizes"] for c in caught), default=None)
        sglang_own = (stages.get("scheduler") or 0.0) + (stages.get("warmup") or 0.0)
        row["sglang_scheduler_plus_warmup_s"] = sglang_own or None
        row["ratio"] = (rec["startup_s"] / sglang_own) if sglang_own and rec.get("startup_s") else None
    return row


COLUMNS = ("launcher", "tokenizer+spawn", "scheduler", "prefill_capture_s", "prefill_sizes", "warmup",
           "sglang_scheduler_plus_warmup_s", "startup_s", "ratio", "stop_s", "duration_s", "first_vs_rest", "wall_s")


def fmt_cell(v: Any) -> str:
    """A table cell: ``-`` for None, floats to two places."""
    return "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Median and range of every column, per variant and config."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for group in sorted({r["group"] for r in rows}):
        mine = [r for r in rows if r["group"] == group and "error" not in r]
        out[group] = {}
        for col in COLUMNS:
            vals = [r[col] for r in mine if r.get(col) is not None]
            if vals:
                out[group][col] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                                   "n": len(vals)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--space", type=Path, default=HERE / "scripts" / "gpu" / "h200-llama-8b.yaml")
    ap.add_argument("--budget-s", type=float, default=470.0)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--keep-space-graphs", action="store_true")
    ap.add_argument("--backend", choices=("sglang", "sim"), default=None)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    t_end = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(HERE)]))}
    if args.backend == "sim":
        env.setdefault("AUTOTUNE_SIM_STARTUP_S", "2")
        env.setdefault("AUTOTUNE_SIM_STOP_DIAG_S", "5")
    spaces = {lean: variant(args.space, lean=lean, keep_graphs=args.keep_space_graphs, backend=args.backend)
              for lean in (False, True)}
    stores = {lean: args.out / f"baselines-{'after' if lean else 'before'}" for lean in (False, True)}
    rows: list[dict[str, Any]] = []
    try:
        for k in range(args.pairs):
            name, params = ("plain", PLAIN) if k % 3 == 0 else ("eagle3", EAGLE3)
            for lean in ((False, True) if k % 2 == 0 else (True, False)):
                slowest = max((r["wall_s"] for r in rows), default=FIRST_RUN_GUESS_S)
                if time.monotonic() + slowest * 1.1 > t_end:
                    print(f"pair {k} {name}: not started, {t_end - time.monotonic():.0f} s left "
                          f"(slowest run so far {slowest:.0f} s)", flush=True)
                    continue
                label = "after" if lean else "before"
                # The first plain run of a variant measures and stores its baseline; a later plain
                # run is measured afresh (a stored baseline would be returned unmeasured).
                store = stores[lean] if name == "eagle3" or not stores[lean].exists() else None
                row = one_run(spaces[lean], params, out=args.out, tag=f"p{k}-{name}-{label}", store=store, env=env)
                row.update(pair=k, config=name, variant=label, group=f"{label}/{name}")
                rows.append(row)
                print(" | ".join(f"{c}={fmt_cell(row.get(c))}" for c in ("run", "rc", *COLUMNS)), flush=True)
    finally:
        for path in spaces.values():
            path.unlink(missing_ok=True)
    med = summary(rows)
    print("\n| variant/config | " + " | ".join(COLUMNS) + " |\n|---|" + "---|" * len(COLUMNS))
    for group, cols in med.items():
        print(f"| {group} (n={max((c['n'] for c in cols.values()), default=0)}) | "
              + " | ".join(fmt_cell(cols[c]["median"]) if c in cols else "-" for c in COLUMNS) + " |")
    counts = {v: sum(1 for r in rows if r["variant"] == v and "error" not in r) for v in ("before", "after")}
    print(f"\nruns: before {counts['before']}, after {counts['after']} (target >= 3 each)")
    (args.out / "startup-ab.json").write_text(json.dumps(
        {"space": str(args.space), "backend": args.backend or "space", "keep_space_graphs": args.keep_space_graphs,
         "workload": WORKLOAD, "rows": rows, "summary": med, "counts": counts}, indent=1, default=str))
    for tmp in stores.values():
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r.get("rc") == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
