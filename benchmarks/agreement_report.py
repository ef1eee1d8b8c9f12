"""``python -m benchmarks.agreement_report FILE.json [FILE.json ...] [--within PCT]``.

The agreement benchmark's tables (:mod:`benchmarks.agreement`), printed from the JSON it wrote. With
several files, the rounds of each concurrency are pooled across them (one server per file, so the
pooled figure also spans server starts): each tool's median and range over every round, the ratio of
the pooled medians, and every round's ratio in file order. ``benchmarks.agreement`` prints its own
run through the same functions, so a run and its report read alike.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autotune.trial.result import spread_pct
from benchmarks._common import fmt, median, table, verdict

__all__ = ["level", "pool", "print_report", "to_ms"]


def _range_pct(values: list[float]) -> float | None:
    return spread_pct(values)[1]  # a trial's repeat range, the same rule


def level(*, concurrency: int, requests: int, autotune: list[dict[str, Any]], bench_serving: list[dict[str, Any]],
          within: float) -> dict[str, Any]:
    """One concurrency's record: both tools' runs (paired by round), the ratio of their medians and
    whether it is within ``within`` percent of 1."""
    if len(autotune) != len(bench_serving):
        raise ValueError(f"c{concurrency}: {len(autotune)} autotune runs against {len(bench_serving)} "
                         "bench_serving runs; rounds pair one of each")
    a = [x["tok_s"] for x in autotune]
    b = [x["tok_s"] for x in bench_serving]
    ma, mb = median(a), median(b)
    ratio = ma / mb if ma and mb else None
    return {"concurrency": concurrency, "requests": requests, "autotune": autotune, "bench_serving": bench_serving,
            "ratio": ratio, "round_ratios": [x / y for x, y in zip(a, b, strict=True)],
            "ok": ratio is not None and abs(ratio - 1) * 100 <= within}


def pool(runs: list[dict[str, Any]], *, within: float) -> list[dict[str, Any]]:
    """The levels of several agreement JSONs, each concurrency's rounds pooled in file order.

    Raises:
        ValueError: A concurrency sent a different number of requests in two files (not the same
            window, so not one figure).
    """
    by_c: dict[int, dict[str, Any]] = {}
    for run in runs:
        for lv in run["levels"]:
            c = int(lv["concurrency"])
            got = by_c.setdefault(c, {"requests": lv["requests"], "autotune": [], "bench_serving": []})
            if got["requests"] != lv["requests"]:
                raise ValueError(f"c{c}: {lv['requests']} requests a run in one file and {got['requests']} "
                                 "in another; pool only runs of the same window")
            got["autotune"] += lv["autotune"]
            got["bench_serving"] += lv["bench_serving"]
    return [level(concurrency=c, requests=v["requests"], autotune=v["autotune"], bench_serving=v["bench_serving"],
                  within=within) for c, v in sorted(by_c.items())]


def _med(runs: list[dict[str, Any]], key: str) -> float | None:
    return median([r[key] for r in runs if r.get(key) is not None])


def to_ms(seconds: float | None) -> float | None:
    """Seconds in milliseconds; None stays None."""
    return None if seconds is None else 1000.0 * seconds


def _pct(share: float | None) -> float | None:
    return None if share is None else 100.0 * share


def _per_token(runs: list[dict[str, Any]]) -> float | None:
    return median([1e6 * r["cpu_s"] / r["tokens"] for r in runs if r.get("cpu_s") is not None and r.get("tokens")])


def print_report(levels: list[dict[str, Any]], *, within: float) -> None:
    """The agreement table and the occupancy table."""
    print(table(["concurrency", "autotune tok/s", "range", "bench_serving tok/s", "range", "ratio",
                 "round ratios", f"within {within:g}%"],
                [[f"{lv['concurrency']} ({lv['requests']} req)",
                  fmt(median([x["tok_s"] for x in lv["autotune"]]), ",.1f"),
                  fmt(_range_pct([x["tok_s"] for x in lv["autotune"]]), ".1f") + "%",
                  fmt(median([x["tok_s"] for x in lv["bench_serving"]]), ",.1f"),
                  fmt(_range_pct([x["tok_s"] for x in lv["bench_serving"]]), ".1f") + "%",
                  fmt(lv["ratio"], ".4f"), " ".join(f"{x:.3f}" for x in lv["round_ratios"]), verdict(lv["ok"])]
                 for lv in levels]))
    print("\nOccupancy (medians of the rounds): mean in flight is Little's law over each tool's window; "
          "a gap is a freed slot's wait for the next send; CPU is each client's process per output token")
    print(table(["concurrency", "in flight: autotune", "bench_serving", "gap p50 ms", "gap p90 ms",
                 "idle slots", "loop lag p99 ms", "CPU us/tok: autotune", "bench_serving"],
                [[str(lv["concurrency"]), fmt(_med(lv["autotune"], "mean_in_flight"), ".2f"),
                  fmt(_med(lv["bench_serving"], "mean_in_flight"), ".2f"),
                  fmt(to_ms(_med(lv["autotune"], "gap_p50_s")), ".2f"),
                  fmt(to_ms(_med(lv["autotune"], "gap_p90_s")), ".2f"),
                  fmt(_pct(_med(lv["autotune"], "idle_slot_share")), ".2f") + "%",
                  fmt(_med(lv["autotune"], "loop_lag_ms_p99"), ".2f"),
                  fmt(_per_token(lv["autotune"]), ".1f"), fmt(_per_token(lv["bench_serving"]), ".1f")]
                 for lv in levels]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agreement_report",
                                     description=__doc__.split("\n\n")[1].strip())
    parser.add_argument("files", nargs="+", type=Path, help="JSON written by benchmarks.agreement --json")
    parser.add_argument("--within", type=float, default=2.0, help="PASS when the medians agree within this %%")
    args = parser.parse_args(argv)
    runs = []
    for path in args.files:
        try:
            run = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"error: {path}: {exc}", file=sys.stderr)
            return 2
        if not isinstance(run, dict) or not isinstance(run.get("levels"), list):
            print(f"error: {path}: no 'levels' list; is it benchmarks.agreement's --json?", file=sys.stderr)
            return 2
        print(f"{path.name}: {run.get('machine', 'machine not recorded')}; {run.get('rounds')} rounds")
        runs.append(run)
    try:
        levels = pool(runs, within=args.within)
    except (KeyError, TypeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_report(levels, within=args.within)
    print(f"\n{sum(lv['ok'] for lv in levels)}/{len(levels)} concurrencies agree within {args.within:g}%"
          + (f", rounds pooled over {len(runs)} files" if len(runs) > 1 else ""))
    return 0 if all(lv["ok"] for lv in levels) else 1


if __name__ == "__main__":
    sys.exit(main())
