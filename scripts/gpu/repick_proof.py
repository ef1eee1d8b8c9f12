"""The cost surface's proof (issue 37, deliverable 5): measure configs at two forced acceptances,
predict the second from the first's cost surface, and repick.

    python3 scripts/gpu/repick_proof.py --space SPACE --rates-b '[0.6, 0.5, 0.4, 0.35, 0.3]' \
        --out DIR [--rates-a '[...]'] [--configs FILE.jsonl] [--max-configs N] [--repeats R] \
        [--deadline-s S]

Acceptance A is the space's own ``synthetic_acceptance`` unless ``--rates-a`` is given; B is
``--rates-b``. Configs are measured A then B, config by config (so a deadline leaves pairs, not a
half-measured set), each with ``autotune.trial.measure.evaluate`` and one shared baseline (the
baseline runs without speculation: acceptance does not touch it). Then:

- the cost surface of the A measurements (:func:`autotune.search.cost_surface.surface_of`) is
  written to ``DIR/surface_a.json``;
- every config measured at both is predicted at B (:func:`autotune.search.repick.predict_all`)
  and compared with its B measurement: the error per config, in ``DIR/proof.json`` and on stdout;
- the repick (the best trusted prediction) is compared with the best measured at B.

Every trial record is kept in ``DIR/a.jsonl`` and ``DIR/b.jsonl``. Run on the emulator (a space
with ``backend: sim``) it is the dry run of the GPU plan ``scripts/gpu/plan_repick.sh``. Exit code 0
when at least two configs were measured at both acceptances, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError
from autotune.search.cost_surface import surface_of
from autotune.search.repick import compare_at, parse_acceptance
from autotune.space.search_space import SearchSpace, load_space
from autotune.space.synthetic import SyntheticAcceptance
from autotune.space.workload import Workload
from autotune.trial.baselines import shared_store
from autotune.trial.measure import evaluate
from autotune.trial.measure_settings import settings_for, slos_of
from autotune.trial.result import TrialResult


def with_rates(space: SearchSpace, rates: list[float]) -> SearchSpace:
    """The same space with another ``synthetic_acceptance`` (validated as the loader does)."""
    return SearchSpace.from_dict({**space.raw, "synthetic_acceptance": {"rates": list(rates)}},
                                 file=space.file)


def spread(space: SearchSpace, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` speculative configs spread evenly over the space's enumeration."""
    configs = [c for c in space.enumerate() if space.is_speculative(c)]
    if len(configs) <= limit:
        return configs
    step = (len(configs) - 1) / (limit - 1)
    return [configs[round(i * step)] for i in range(limit)]


def measure(space: SearchSpace, params: dict[str, Any], *, store: Any, repeats: int | None,
            workdir: Path) -> TrialResult:
    config = space.trial_config(params)
    base = space.trial_config(space.baseline_params(params))
    settings = settings_for(space, workdir=str(workdir), repeats=repeats)
    return evaluate(config, workload=Workload.from_spec(space.workload, file=space.file),
                    baseline_config=base, settings=settings, store=store, slos=slos_of(space),
                    min_speedup=space.constraints.min_speedup)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--space", required=True)
    ap.add_argument("--rates-a", help="JSON list; default: the space's synthetic_acceptance")
    ap.add_argument("--rates-b", required=True, help="JSON list of per-position rates")
    ap.add_argument("--configs", help="JSON lines of params (default: spread over the space)")
    ap.add_argument("--max-configs", type=int, default=4)
    ap.add_argument("--b-only", help="JSON lines of params measured at B only: their prediction is "
                                     "interpolated by the cycle fit (after the pairs, as time allows)")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--deadline-s", type=float, default=520.0,
                    help="start no new pair of trials after this many seconds")
    ap.add_argument("--pair-s", type=float, default=0.0,
                    help="seconds a pair of trials is expected to take (no pair starts without them)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--report", action="store_true",
                    help="measure nothing: rebuild the surface and the comparison from --out's "
                         "a.jsonl and b.jsonl (a committed run's figures, re-derived)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        space = load_space(args.space)
        rates_a = list(parse_acceptance(args.rates_a).rates) if args.rates_a else None
        if rates_a is None and space.synthetic_acceptance is None:
            raise ValueError("the space has no synthetic_acceptance; give --rates-a")
        space_a = with_rates(space, rates_a) if rates_a else space
        acc_b = parse_acceptance(args.rates_b)
        space_b = with_rates(space, list(acc_b.rates))
    except (AutotuneError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.report:
        return report(space_a, acc_b, out)
    configs = ([json.loads(line) for line in Path(args.configs).read_text().splitlines() if line.strip()]
               if args.configs else spread(space, args.max_configs))
    for params in configs:
        why = space.validate_config(params)
        if why or not space.is_speculative(params):
            print(f"error: --configs: {json.dumps(params)}: {why or 'not a speculative config'}",
                  file=sys.stderr)
            return 2
    store = shared_store(str(out / "baselines"), workload=space.workload,
                         settings=settings_for(space, workdir=str(out / "logs"), repeats=args.repeats))
    got_a: list[TrialResult] = []
    got_b: list[TrialResult] = []
    for params in configs:
        if time.monotonic() - t0 + args.pair_s > args.deadline_s:
            print(f"deadline: {len(configs) - len(got_b)} configs not measured", flush=True)
            break
        for sp, got, tag in ((space_a, got_a, "a"), (space_b, got_b, "b")):
            result = measure(sp, params, store=store, repeats=args.repeats, workdir=out / "logs")
            got.append(result)
            with (out / f"{tag}.jsonl").open("a") as fh:
                fh.write(json.dumps(result.to_dict(), default=str) + "\n")
            print(f"[{time.monotonic() - t0:6.0f} s] {tag} {json.dumps(params)}: {result.status} "
                  f"{result.output_tok_s} tok/s, accept {result.accept_length}", flush=True)
    for params in ([json.loads(line) for line in Path(args.b_only).read_text().splitlines() if line.strip()]
                   if args.b_only else []):
        if time.monotonic() - t0 + args.pair_s / 2 > args.deadline_s:
            print("deadline: B-only configs left unmeasured", flush=True)
            break
        result = measure(space_b, params, store=store, repeats=args.repeats, workdir=out / "logs")
        got_b.append(result)
        with (out / "b.jsonl").open("a") as fh:
            fh.write(json.dumps(result.to_dict(), default=str) + "\n")
        print(f"[{time.monotonic() - t0:6.0f} s] b-only {json.dumps(params)}: {result.status} "
              f"{result.output_tok_s} tok/s", flush=True)
    return conclude(space_a, acc_b, got_a, got_b, out)


def conclude(space_a: SearchSpace, acc_b: SyntheticAcceptance, got_a: list[TrialResult],
             got_b: list[TrialResult], out: Path) -> int:
    """A's surface, B's predictions against B's measurements, the repick: written and printed."""
    # The A surface holds the A measurements (each carries its group's baseline), nothing of B.
    surface = surface_of(space_a, got_a, name=f"repick-proof-{space_a.name}")
    (out / "surface_a.json").write_text(json.dumps(surface, indent=2, default=str) + "\n")
    result = compare_at(surface, acc_b, got_b)
    (out / "proof.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(result["text"])
    return 0 if result["compared"] >= 2 else 1


def report(space_a: SearchSpace, acc_b: SyntheticAcceptance, out: Path) -> int:
    """:func:`conclude` over the trial records a run kept (``a.jsonl``, ``b.jsonl``)."""
    def read(tag: str) -> list[TrialResult]:
        path = out / f"{tag}.jsonl"
        if not path.exists():
            raise SystemExit(f"error: --report: {path} does not exist (a run's --out folder holds it)")
        return [TrialResult.from_dict(json.loads(line)) for line in path.read_text().splitlines()
                if line.strip()]
    return conclude(space_a, acc_b, read("a"), read("b"), out)


if __name__ == "__main__":
    sys.exit(main())
