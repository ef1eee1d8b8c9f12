"""``python -m benchmarks.trial_accuracy [--quick] [--repeats R] [--profile P] [--concurrency C]
[--seed N] [--json PATH]``.

Does a trial measure what the emulator is known to do? For both built-in profiles at concurrency 1
and 8, a few configs each run as R independent trials (:func:`autotune.trial.measure.measure`, a fresh
emulator subprocess each, real HTTP), and their median is compared with the noise-free expectation
of :class:`autotune.simtools.evaluate.ModelEvaluator` for the same workload (same prompts, lengths and
concurrency):

- output tok/s within 3%;
- accept length within 3%, against the expectation counted as a trial counts it (each request's
  last cycle cut short at ``max_tokens``; see :func:`benchmarks._common.as_measured`);
- phase shares within 2 points. The evaluator's shares are of one decode cycle (draft + verify +
  re-extend + other), the trial's of the whole window (prefill included), so the trial's phase
  times are divided by its ``decode_cycle_ms`` (window cycle minus amortised prefill) to compare
  like with like.

Also printed: device-timer ``GPU ms/cycle`` (within 3%; it moves with the mean batch), and without
a target the per-cycle ``other`` time (wall time the device timer does not cover; it grows when the
emulator runs late on a busy CPU), the ``mean batch`` (requests decoding per cycle: below the
concurrency when a closed-loop run drains at its end) and the workload shape the evaluator assumed
against what the emulator counted (mean prompt and completion tokens).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from autotune.errors import AutotuneError
from autotune.simtools.evaluate import ModelEvaluator
from autotune.space.search_space import SearchSpace
from autotune.space.workload import Workload
from autotune.trial.measure import measure
from autotune.trial.measure_settings import MeasureSettings
from autotune.trial.result import TrialResult
from benchmarks._common import (
    KIMI,
    LLAMA,
    Setup,
    as_measured,
    baseline_params,
    bench_space,
    describe,
    fmt,
    half_range,
    machine_line,
    median,
    pct,
    rel_diff,
    setup_for,
    sim_environment,
    spec_params,
    table,
    verdict,
    write_json,
)

TOK_S_TOL = 0.03
ACCEPT_TOL = 0.03
SHARE_TOL = 2.0  # percentage points


def configs_for(setup: Setup) -> list[dict[str, Any]]:
    """The baseline, one chain and one tree of a profile."""
    if setup.profile == KIMI:
        return [baseline_params(setup), spec_params(setup, 2), spec_params(setup, 3, 2, 5)]
    if setup.profile == LLAMA:
        return [baseline_params(setup), spec_params(setup, 5), spec_params(setup, 6, 4, 24)]
    return [baseline_params(setup), spec_params(setup, 3), spec_params(setup, 4, 2, 8)]


def workload_for(setup: Setup, concurrency: int, *, quick: bool) -> dict[str, Any]:
    """6-15 s of measured load per trial: more prompts at higher concurrency, longer outputs on
    the faster (dense) profile. The decode cycles per trial set the sampling error of the
    acceptance draws (about 2% per trial for the Kimi chain at concurrency 1)."""
    if quick:
        n, out = (2 * concurrency, 16)
    elif setup.profile == KIMI:
        n, out = (10, 128) if concurrency == 1 else (24, 128)
    else:
        n, out = (8, 256) if concurrency == 1 else (32, 256)
    return {"source": "builtin", "num_prompts": n, "warmup_prompts": 1 if not quick else 0,
            "output_len": out, "concurrency": concurrency, "seed": 0}


@dataclass
class Row:
    """One compared figure of one config."""

    profile: str
    concurrency: int
    config: str
    metric: str
    expected: float | None
    measured: float | None
    spread: float | None
    error: float | None
    error_kind: str  # "rel" (relative), "pt" (percentage points), "ms" or "req" (requests)
    ok: bool | None
    repeats: list[float | None]


def shares_of(phases: dict[str, Any] | None, *, cycle_key: str) -> dict[str, float | None]:
    """Phase times as percent of the cycle named ``cycle_key``: a trial's ``decode_cycle_ms`` (its
    window also holds prefills) or the evaluator's ``cycle_ms`` (one decode cycle already)."""
    ph = phases or {}
    cycle = ph.get(cycle_key)
    out: dict[str, float | None] = {}
    for name in ("draft", "verify", "extend", "decode", "other"):
        v = ph.get(f"{name}_ms")
        out[name] = 100 * v / cycle if (v is not None and cycle) else None
    return out


class Accuracy:
    """Runs and compares the configs of one profile at one concurrency.

    Args:
        setup: Profile and launch setup.
        concurrency: Requests in flight.
        repeats: Independent trials per config.
        quick: Tiny workloads (for tests).
        seed: Emulator seed of the first trial (later ones add 1); None = random.
    """

    def __init__(self, setup: Setup, concurrency: int, *, repeats: int, quick: bool,
                 seed: int | None) -> None:
        self.setup = setup
        self.concurrency = concurrency
        self.repeats = repeats
        self.seed = seed
        self.space: SearchSpace = bench_space(setup, workload_for(setup, concurrency, quick=quick))
        self.workload = Workload.from_spec(self.space.workload, file=self.space.file)
        self.evaluator = ModelEvaluator(self.space)
        self.rows: list[Row] = []
        self.counted: dict[str, float | None] = {}
        self.trials = 0

    def run(self, params: dict[str, Any]) -> list[TrialResult]:
        results = []
        for _ in range(self.repeats):
            seed = None if self.seed is None else self.seed + self.trials
            self.trials += 1
            settings = MeasureSettings(repeats=1, startup_timeout_s=120, sim_seed=seed)
            result = measure(self.space.trial_config(params), self.workload, settings)
            if not result.ok:
                raise AutotuneError(f"trial of {describe(params)} failed: {result.reason}\n"
                                    f"{result.log_tail or ''}")
            results.append(result)
        if not self.counted:
            recs = [r for r in results[0].records if r.get("ok")]
            self.counted = {
                "prompt_tokens": _mean([r.get("prompt_tokens") for r in recs]),
                "completion_tokens": _mean([r.get("completion_tokens") for r in recs])}
        return results

    def compare(self, params: dict[str, Any]) -> None:
        exp = self.evaluator.expected(params)
        results = self.run(params)
        name = describe(params)
        spec = params.get("speculative_num_steps") is not None

        def add(metric: str, expected: float | None, values: list[float | None], *,
                kind: str = "rel", tol: float | None = None) -> None:
            known = [v for v in values if v is not None]
            measured = median(known) if known and len(known) == len(values) else None
            if kind == "rel":
                err = rel_diff(measured, expected)
            else:
                err = None if measured is None or expected is None else measured - expected
            ok = None if tol is None else (err is not None and abs(err) <= tol)
            self.rows.append(Row(self.setup.profile, self.concurrency, name, metric, expected,
                                 measured, half_range(known) if known else None, err, kind, ok,
                                 values))

        ph = exp["phases"]
        add("output tok/s", exp.get("output_tok_s"), [r.output_tok_s for r in results],
            tol=TOK_S_TOL)
        if spec:
            add("accept length", as_measured(self.evaluator, params)["accept_length"],
                [r.accept_length for r in results], tol=ACCEPT_TOL)
        m_sh = shares_of(ph, cycle_key="cycle_ms")
        t_sh = [shares_of(r.phases, cycle_key="decode_cycle_ms") for r in results]
        for phase in (("draft", "verify", "extend") if spec else ("decode",)):
            add(f"{phase} % of cycle", m_sh[phase], [s[phase] for s in t_sh], kind="pt",
                tol=SHARE_TOL)
        gpu_expected = ph["cycle_ms"] - ph["other_ms"]
        add("GPU ms/cycle", gpu_expected, [gpu_ms(r.phases) for r in results], tol=TOK_S_TOL)
        add("other ms/cycle", ph.get("other_ms"),
            [(r.phases or {}).get("other_ms") for r in results], kind="ms")
        add("mean batch", float(self.concurrency), [mean_batch(r) for r in results], kind="req")


def mean_batch(result: TrialResult) -> float | None:
    """Requests decoding per cycle, on average over the window: decode tokens / (cycles x tokens
    per request-cycle). Below the concurrency when a closed-loop run drains at its end or a
    finished request's replacement misses cycles."""
    ph = result.phases or {}
    gen, reqs, cycles = ph.get("delta_generation_tokens"), ph.get("delta_requests"), ph.get("cycles")
    per = result.accept_length if result.accept_length is not None else 1.0
    if gen is None or reqs is None or not cycles:
        return None
    return (gen - reqs) / (cycles * per)


def gpu_ms(phases: dict[str, Any] | None) -> float | None:
    """Device-timer time of one decode cycle (draft + verify + extend, or decode)."""
    ph = phases or {}
    parts = [ph.get(f"{p}_ms") for p in ("draft", "verify", "extend", "decode")]
    return None if any(v is None for v in parts) else sum(parts)  # type: ignore[arg-type]


def _mean(values: Sequence[Any]) -> float | None:
    nums = [v for v in values if isinstance(v, (int, float))]
    return sum(nums) / len(nums) if nums else None


def render(rows: Sequence[Row]) -> str:
    out = []
    for r in rows:
        digits = ".3f" if r.metric == "accept length" else ".2f"
        err = pct(r.error) if r.error_kind == "rel" else f"{fmt(r.error, '+.2f')} {r.error_kind}"
        out.append([r.profile.split("-")[0], str(r.concurrency), r.config, r.metric,
                    fmt(r.expected, digits), fmt(r.measured, digits), fmt(r.spread, digits),
                    err, verdict(r.ok)])
    return table(["profile", "conc", "config", "metric", "expected", "measured", "spread",
                  "error", "verdict"], out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trial_accuracy",
                                     description=__doc__.split("\n\n")[1].strip())
    parser.add_argument("--profile", action="append", help="profile (repeatable; default: both "
                                                           "built-in profiles)")
    parser.add_argument("--concurrency", type=int, action="append",
                        help="concurrency (repeatable; default 1 and 8)")
    parser.add_argument("--repeats", type=int, default=3, help="independent trials per config")
    parser.add_argument("--quick", action="store_true", help="tiny runs (for tests)")
    parser.add_argument("--seed", type=int, help="emulator seed of the first trial")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    profiles = args.profile or [KIMI, LLAMA]
    concurrencies = args.concurrency or [1, 8]
    configs_limit = 2 if args.quick else None

    t0 = time.monotonic()
    print(f"Trial accuracy: median of {args.repeats} trial(s) against the model's expectation "
          f"({machine_line()})")
    rows: list[Row] = []
    shapes = []
    try:
        with sim_environment(startup_s=0.2):
            for profile in profiles:
                setup = setup_for(profile)
                for conc in concurrencies:
                    acc = Accuracy(setup, conc, repeats=args.repeats, quick=args.quick,
                                   seed=args.seed)
                    for params in configs_for(setup)[:configs_limit]:
                        acc.compare(params)
                    rows.extend(acc.rows)
                    shape = acc.evaluator.shape
                    counted = acc.counted
                    prompt_tokens = counted.get("prompt_tokens")
                    match = (prompt_tokens is not None
                             and abs(prompt_tokens - shape.input_len) <= 0.5
                             and abs((counted.get("completion_tokens") or 0) - shape.output_len) <= 0.5)
                    shapes.append({"profile": profile, "concurrency": conc,
                                   "evaluator_input_len": shape.input_len,
                                   "evaluator_output_len": shape.output_len,
                                   "emulator_prompt_tokens": counted.get("prompt_tokens"),
                                   "emulator_completion_tokens": counted.get("completion_tokens"),
                                   "match": match, "trials": acc.trials})
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(rows))
    print("\nWorkload shape: evaluator's mean lengths vs what the emulator counted (mean "
          "prompt / completion tokens per request)")
    print(table(["profile", "conc", "evaluator in/out", "emulator in/out", "verdict"],
                [[s["profile"].split("-")[0], str(s["concurrency"]),
                  f"{s['evaluator_input_len']}/{s['evaluator_output_len']}",
                  (f"{fmt(s['emulator_prompt_tokens'], '.1f')}/"
                   f"{fmt(s['emulator_completion_tokens'], '.1f')}"),
                  "MATCH" if s["match"] else "DIFFER"] for s in shapes]))
    checked = [r for r in rows if r.ok is not None]
    failures = sum(not r.ok for r in checked) + sum(not s["match"] for s in shapes)
    elapsed = time.monotonic() - t0
    print(f"\n{len(checked) - sum(not r.ok for r in checked)}/{len(checked)} figures within "
          f"tolerance (tok/s {100 * TOK_S_TOL:g}%, accept {100 * ACCEPT_TOL:g}%, shares "
          f"{SHARE_TOL:g} pt); {sum(s['match'] for s in shapes)}/{len(shapes)} shapes match; "
          f"{elapsed:.0f} s")
    write_json(args.json, {"machine": machine_line(), "quick": args.quick,
                           "repeats": args.repeats, "rows": [asdict(r) for r in rows],
                           "shapes": shapes, "elapsed_s": elapsed, "failures": failures})
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
