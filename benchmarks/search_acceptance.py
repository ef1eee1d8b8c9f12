"""``python -m benchmarks.search_acceptance [--quick] [--trials N] [--skip-demo] [--json PATH]``.

Does the search find what the seed case study and SGLang's public numbers say it should? It runs
the real search (Ray Tune, Optuna, emulator servers, finalists beside fresh baselines) on the two
shipped emulator spaces, with the same reduced budget and workload for both, and compares each
winner with the true optimum of the model-only evaluator (noise free, same workload):

- ``kimi-k2.5-eagle3-tp8-sim.yaml`` (MoE, PCIe TP8): verifying is expensive, so the winner must be
  a short top-k 1 chain (steps <= 3), and the report must show the verify share of the cycle;
- ``llama-3.1-8b-eagle3-sim.yaml`` (dense, one H100): verifying is nearly free, so the winner
  must be a deep or wide tree (steps >= 5 or topk >= 4).

Both spaces keep their own sampler settings (TPE, seed 0); only the budget, the workload size,
the repeats, the finalists and the concurrency are cut, identically for both, and printed. No
MLflow store is written for these two (``--no-tracking``).

Then it times the README demo exactly as ``make demo`` runs it (``python -m autotune.search
--space search_spaces/demo.yaml``, with MLflow tracking, in a temporary directory) and checks that
the winner's true tok/s is at least 98% of the demo space's true optimum.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import AutotuneError
from benchmarks._common import (
    fmt,
    machine_line,
    sim_environment,
    table,
    verdict,
    write_json,
)

REPO = Path(__file__).resolve().parent.parent
SPACES = REPO / "search_spaces"
KIMI_SPACE = SPACES / "kimi-k2.5-eagle3-tp8-sim.yaml"
LLAMA_SPACE = SPACES / "llama-3.1-8b-eagle3-sim.yaml"
DEMO_SPACE = SPACES / "demo.yaml"
DEMO_RATIO = 0.98


def reduced(*, trials: int) -> dict[str, Any]:
    """The cuts applied to both spaces (sampler, seed and everything else stay as shipped)."""
    return {"budget": {"trials": trials},
            "workload": {"num_prompts": 4, "warmup_prompts": 1, "output_len": 64},
            "measure": {"repeats": 1},
            "search": {"finalists": 2, "finalist_repeats": 2, "max_concurrent": 2}}


def derive_space(source: Path, directory: Path, cuts: Mapping[str, Mapping[str, Any]]) -> Path:
    """A copy of ``source`` with ``cuts`` merged into its sections, written to ``directory``."""
    data = yaml.safe_load(source.read_text())
    for section, values in cuts.items():
        data[section] = {**(data.get(section) or {}), **values}
    path = directory / source.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def truth(space_path: Path, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """True (noise-free) tok/s of ``params`` and the space's optimum, same workload."""
    from autotune.simtools.evaluate import ModelEvaluator
    from autotune.space.search_space import load_space

    evaluator = ModelEvaluator(load_space(space_path))
    best = evaluator.optimum()
    value = None
    if params is not None:
        value = evaluator.expected(dict(params)).get("output_tok_s")
    return {"winner_true_tok_s": value, "optimum_tok_s": best["output_tok_s"],
            "optimum_params": best["params"],
            "ratio": value / best["output_tok_s"] if value and best["output_tok_s"] else None}


def _shape(params: Mapping[str, Any] | None) -> tuple[int | None, int | None]:
    """(steps, topk) of a config; (None, None) for the baseline."""
    if not params or params.get("speculative_algorithm", "on") is None:
        return None, None
    steps = params.get("speculative_num_steps")
    topk = params.get("speculative_eagle_topk", 1)
    return (int(steps) if steps is not None else None), (int(topk) if topk is not None else None)


def describe(params: Mapping[str, Any] | None) -> str:
    """``s2/k1/n3 tp8 NCCL_ALGO=Ring``, or ``baseline ...``."""
    if params is None:
        return "none"
    steps, topk = _shape(params)
    parts = ["baseline" if steps is None else
             f"s{steps}/k{topk}/n{params.get('speculative_num_draft_tokens')}"]
    parts += [f"{k}={v}" for k, v in params.items()
              if not k.startswith("speculative_") and v is not None]
    return " ".join(parts)


def run_space(source: Path, workdir: Path, cuts: Mapping[str, Any]) -> dict[str, Any]:
    """One search on a reduced copy of ``source``; the winner, its report and the truth."""
    from autotune.search.console import print_summary
    from autotune.search.options import SearchOptions
    from autotune.search.run import run_search

    space = derive_space(source, workdir, cuts)
    out = io.StringIO()
    t0 = time.monotonic()
    with sim_environment(startup_s=0.2):
        outcome = run_search(SearchOptions(space=str(space), root=str(workdir), tracking=False),
                             out=out)
    wall = time.monotonic() - t0
    print_summary(outcome, out=out)
    s = outcome.summary()
    phases = s.get("phases") or {}
    return {"space": source.name, "wall_s": wall, "trials": s["trials"],
            "winner_params": s["winner_params"], "baseline_wins": s["baseline_wins"],
            "output_tok_s": s["output_tok_s"], "speedup": s["speedup"],
            "accept_length": s["accept_length"],
            "break_even_accept_length": s["break_even_accept_length"],
            "verify_pct": phases.get("verify_pct"), "draft_pct": phases.get("draft_pct"),
            "report": out.getvalue(), **truth(space, s["winner_params"])}


def kimi_checks(r: Mapping[str, Any]) -> dict[str, bool]:
    steps, topk = _shape(r["winner_params"])
    report = r["report"].split("=" * 78)[-1]
    return {"short top-k 1 chain (steps <= 3)": steps is not None and steps <= 3 and topk == 1,
            "report shows the verify share": r["verify_pct"] is not None
            and "Target verify:" in report and "%)" in report.split("Target verify:", 1)[1]
            .splitlines()[0]}


def llama_checks(r: Mapping[str, Any]) -> dict[str, bool]:
    steps, topk = _shape(r["winner_params"])
    return {"deep or wide tree (steps >= 5 or topk >= 4)":
            steps is not None and (steps >= 5 or (topk or 0) >= 4)}


def run_demo(workdir: Path) -> dict[str, Any]:
    """``make demo``'s command, timed, in ``workdir`` (its mlruns/ goes there)."""
    summary = workdir / "demo-summary.json"
    cmd = [sys.executable, "-m", "autotune.search", "--space", str(DEMO_SPACE),
           "--summary-json", str(summary)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=1800, check=False)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise AutotuneError(f"the demo exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    s = json.loads(summary.read_text())
    return {"space": DEMO_SPACE.name, "wall_s": wall, "trials": s["trials"],
            "winner_params": s["winner_params"], "baseline_wins": s["baseline_wins"],
            "output_tok_s": s["output_tok_s"], "speedup": s["speedup"],
            "accept_length": s["accept_length"],
            "break_even_accept_length": s["break_even_accept_length"],
            "verify_pct": (s.get("phases") or {}).get("verify_pct"),
            "tuner_overhead_s_median": s.get("tuner_overhead_s_median"),
            **truth(DEMO_SPACE, s["winner_params"])}


def print_result(r: Mapping[str, Any], checks: Mapping[str, bool], *, out: Any = sys.stdout) -> None:
    t = r["trials"]
    print(f"\n{r['space']}: {t['total']} trials ({t['feasible']} feasible, {t['infeasible']} "
          f"infeasible, {t['failed']} failed) in {r['wall_s']:.0f} s", file=out)
    rows = [
        ["winner", describe(r["winner_params"]) + (" (BASELINE)" if r["baseline_wins"] else "")],
        ["measured tok/s", fmt(r["output_tok_s"], ".1f")],
        ["speedup over its baseline", fmt(r["speedup"], ".3f") + "x"],
        ["accept length / break-even",
         f"{fmt(r['accept_length'])} / {fmt(r['break_even_accept_length'])}"],
        ["verify share of the cycle", fmt(r["verify_pct"], ".1f") + "%"],
        ["true tok/s of the winner", fmt(r["winner_true_tok_s"], ".1f")],
        ["true optimum", f"{fmt(r['optimum_tok_s'], '.1f')} ({describe(r['optimum_params'])})"],
        ["winner / optimum", fmt(r["ratio"], ".3f")],
    ]
    rows += [[f"check: {name}", verdict(ok)] for name, ok in checks.items()]
    print(table(["", "value"], rows), file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search_acceptance",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 trials each, no demo (tests)")
    parser.add_argument("--trials", type=int, default=24, help="trials per space (default 24)")
    parser.add_argument("--skip-demo", action="store_true", help="do not time the demo")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    trials = 8 if args.quick else args.trials
    cuts = reduced(trials=trials)
    print("Search acceptance: real searches on the emulator spaces", flush=True)
    print(machine_line())
    print("Cuts, the same for both spaces (sampler and seed as shipped: TPE, seed 0): "
          + "; ".join(f"{k}: {json.dumps(v)}" for k, v in cuts.items()), flush=True)
    results: dict[str, Any] = {}
    ok = True
    try:
        with tempfile.TemporaryDirectory(prefix="autotune-acceptance-") as tmp:
            for key, source, check in (("kimi", KIMI_SPACE, kimi_checks),
                                       ("llama", LLAMA_SPACE, llama_checks)):
                workdir = Path(tmp) / key
                workdir.mkdir()
                r = run_space(source, workdir, cuts)
                checks = check(r)
                print_result(r, checks)
                ok = ok and all(checks.values())
                results[key] = {**{k: v for k, v in r.items() if k != "report"}, "checks": checks}
            if not (args.quick or args.skip_demo):
                workdir = Path(tmp) / "demo"
                workdir.mkdir()
                r = run_demo(workdir)
                checks = {f"winner >= {DEMO_RATIO:g} of the optimum":
                          r["ratio"] is not None and r["ratio"] >= DEMO_RATIO}
                print(f"\nmake demo (python -m autotune.search --space search_spaces/demo.yaml): "
                      f"{r['wall_s']:.0f} s wall", end="")
                print_result(r, checks)
                ok = ok and all(checks.values())
                results["demo"] = {**r, "checks": checks}
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"\n{'ALL CHECKS PASS' if ok else 'SOME CHECKS FAIL'}")
    write_json(args.json, {"machine": machine_line(), "cuts": cuts, "results": results, "pass": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
