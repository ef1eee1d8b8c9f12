"""Figures of a real-search run brought back from the remote GPU host (scripts/gpu/device.sh).

Usage (here, from the repo root, after unpacking the call's results.tar.gz into DIR):
    python3 scripts/gpu/collect_search.py DIR [--json OUT] [--landscape-dir LDIR]

For each ``DIR/rs-*/NAME/`` it prints one table row per measured record (search trials and sweep),
then the figures the real search is run for, each computed from those records:
- the search's winner against the best config of the whole space (search and sweep together);
- the repeat spread of every config: robust (1.4826 MAD) and the full range, first repeat included;
- start-up: the wall time the tool waited against SGLang's own ``startup_time`` breakdown;
- orphans left behind after each step (from ``plan.json``);
and, with ``--landscape-dir``, writes one landscape per space (``scripts/gpu/landscape.py
--dedupe --drop-rejected``) that ``python -m autotune.bench_search --landscape`` replays.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _load(path: Path) -> dict | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def results_dir_of(root: Path) -> str | None:
    """The results folder on the remote GPU host, as ``device.sh`` wrote it into ``facts.txt``."""
    try:
        lines = (root / "facts.txt").read_text().splitlines()
    except OSError:
        return None
    return next((ln.split(" ", 1)[1].strip() for ln in lines if ln.startswith("results_dir ")), None)


def records_of(folder: Path) -> list[tuple[str, Path, dict]]:
    """(source, file, record) of the search's trials, then of the sweep."""
    out = []
    for source, pattern in (("search", "search/s*.json"), ("sweep", "sweep/c??.json")):
        for path in sorted(folder.glob(pattern)):
            rec = _load(path)
            if isinstance(rec, dict) and "params" in rec:
                out.append((source, path, rec))
    return out


def label(params: dict, *, plain: str = "plain") -> str:
    """``steps-topk-draft`` of a record's params, or ``plain`` for the no-speculation baseline."""
    if not params.get("speculative_algorithm"):
        return plain
    return "{}-{}-{}".format(params.get("speculative_num_steps"), params.get("speculative_eagle_topk"),
                             params.get("speculative_num_draft_tokens"))


def _f(v: Any, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def startup(rec: dict) -> tuple[float | None, float | None]:
    """(seconds the tool waited for health, SGLang's own total start-up) of one record."""
    own = rec.get("server_startup") or {}
    total = None
    if isinstance(own, dict):
        nums = [v for v in own.values() if isinstance(v, (int, float))]
        total = own.get("total") if isinstance(own.get("total"), (int, float)) else (max(nums) if nums else None)
    return rec.get("startup_s"), total


def cycle_range_pct(rec: dict) -> float | None:
    """The range of the repeats' tok/s per accepted length (speculative cycles a second), in %.

    With synthetic acceptance SGLang draws each cycle's accepted tokens at random, so a repeat's
    tok/s moves with its draws; dividing them out leaves what the server's speed did. None when
    any repeat lacks either figure (a plain server: its accept length is unknown, not 1).
    """
    rows = rec.get("repeat_breakdown") or []
    rates = [r["tok_s"] / r["accept_length"] for r in rows
             if r.get("tok_s") and r.get("accept_length")]
    if len(rates) < 2 or len(rates) != len(rows):
        return None
    return 100.0 * (max(rates) - min(rates)) / statistics.median(rates)


def row(source: str, rec: dict) -> dict[str, Any]:
    ph = rec.get("phases") or {}
    shares = ph.get("shares") or {}
    waited, own = startup(rec)
    return {"source": source, "config": label(rec["params"]), "params": rec["params"],
            "status": rec.get("status"), "tok_s": rec.get("output_tok_s"),
            "repeats": rec.get("output_tok_s_repeats"), "spread_pct": rec.get("output_tok_s_spread_pct"),
            "range_pct": rec.get("output_tok_s_range_pct"), "cycle_range_pct": cycle_range_pct(rec),
            "warmup_tok_s": rec.get("warmup_tok_s"),
            "warmup_stable": rec.get("warmup_stable"), "acceptance": rec.get("acceptance"),
            "forced_accept": rec.get("synthetic_accept_length"), "accept": rec.get("accept_length"),
            "draft_ms": ph.get("draft_ms"), "verify_ms": ph.get("verify_ms"), "extend_ms": ph.get("extend_ms"),
            "decode_ms": ph.get("decode_ms"), "other_ms": ph.get("other_ms"), "cycle_ms": ph.get("cycle_ms"),
            "verify_share": shares.get("verify"), "break_even": rec.get("break_even_accept_length"),
            "speedup": rec.get("speedup"), "baseline_tok_s": rec.get("baseline_tok_s"),
            "startup_wait_s": waited, "sglang_startup": rec.get("server_startup"), "sglang_startup_s": own,
            "duration_s": rec.get("duration_s")}


def table(rows: list[dict]) -> str:
    head = ("| source | config | tok/s | spread % (robust / range / per cycle) | accept (forced / read) | "
            "draft / verify / re-extend / other ms | verify share | break-even | speedup | verdict | "
            "start-up s (tool) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append("| {} | {} | {} | {} / {} / {} | {} / {} | {} / {} / {} / {} | {} | {} | {} | {} | {} |".format(
            r["source"], r["config"], _f(r["tok_s"]), _f(r["spread_pct"], ".2f"), _f(r["range_pct"], ".2f"),
            _f(r["cycle_range_pct"], ".2f"), _f(r["forced_accept"], ".2f"), _f(r["accept"], ".2f"),
            _f(r["draft_ms"], ".2f"), _f(r["verify_ms"], ".2f"), _f(r["extend_ms"], ".2f"),
            _f(r["other_ms"] if r["config"] != "plain" else r["decode_ms"], ".2f"),
            _f(r["verify_share"], ".0f"), _f(r["break_even"], ".2f"), _f(r["speedup"], ".3f"), r["status"],
            _f(r["startup_wait_s"], ".0f")))
    return "\n".join(lines)


def figures(folder: Path, rows: list[dict]) -> dict[str, Any]:
    """Winner against the best, spreads, start-up, orphans and MLflow's trial count."""
    summary = _load(folder / "summary.json") or {}
    ok = [r for r in rows if r["status"] in ("feasible", "infeasible") and r["tok_s"] is not None]
    feasible = [r for r in ok if r["status"] == "feasible"]
    best = max(feasible, key=lambda r: r["tok_s"], default=None)
    win_params = summary.get("winner_params")
    winner_rows = [r for r in ok if r["params"] == win_params] if win_params is not None else []
    winner = winner_rows[0] if winner_rows else None
    ranges = [r["range_pct"] for r in ok if r["range_pct"] is not None]
    robust = [r["spread_pct"] for r in ok if r["spread_pct"] is not None]
    waits = [r["startup_wait_s"] for r in ok if r["startup_wait_s"] is not None]
    return {
        "space": folder.name, "configs_measured": len({json.dumps(r["params"], sort_keys=True) for r in ok}),
        "winner": winner and {"config": winner["config"], "tok_s": winner["tok_s"], "source": winner["source"]},
        "winner_confirmed_tok_s": summary.get("output_tok_s"),
        "best": best and {"config": best["config"], "tok_s": best["tok_s"], "source": best["source"]},
        "winner_over_best": (winner["tok_s"] / best["tok_s"]) if winner and best else None,
        "spread_robust_pct_max": max(robust, default=None),
        "range_pct_max": max(ranges, default=None),
        "range_pct_median": statistics.median(ranges) if ranges else None,
        "configs_over_2pct_range": [r["config"] for r in ok if (r["range_pct"] or 0) > 2],
        # Speculative configs only: the range with the synthetic acceptance draws divided out.
        "cycle_range_pct_max": max((r["cycle_range_pct"] for r in ok if r["cycle_range_pct"] is not None),
                                   default=None),
        "startup_wait_s_median": statistics.median(waits) if waits else None,
        "trials": summary.get("trials"),
    }


def mlflow_counts(store: Path, name: str) -> dict[str, Any] | None:
    """Nested runs of the search in the brought-back MLflow store, by kind and status."""
    db = store / "mlflow.db"
    if not db.exists():
        return None
    import sqlite3

    con = sqlite3.connect(db)
    rows = con.execute(
        "select t.value, r.status, count(*) from runs r join tags t on t.run_uuid = r.run_uuid "
        "join experiments e on e.experiment_id = r.experiment_id where t.key = 'autotune.kind' "
        "and e.name = ? group by t.value, r.status", (name,)).fetchall()
    return {f"{kind}/{status}": n for kind, status, n in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--json")
    parser.add_argument("--landscape-dir")
    args = parser.parse_args()
    root = Path(args.dir)
    report: dict[str, Any] = {"spaces": {}}
    device_results = results_dir_of(root)
    for folder in sorted(root.glob("rs-*/*/")):
        if not (folder / "search").exists() and not (folder / "sweep").exists():
            continue
        recs = records_of(folder)
        rows = [row(s, r) for s, _, r in recs]
        plan = json.loads((folder.parent / "plan.json").read_text()) if (folder.parent / "plan.json").exists() else []
        fig = figures(folder, rows)
        fig["orphans"] = [s.get("orphans") for s in plan if "orphans" in s]
        fig["mlflow_runs"] = mlflow_counts(root, folder.name)
        print(f"\n## {folder.name}\n")
        print(table(rows))
        print("\n" + json.dumps(fig, indent=1, default=str))
        report["spaces"][folder.name] = {"rows": rows, "figures": fig, "plan": plan}
        if args.landscape_dir:
            space = REPO / "scripts" / "gpu" / f"{folder.name}.yaml"
            out = Path(args.landscape_dir) / f"{folder.name}.json"
            files = [str(p) for _, p, _ in recs]
            proc = subprocess.run([sys.executable, str(REPO / "scripts/gpu/landscape.py"), "--space", str(space),
                                   "--out", str(out), "--dedupe", "--drop-rejected",
                                   *(["--root", f"{device_results}=<results>"] if device_results else []),
                                   "--description",
                                   f"{folder.name}: one H200, SGLang 0.5.17, dummy weights, synthetic acceptance",
                                   *files], capture_output=True, text=True, check=False)
            print(proc.stdout + proc.stderr)
    timer = _load(root / "timer-overhead.json")
    if timer:
        report["timer_overhead"] = {k: timer.get(k) for k in ("ratio", "pair_ratio", "median_on", "median_off",
                                                              "runs", "config", "profile", "timer_only")}
        print(f"\ndevice timer: on/off ratio of medians {timer['ratio']:.4f}, median pair ratio "
              f"{timer['pair_ratio']:.4f} ({len(timer['runs']['on'])} pairs, {timer.get('config')})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
