"""A search's GPU time to a confirmed winner against the complete sweep of its space (issue 33).

    python3 scripts/gpu/cost_share.py SUMMARY_JSON [--landscape FILE]

SUMMARY_JSON is the search's ``--summary-json`` (``rs-NAME/NAME/summary.json`` in a GPU plan's
results); FILE the space's recorded landscape, every config measured once (default: the 8B space's,
``benchmarks/landscapes/recorded-h200-llama-8b-4x768.json``). Printed: the search's GPU-seconds and
where they went, the servers it started, the sweep's GPU-seconds (the sum of its records'
``duration_s``: start-up, warm-up and repeats, no teardown or tuner overhead), the share with and
without the parts the sweep's figure lacks, and the winner's tok/s in the sweep over the sweep's
best feasible config's (winner/best). Exit 1 when the search named no winner.

A sweep measured before the search's start-up cuts would cost less measured today. With
``--recost LAUNCHER_S PREFILL_S`` the sweep is also re-costed from its own records as if measured
with them: every server but the host's first (the slowest start, cold) pays LAUNCHER_S and
PREFILL_S less start-up (the launcher stage a standby saves and the prefill capture the lean start's
cap saves, each read from the two searches' logs by ``startup_breakdown.py`` and
``prefill_capture.py``), and every server one repeat less (its median repeat wall: the stable
warm-up pass kept as the first round). An estimate, printed as one. ``--recost-startup WARM_S``
re-costs it the other way: every server but the host's first starts in WARM_S (the search's own
median warm start-up, ``startup_breakdown.py``'s total) where its record took longer, and runs one
repeat less, as above; the two may not be given together.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE / "scripts" / "gpu"))

from collect_search import label  # noqa: E402

from autotune.space.search_space import load_space  # noqa: E402
from autotune.space.trial_config import config_key  # noqa: E402

DEFAULT_LANDSCAPE = HERE / "benchmarks" / "landscapes" / "recorded-h200-llama-8b-4x768.json"


def recost(records: list[dict[str, Any]], *, launcher_s: float = 0.0, prefill_s: float = 0.0,
           warm_startup_s: float | None = None) -> float:
    """The sweep's GPU-seconds as if measured with the savings given, or with every warm server
    starting in ``warm_startup_s`` where it took longer (see the module's text)."""
    timed = [r for r in records if r.get("duration_s") is not None]
    cold = max(timed, key=lambda r: r.get("startup_s") or 0.0)
    total = 0.0
    for r in timed:
        walls = [b["wall_s"] for b in r.get("repeat_breakdown") or [] if isinstance(b, dict) and b.get("wall_s")]
        if not walls:
            raise ValueError("--recost needs the records' repeat walls (repeat_breakdown): this landscape has none")
        if r is cold:
            started = 0.0
        elif warm_startup_s is not None:
            started = max(float(r["startup_s"]) - warm_startup_s, 0.0)
        else:
            started = launcher_s + prefill_s
        saved = statistics.median(walls) + started
        total += r["duration_s"] - saved
    return total


def check_one_recost(recost_s: tuple[float, float] | None, warm_startup_s: float | None) -> None:
    """Refuses the two ways to re-cost the sweep given together (ValueError)."""
    if recost_s is not None and warm_startup_s is not None:
        raise ValueError("--recost and --recost-startup are two ways to re-cost the sweep: give one")


def share(summary: dict[str, Any], landscape: dict[str, Any], *, where: Path,
          recost_s: tuple[float, float] | None = None, warm_startup_s: float | None = None) -> dict[str, Any]:
    """The figures printed, as a dict (see the module's text); ``where`` is the landscape file, whose
    ``space`` is relative to its folder."""
    space = load_space(where.parent / landscape["space"])
    records = landscape["records"]
    sweep_s = sum(r["duration_s"] for r in records if r.get("duration_s") is not None)
    ok = [r for r in records if r.get("status") != "failed" and r.get("output_tok_s") is not None]
    feasible = [r for r in ok if r.get("is_baseline") or r.get("feasible")]
    best = max(feasible, key=lambda r: r["output_tok_s"])
    gpu = summary["gpu_time"]
    parts = gpu["by_part"]
    lacking = (parts.get("teardown") or 0.0) + (parts.get("overhead") or 0.0)
    out: dict[str, Any] = {
        "gpu_s": gpu["gpu_s"], "by_part": parts, "servers": gpu["servers"], "sweep_gpu_s": sweep_s,
        "sweep_configs": len(records), "share": gpu["gpu_s"] / sweep_s,
        "share_like_the_sweep": (gpu["gpu_s"] - lacking) / sweep_s, "stop_rule": summary.get("stop_rule"),
        "margin": summary.get("margin"), "best_params": best["params"], "best_tok_s": best["output_tok_s"],
        "winner_params": summary.get("winner_params"), "winner_search_tok_s": summary.get("output_tok_s"),
    }
    check_one_recost(recost_s, warm_startup_s)
    if recost_s is not None or warm_startup_s is not None:
        launcher_s, prefill_s = recost_s or (0.0, 0.0)
        out["recost_sweep_gpu_s"] = recost(records, launcher_s=launcher_s, prefill_s=prefill_s,
                                           warm_startup_s=warm_startup_s)
        out["recost_share"] = gpu["gpu_s"] / out["recost_sweep_gpu_s"]
    if summary.get("winner_params") is None:
        out.update(winner_sweep_tok_s=None, winner_over_best=None)
        return out
    key = config_key(space.coerce_params(summary["winner_params"]))
    mine = [r for r in ok if config_key(space.coerce_params(r["params"])) == key]
    out["winner_sweep_tok_s"] = mine[0]["output_tok_s"] if mine else None
    out["winner_over_best"] = None if not mine else mine[0]["output_tok_s"] / best["output_tok_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("summary", type=Path)
    ap.add_argument("--landscape", type=Path, default=DEFAULT_LANDSCAPE)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--recost", nargs=2, type=float, metavar=("LAUNCHER_S", "PREFILL_S"),
                    help="also the sweep re-costed with these start-up savings and one repeat less a server")
    ap.add_argument("--recost-startup", type=float, metavar="WARM_S",
                    help="also the sweep re-costed with every warm server started in WARM_S (where it took "
                         "longer) and one repeat less a server")
    args = ap.parse_args(argv)
    recost_s = None if args.recost is None else (args.recost[0], args.recost[1])
    try:
        check_one_recost(recost_s, args.recost_startup)
    except ValueError as exc:
        ap.error(str(exc))
    if args.recost_startup is not None and not args.recost_startup > 0:
        ap.error(f"--recost-startup: a warm start-up in seconds, above 0, not {args.recost_startup:g}")
    fig = share(json.loads(args.summary.read_text()), json.loads(args.landscape.read_text()), where=args.landscape,
                recost_s=recost_s, warm_startup_s=args.recost_startup)
    if args.json:
        print(json.dumps(fig, indent=1))
        return 0 if fig["winner_params"] is not None else 1
    parts = ", ".join(f"{k} {v:.1f}" for k, v in fig["by_part"].items())
    servers = fig["servers"]
    print(f"search: {fig['gpu_s']:.1f} GPU-s ({parts}); servers: {servers.get('trials')} trials, "
          f"{servers.get('baselines')} baselines, {servers.get('finalists')} finalists")
    rule = fig["stop_rule"]
    if rule:
        print(f"stop rule: {rule.get('reason') or rule.get('setting') if isinstance(rule, dict) else rule}")
    print(f"sweep: {fig['sweep_gpu_s']:.1f} GPU-s over {fig['sweep_configs']} configs ({args.landscape.name})")
    print(f"share: {100 * fig['share']:.1f}% of the sweep ({100 * fig['share_like_the_sweep']:.1f}% without "
          "the teardown and tuner overhead the sweep's figure lacks)")
    if "recost_share" in fig and args.recost_startup is not None:
        print(f"like for like (an estimate): the sweep re-costed with every warm server started in "
              f"{args.recost_startup:g} s (where it took longer) and one repeat less each: "
              f"{fig['recost_sweep_gpu_s']:.1f} GPU-s; the search {100 * fig['recost_share']:.1f}% of it")
    elif "recost_share" in fig:
        print(f"like for like (an estimate): the sweep re-costed with {args.recost[0]:g} s + {args.recost[1]:g} s less "
              f"start-up a warm server and one repeat less each: {fig['recost_sweep_gpu_s']:.1f} GPU-s; the search "
              f"{100 * fig['recost_share']:.1f}% of it")
    if fig["winner_params"] is None:
        print("winner: none")
        return 1
    winner, best = (label(fig[k], plain="no speculation") for k in ("winner_params", "best_params"))
    if fig["winner_over_best"] is None:
        print(f"winner: {winner}: not in the sweep")
        return 0
    print(f"winner/best: {winner} / {best} = "
          f"{fig['winner_over_best']:.3f} ({fig['winner_sweep_tok_s']:.1f} / {fig['best_tok_s']:.1f} tok/s in the "
          f"sweep; {fig['winner_search_tok_s']:.1f} in the search)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
