"""Bundle a real-SGLang GPU run into one JSON and a markdown table.

Usage: python scripts/gpu/collect.py RUN_DIR --out FILE.json   (committed xz-compressed, e.g.
docs/measurements/real-sglang-h200.json.xz)
RUN_DIR holds what ``scripts/gpu/run.sh`` brought back: facts.txt and results.tar.gz (or lanes/).
Prints the table (one row per config, each lane's speedups against that lane's own baseline).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

PHASES = ("draft", "verify", "extend", "decode", "other")


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)


def load_lanes(run_dir: Path) -> list[dict[str, Any]]:
    """Every trial of every lane, in lane order, with its full trial JSON under ``trial``."""
    lanes_dir = run_dir / "lanes"
    if not lanes_dir.is_dir():
        with tempfile.TemporaryDirectory(prefix="lanes-") as tmp:
            with tarfile.open(run_dir / "results.tar.gz") as tar:
                tar.extractall(tmp, filter="data")
            return _read_lanes(Path(tmp) / "lanes")
    return _read_lanes(lanes_dir)


def _read_lanes(lanes_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for lane_file in sorted(lanes_dir.glob("*/lane.json")):
        for entry in json.loads(lane_file.read_text()):
            trial_file = lane_file.parent / f"{entry['name']}.json"
            text = trial_file.read_text() if trial_file.exists() else ""
            trial = json.loads(text) if text.strip() else None
            rows.append({"lane": lane_file.parent.name, **entry, "trial": trial})
    return rows


def row_of(entry: dict[str, Any]) -> dict[str, Any]:
    """The figures the table shows, straight from the trial JSON (unknown stays None)."""
    t = entry.get("trial") or {}
    ph = t.get("phases") or {}
    return {
        "lane": entry["lane"], "config": entry["name"], "status": t.get("status", entry.get("status")),
        "tok_s": t.get("output_tok_s"), "spread": t.get("output_tok_s_spread"),
        "repeats": t.get("output_tok_s_repeats"),
        "accept": t.get("accept_length"), "accept_meta": t.get("accept_length_meta_info"),
        "accept_server": t.get("accept_length_server_info"),
        **{f"{p}_ms": ph.get(f"{p}_ms") for p in PHASES}, "cycle_ms": ph.get("cycle_ms"),
        "shares": ph.get("shares"), "break_even": t.get("break_even_accept_length"),
        "speedup": t.get("speedup"), "baseline_tok_s": t.get("baseline_tok_s"),
        "reason": t.get("reason"), "startup_s": t.get("startup_s"), "trial_wall_s": entry.get("wall_s"),
        "server_startup": t.get("server_startup"),
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| lane | config | tok/s (median +- half-range) | accept len: window / meta_info / server_info "
            "| ms per cycle: draft / verify / re-extend / decode / other | shares %: draft / verify / "
            "re-extend / decode / other | break-even len | speedup | verdict | start-up s |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        sh = r["shares"] or {}
        lines.append(
            f"| {r['lane']} | {r['config']} | {_fmt(r['tok_s'], '.1f')} +- {_fmt(r['spread'], '.1f')} "
            f"| {_fmt(r['accept'])} / {_fmt(r['accept_meta'])} / {_fmt(r['accept_server'])} "
            f"| {' / '.join(_fmt(r[f'{p}_ms']) for p in PHASES)} "
            f"| {' / '.join(_fmt(sh.get(p), '.1f') for p in PHASES)} "
            f"| {_fmt(r['break_even'])} | {_fmt(r['speedup'], '.3f')} | {r['status']} "
            f"| {_fmt(r['startup_s'], '.0f')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, help="write the bundled JSON here")
    args = parser.parse_args(argv)
    entries = load_lanes(args.run_dir)
    rows = [row_of(e) for e in entries]
    facts = args.run_dir / "facts.txt"
    bundle = {"facts": facts.read_text() if facts.exists() else None, "rows": rows,
              "trials": [{"lane": e["lane"], "name": e["name"], "command": e.get("command"),
                          "wall_s": e.get("wall_s"), "rc": e.get("rc"), "trial": e.get("trial")}
                         for e in entries]}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(bundle, indent=1, default=str) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
