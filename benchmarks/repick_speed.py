"""How long ``autotune repick`` takes to answer, on a large space, with no GPU (issue 37: < 5 s).

    python -m benchmarks.repick_speed [--space search_spaces/llama-3.1-8b-eagle3-sim.yaml]
        [--every 5] [--runs 5] [--rates '[0.8,0.7,...]']

A cost surface is built from the emulator's model (``autotune.simtools.evaluate``, three noisy draws
a config as repeats, noise CV 0.9%, the measured one of docs/samplers.md) for every ``--every``-th
config of the space and every group's baseline, as a search that measured those would keep it;
then ``python -m autotune repick --surface FILE --acceptance rates:[...]`` runs ``--runs`` times as
a fresh process (imports included, what a user waits for). Prints the median and range of the wall
time, and how many configs were ranked, named too uncertain, and measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autotune.search.cost_surface import surface_of
from autotune.simtools.evaluate import ModelEvaluator
from autotune.space.search_space import load_space
from autotune.trial.result import TrialResult

REPO = Path(__file__).resolve().parents[1]


def _result(ev: ModelEvaluator, params: dict) -> TrialResult | None:
    draws = [ev.measure(params) for _ in range(3)]
    first = draws[0]
    if first.get("status") == "failed" or first.get("output_tok_s") is None:
        return None
    toks = [d["output_tok_s"] for d in draws]
    return TrialResult(status="feasible", reason=None, params=dict(params),
                       is_baseline=bool(first.get("is_baseline")), output_tok_s=statistics.median(toks),
                       output_tok_s_repeats=toks, accept_length=first.get("accept_length"),
                       phases=first.get("phases"), baseline_tok_s=first.get("baseline_tok_s"),
                       acceptance="measured")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--space", default=str(REPO / "search_spaces/llama-3.1-8b-eagle3-sim.yaml"))
    ap.add_argument("--every", type=int, default=5, help="measure every N-th config")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rates", default="[0.75, 0.65, 0.58, 0.5, 0.45, 0.4, 0.36, 0.32, 0.3, 0.28]")
    args = ap.parse_args(argv)
    space = load_space(args.space)
    ev = ModelEvaluator(space, noise_cv=0.00913, seed=0)
    configs = list(space.enumerate())
    results = []
    for params in configs:
        base = _result(ev, space.baseline_params(params))
        if base is not None:
            results.append(base)
    for params in configs[::args.every]:
        if space.is_speculative(params) and (r := _result(ev, params)) is not None:
            results.append(r)
    surface = surface_of(space, results, name="repick-speed")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "surface.json"
        path.write_text(json.dumps(surface))
        walls, out = [], {}
        for _ in range(args.runs):
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "autotune", "repick", "--surface", str(path),
                                   "--acceptance", f"rates:{args.rates}", "--json"],
                                  cwd=REPO, capture_output=True, text=True, check=False)
            walls.append(time.perf_counter() - t0)
            if proc.returncode not in (0, 1):
                print(proc.stderr, file=sys.stderr)
                return 1
            out = json.loads(proc.stdout)
    preds = out["predictions"]
    ranked = sum(p["trusted"] for p in preds)
    print(f"space {args.space}: {len(configs)} configs, {len(surface['configs'])} measured "
          f"(every {args.every}th), {len(surface['unmeasured'])} unmeasured")
    print(f"repick wall (fresh process, {args.runs} runs): median {statistics.median(walls):.2f} s, "
          f"range {min(walls):.2f}-{max(walls):.2f} s")
    print(f"predictions: {len(preds)}, trusted and ranked {ranked}, too uncertain {len(preds) - ranked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
