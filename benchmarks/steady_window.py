"""``python -m benchmarks.steady_window [--concurrency C] [--cap N] [--requests N ...] [--repeats R]
[--output-len L] [--seed S] [--noise-cv CV] [--quick] [--json PATH]``.

Does the steady-state figure (:func:`autotune.bench.steady.steady_window`) leave out a batch window's
ramp-up and tail, and is it steadier over repeats than the whole window? One emulator config (the
Llama-3.1-8B EAGLE3 profile, 3 steps), measured as a trial measures (:func:`autotune.trial.measure.
measure`, ``measure.window: steady``) at concurrency C with the server's running-request cap forced to
``--cap`` (below C: a standing queue, then a tail while fewer than the cap are left), once per
``--requests`` count, ``--repeats`` repeats on one server each; ``--noise-cv`` sets the emulator's
noise (0: only the window's own effects and this machine's timing remain).

Printed per request count, side by side: the waves a window holds (requests over ``min(C, cap)``);
the whole window's median tok/s, robust spread (1.4826 MAD over the median) and range (max - min
over the median); the steady interval's same three; their ratio; the steady interval's median
share of the window and its waves; and the ramp and tail seconds it left out (medians). The
window the trial's objective used and, when whole, why; and how far apart the request counts put
each figure's medians (a window's figure should not depend on how many requests it held).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

from autotune.bench.records import RequestRecord
from autotune.bench.steady import steady_window
from autotune.space.search_space import SearchSpace
from autotune.space.workload import Workload
from autotune.trial.measure import measure
from autotune.trial.measure_settings import MeasureSettings
from autotune.trial.result import TrialResult, spread_pct
from benchmarks._common import (
    LLAMA,
    fmt,
    machine_line,
    median,
    setup_for,
    sim_environment,
    table,
    write_json,
)


def _space(concurrency: int, cap: int | None, requests: int, output_len: int, seed: int) -> SearchSpace:
    setup = setup_for(LLAMA)
    fixed: dict[str, Any] = {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1, "tp_size": 1}
    if cap is not None:
        fixed["max_running_requests"] = cap
    return SearchSpace.from_dict({
        "name": "steady-window", "backend": "sim", "profile": setup.profile, "model_path": setup.model_path,
        "draft_model_path": setup.draft_model_path, "fixed_args": fixed,
        "parameters": {"speculative_num_steps": {"type": "int", "low": 3, "high": 3}},
        "workload": {"source": "builtin", "num_prompts": requests, "warmup_prompts": concurrency,
                     "output_len": output_len, "concurrency": concurrency, "seed": seed},
        "measure": {"repeats": 1, "startup_timeout_s": 120}})


def _records(result: TrialResult, repeat: int, requests: int) -> list[RequestRecord]:
    """One repeat's request records back from the result's JSON form."""
    rows = result.records[repeat * requests:(repeat + 1) * requests]
    return [RequestRecord(index=r["index"], prompt_id=r["prompt_id"], start=r["start"], end=r["end"],
                          chunk_times=list(r["chunk_times"]), chunk_tokens=r["chunk_tokens"],
                          completion_tokens=r["completion_tokens"], error=r["error"]) for r in rows]


def one_row(concurrency: int, cap: int | None, requests: int, *, repeats: int, output_len: int,
            seed: int) -> dict[str, Any]:
    """One server, ``repeats`` repeats of ``requests`` requests: both figures and what was left out."""
    space = _space(concurrency, cap, requests, output_len, seed)
    params = space.coerce_params({"speculative_num_steps": 3})
    with tempfile.TemporaryDirectory(prefix="steady-window-") as work:
        result = measure(space.trial_config(params), Workload.from_spec(space.workload),
                         MeasureSettings(repeats=repeats, startup_timeout_s=120, sim_seed=seed, workdir=work,
                                         window="steady"))
    if not result.ok:
        raise SystemExit(f"error: the trial failed: {result.reason}")
    whole = [float(r["tok_s"]) for r in result.repeat_breakdown]
    steady = [r.get("steady_tok_s") for r in result.repeat_breakdown]
    level = min(concurrency, cap or concurrency)
    ramps, tails = [], []
    for i in range(repeats):
        recs = _records(result, i, requests)
        s = steady_window(recs, level=level)
        if s.start is not None and s.end is not None:
            t0, t1 = min(r.start for r in recs), max(r.end or r.start for r in recs)
            ramps.append(s.start - t0)
            tails.append(t1 - s.end)
    known = [float(v) for v in steady if v is not None]
    w_spread, w_range = spread_pct(whole)
    s_spread, s_range = spread_pct(known) if len(known) == len(steady) else (None, None)
    return {"requests": requests, "waves": requests / level, "whole_median": median(whole),
            "whole_spread_pct": w_spread, "whole_range_pct": w_range,
            "steady_median": median(known) if len(known) == len(steady) else None,
            "steady_spread_pct": s_spread, "steady_range_pct": s_range,
            "steady_share_pct": result.steady_share_pct, "steady_waves": result.steady_waves,
            "ramp_s": median(ramps), "tail_s": median(tails), "window": result.window,
            "window_reason": result.window_reason, "whole": whole, "steady": steady,
            "load_note": result.load_note}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.steady_window",
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cap", type=int, default=12, help="the emulator's max_running_requests (0: its own)")
    parser.add_argument("--requests", type=int, nargs="+", default=[40, 96])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise-cv", type=float, default=None,
                        help="the emulator's noise (AUTOTUNE_SIM_NOISE_CV); default: its profile's (0.01)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny run (2 repeats of 24 requests of 16 tokens), for the tests")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.repeats, args.output_len = [24], 2, 16
    cap = args.cap or None
    rows = []
    noise = {} if args.noise_cv is None else {"AUTOTUNE_SIM_NOISE_CV": f"{args.noise_cv:g}"}
    with sim_environment(startup_s=0.2, **noise):
        for n in args.requests:
            print(f"measuring {n} requests at concurrency {args.concurrency}, cap {cap or 'default'}, "
                  f"{args.repeats} repeats...", file=sys.stderr, flush=True)
            rows.append(one_row(args.concurrency, cap, n, repeats=args.repeats, output_len=args.output_len,
                                seed=args.seed))
    print(machine_line())
    print(f"Concurrency {args.concurrency}, server cap {cap or 'the emulator default'}, {args.output_len} output "
          f"tokens, emulator noise {'its profile' + chr(39) + 's' if args.noise_cv is None else args.noise_cv}, "
          f"{args.repeats} repeats on one server per row; tok/s medians, spreads and ranges in % of the median.\n")
    print(table(["requests", "waves", "whole tok/s", "spread%", "range%", "steady tok/s", "spread%", "range%",
                 "steady/whole", "steady share%", "steady waves", "ramp s", "tail s", "objective"],
                [[r["requests"], fmt(r["waves"], ".1f"), fmt(r["whole_median"], ".0f"),
                  fmt(r["whole_spread_pct"], ".2f"), fmt(r["whole_range_pct"], ".2f"), fmt(r["steady_median"], ".0f"),
                  fmt(r["steady_spread_pct"], ".2f"), fmt(r["steady_range_pct"], ".2f"),
                  fmt(r["steady_median"] / r["whole_median"] if r["steady_median"] and r["whole_median"] else None,
                      ".3f"),
                  fmt(r["steady_share_pct"], ".0f"), fmt(r["steady_waves"], ".1f"), fmt(r["ramp_s"], ".2f"),
                  fmt(r["tail_s"], ".2f"), r["window"] + (f" ({r['window_reason']})" if r["window_reason"] else "")]
                 for r in rows]))
    for key, name in (("whole_median", "whole windows"), ("steady_median", "steady intervals")):
        known = [r[key] for r in rows if r[key]]
        if len(known) > 1:
            apart = 100 * (max(known) - min(known)) / min(known)
            print(f"Across the request counts, the {name}' medians lie {apart:.1f}% apart.")
    for r in rows:
        if r["load_note"]:
            print(f"{r['requests']} requests: {r['load_note']}")
    if args.json:
        write_json(args.json, {"concurrency": args.concurrency, "cap": cap, "repeats": args.repeats,
                               "output_len": args.output_len, "seed": args.seed, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
