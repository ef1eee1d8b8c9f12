"""``python -m benchmarks.calibration [--profile P] [--quick] [--seed N] [--json PATH]``.

Issue 2's calibration points (REFERENCE.md §3), printed twice: what the performance model expects,
and what a live emulator measures. Live means a real ``python -m autotune.sim.server`` subprocess,
driven over real HTTP and summarised by :func:`autotune.trial.measure.measure`, exactly as a trial would.

The seed figures are batch-1 decode rates, so the targets are checked against decode tok/s: the
model's ``decode_tok_s`` and the per-request decode tok/s p50 of the live run (end-to-end output
tok/s, prefill included, is printed beside it). Each line says PASS or FAIL against its target.

Two model columns: ``model`` is the steady-state expectation over the whole prompt distribution
(what the seed figures describe and ``tests/unit/sim/test_sim_model.py`` checks); ``model@prompts`` is what a
trial of this run should read: the expectation of :class:`autotune.simtools.evaluate.ModelEvaluator` for
the prompts and lengths actually sent, with decode rate and accept length counted as a trial counts
them (each request's last cycle cut short, :func:`benchmarks._common.as_measured`). ``live-model``
is the live figure's gap to it and ``+-2se`` the live figure's sampling error (two standard errors
of the median over requests).

With ``--profile`` naming a profile that is not built in, there are no seed targets: the live
emulator is checked against the model (within 5%) at the baseline, two chains and the model's best
config.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.errors import AutotuneError
from autotune.sim.config import ModelConfig
from autotune.sim.model import PerformanceModel
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
    machine_line,
    median,
    pct,
    rel_diff,
    se_median,
    setup_for,
    sim_environment,
    spec_params,
    table,
    verdict,
    write_json,
)

NCCL_TUNED = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}


@dataclass(frozen=True)
class Target:
    """A calibration target: ``value`` within ``tol`` (relative unless ``absolute``)."""

    value: float
    tol: float
    absolute: bool = False
    label: str | None = None

    def ok(self, x: float | None) -> bool:
        if x is None:
            return False
        limit = self.tol if self.absolute else self.tol * abs(self.value)
        return abs(x - self.value) <= limit

    def text(self) -> str:
        if self.label:
            return self.label
        tol = f"{self.tol:g}" if self.absolute else f"{100 * self.tol:g}%"
        return f"{self.value:g} +-{tol}"


@dataclass
class Row:
    """One printed line: a quantity of a point, from the model and from the live emulator."""

    point: str
    quantity: str
    target: str
    model: float | None
    model_ok: bool | None
    live: float | None
    live_ok: bool | None
    model_prompts: float | None = None
    live_2se: float | None = None
    note: str = ""


@dataclass
class Live:
    """What a live point measured."""

    result: TrialResult
    decode: list[float] = field(default_factory=list)

    @property
    def decode_p50(self) -> float | None:
        return median(self.decode)

    @property
    def decode_2se(self) -> float | None:
        se = se_median(self.decode)
        return None if se is None else 2 * se


@dataclass(frozen=True)
class Sizes:
    """Workload sizes of the live runs: (prompts, output tokens) per kind of point."""

    baseline: tuple[int, int]
    spec: tuple[int, int]
    tree: tuple[int, int]
    warmup: int

    @classmethod
    def for_run(cls, quick: bool) -> Sizes:
        if quick:
            return cls(baseline=(2, 24), spec=(2, 24), tree=(2, 24), warmup=0)
        # Many prompts and short outputs: acceptance differs per prompt, so many prompts keep
        # the prompt set close to the distribution; the total decode cycles set the sampling error.
        return cls(baseline=(16, 64), spec=(24, 64), tree=(32, 128), warmup=1)


class Calibration:
    """Runs the points of one profile: model expectations and live measurements.

    Args:
        setup: The profile and its launch setup.
        sizes: Workload sizes of the live runs.
        seed: Emulator seed of the first live run (later runs add 1 each); None = random.
        live: Measure live (False prints the model's side only).
    """

    def __init__(self, setup: Setup, *, sizes: Sizes, seed: int | None, live: bool = True) -> None:
        self.setup = setup
        self.sizes = sizes
        self.seed = seed
        self.live = live
        self.rows: list[Row] = []
        self.runs: list[dict[str, Any]] = []
        self._spaces: dict[tuple[int, int], SearchSpace] = {}
        self._evaluators: dict[tuple[int, int], ModelEvaluator] = {}
        self._profile = ModelEvaluator(self._space((1, 8))).profile

    # ----- model ----------------------------------------------------------------------------------
    def _space(self, size: tuple[int, int]) -> SearchSpace:
        if size not in self._spaces:
            n, out = size
            self._spaces[size] = bench_space(self.setup, {
                "source": "builtin", "num_prompts": n, "warmup_prompts": self.sizes.warmup,
                "output_len": out, "concurrency": 1, "seed": 0})
        return self._spaces[size]

    def model(self, params: dict[str, Any], size: tuple[int, int] | None = None) -> dict[str, Any]:
        """The model's expectation over the prompt distribution at batch 1, as a dict; with
        ``size``, at the mean prompt and output lengths of that run (for e2e tok/s)."""
        cfg = self._space((1, 8)).trial_config(params)
        pm = PerformanceModel(self._profile, ModelConfig.from_server_args(cfg.server_args, cfg.env))
        failure = pm.check_startup(visible_gpus=None)
        if failure:
            raise AutotuneError(f"{describe(params)} cannot start on {self.setup.profile}: {failure}")
        if size is None:
            return pm.expected(batch=1).to_dict()
        shape = self._evaluator(size).shape
        return pm.expected(batch=1, input_len=shape.input_len,
                           output_len=shape.output_len).to_dict()

    def _evaluator(self, size: tuple[int, int]) -> ModelEvaluator:
        if size not in self._evaluators:
            self._evaluators[size] = ModelEvaluator(self._space(size))
        return self._evaluators[size]

    def model_at_prompts(self, params: dict[str, Any], size: tuple[int, int]) -> dict[str, Any]:
        """The expectation for the prompts a live run of ``size`` sends."""
        return self._evaluator(size).expected(params)

    # ----- live -----------------------------------------------------------------------------------
    def measure(self, params: dict[str, Any], size: tuple[int, int]) -> Live | None:
        """Measure ``params`` on a live emulator (None when live runs are off)."""
        if not self.live:
            return None
        space = self._space(size)
        seed = None if self.seed is None else self.seed + len(self.runs)
        settings = MeasureSettings(repeats=1, startup_timeout_s=120, sim_seed=seed)
        t0 = time.monotonic()
        result = measure(space.trial_config(params),
                         Workload.from_spec(space.workload, file=space.file), settings)
        decode = [r["decode_tok_s"] for r in result.records
                  if r.get("ok") and r.get("decode_tok_s") is not None]
        sim = (result.server_info or {}).get("autotune_sim") or {}
        self.runs.append({"config": describe(params), "status": result.status,
                          "reason": result.reason, "seed": sim.get("seed", seed),
                          "prompts": size[0], "output_len": size[1],
                          "seconds": round(time.monotonic() - t0, 1)})
        if not result.ok:
            raise AutotuneError(f"live run of {describe(params)} failed: {result.reason}\n"
                                f"{result.log_tail or ''}")
        return Live(result, decode)

    # ----- rows -----------------------------------------------------------------------------------
    def add(self, point: str, quantity: str, target: Target | None, model: float | None,
            live: float | None, *, model_prompts: float | None = None,
            live_2se: float | None = None, note: str = "", check_model: bool = True) -> None:
        """Add a row; a live figure is checked only when there is one to check."""
        self.rows.append(Row(
            point=point, quantity=quantity, target=target.text() if target else "-", model=model,
            model_ok=target.ok(model) if target and check_model else None, live=live,
            live_ok=(target.ok(live) if target and self.live and live is not None else None),
            model_prompts=model_prompts, live_2se=live_2se, note=note))

    def add_check(self, point: str, quantity: str, target: str, value: Any, ok: bool,
                  note: str = "") -> None:
        """A yes/no property of the model (no live figure)."""
        self.rows.append(Row(point=point, quantity=quantity, target=target, model=value,
                             model_ok=ok, live=None, live_ok=None, note=note))

    def decode_point(self, point: str, params: dict[str, Any], size: tuple[int, int],
                     target: Target | None, *, shares: dict[str, Target] | None = None,
                     accept: Target | None = None,
                     check_model: bool = True) -> tuple[dict[str, Any], Live | None]:
        """A point whose target is a decode rate, with optional accept-length and share targets.
        Without ``check_model`` the targets are the model's own figures: only live is checked."""
        m = self.model(params, size)
        mp = self.model_at_prompts(params, size)
        seen = as_measured(self._evaluator(size), params)
        live = self.measure(params, size)
        self.add(point, "decode tok/s", target, m["decode_tok_s"],
                 live.decode_p50 if live else None, model_prompts=seen["decode_tok_s_per_request"],
                 live_2se=live.decode_2se if live else None, check_model=check_model)
        self.add("", "e2e output tok/s", None, m["output_tok_s"],
                 live.result.output_tok_s if live else None, model_prompts=mp.get("output_tok_s"),
                 note="prefill included; model column at the run's lengths")
        if accept is not None:
            self.add("", "accept length", accept, m["accept_length"],
                     live.result.accept_length if live else None,
                     model_prompts=seen["accept_length"], check_model=check_model)
        if shares:
            model_shares = gpu_shares(m["phases"])
            live_shares = gpu_shares(live.result.phases) if live else {}
            for phase, tgt in shares.items():
                self.add("", f"{phase} share of GPU %", tgt, model_shares.get(phase),
                         live_shares.get(phase), model_prompts=gpu_shares(mp["phases"]).get(phase))
        return m, live

    def best(self, candidates: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The candidate with the highest model decode rate (among those that start)."""
        scored = []
        for params in candidates:
            try:
                scored.append((self.model(params)["decode_tok_s"], params))
            except AutotuneError:
                continue
        if not scored:
            raise AutotuneError(f"no candidate config starts on {self.setup.profile}")
        return max(scored, key=lambda s: s[0])[1]


def gpu_shares(phases: dict[str, Any] | None) -> dict[str, float | None]:
    """Share of each speculative phase in the cycle's GPU time (draft + verify + extend = 100%),
    the way the seed's profile table splits a cycle."""
    if not phases:
        return {}
    parts = {p: phases.get(f"{p}_ms") for p in ("draft", "verify", "extend")}
    if any(v is None for v in parts.values()):
        return {p: None for p in parts}
    total = sum(parts.values())  # type: ignore[arg-type]
    return {p: (100 * v / total if total else None) for p, v in parts.items()}  # type: ignore[operator]


def chains(setup: Setup, steps: range) -> list[dict[str, Any]]:
    return [spec_params(setup, s, 1) for s in steps]


def trees(setup: Setup, *, max_steps: int = 10, topks: Sequence[int] = (1, 2, 4, 8),
          max_draft: int = 64) -> list[dict[str, Any]]:
    """Every EAGLE shape up to ``max_steps`` steps and ``max_draft`` draft tokens."""
    out = []
    for s in range(1, max_steps + 1):
        for k in topks:
            if k == 1:
                out.append(spec_params(setup, s, 1))
            else:
                out.extend(spec_params(setup, s, k, n) for n in range(2, min(max_draft, s * k + 1) + 1))
    return out


# ----- the points ---------------------------------------------------------------------------------
def kimi_points(cal: Calibration) -> None:
    s, z = cal.setup, cal.sizes
    base_p = baseline_params(s)
    _, base_live = cal.decode_point("Kimi baseline, batch 1", base_p, z.baseline, Target(90, 0.05))
    cal.decode_point("Kimi steps 5 / topk 1", spec_params(s, 5), z.spec, Target(71, 0.05),
                     accept=Target(2.1, 0.15, absolute=True),
                     shares={"draft": Target(7, 2, True), "verify": Target(90, 2, True),
                             "extend": Target(3.5, 1, True)})
    cal.decode_point("Kimi steps 10 / topk 1", spec_params(s, 10), z.spec, Target(60, 0.05))
    # The best chain: found by the model among 1..10 steps, then measured.
    best = cal.best(chains(s, range(1, 11)))
    steps = best["speculative_num_steps"]
    cal.add_check("Kimi best topk-1 chain", "best steps (model)", "2", str(steps), steps == 2,
                  note="searched 1..10 steps with the model")
    m_best, live_best = cal.decode_point("", best, z.spec, None)
    m_base = cal.model(base_p)
    cal.add("", "decode vs baseline", Target(0, 0.03, True, label="within 3%"),
            rel_diff(m_best["decode_tok_s"], m_base["decode_tok_s"]),
            rel_diff(live_best.decode_p50, base_live.decode_p50) if live_best and base_live else None,
            note="relative; target: within 3% of the baseline")
    cal.decode_point("Kimi steps 2 + NCCL Ring/LL", spec_params(s, 2, env=NCCL_TUNED), z.spec,
                     Target(94, 0.05))


def llama_points(cal: Calibration) -> None:
    s, z = cal.setup, cal.sizes
    cal.decode_point("Llama baseline, batch 1", baseline_params(s), z.baseline, Target(158, 0.05))
    best = cal.best(trees(s))
    steps, topk = best["speculative_num_steps"], best["speculative_eagle_topk"]
    cal.decode_point(f"Llama best tree ({describe(best)})", best, z.tree, Target(373, 0.05))
    cal.add_check("", "deep or wide (model)", "steps>=5 or topk>=4", f"s{steps}/k{topk}",
                  steps >= 5 or topk >= 4)


def custom_points(cal: Calibration) -> None:
    """A profile without seed figures: the live emulator against the model, within 5%."""
    s, z = cal.setup, cal.sizes
    best = cal.best(trees(s))
    for name, params, size in (("baseline", baseline_params(s), z.baseline),
                               ("steps 2 / topk 1", spec_params(s, 2), z.spec),
                               ("steps 5 / topk 1", spec_params(s, 5), z.spec),
                               (f"model's best ({describe(best)})", best, z.tree)):
        seen = as_measured(cal._evaluator(size), params)
        speculative = params.get("speculative_num_steps") is not None
        cal.decode_point(
            name, params, size,
            Target(seen["decode_tok_s_per_request"] or 0.0, 0.05, label="model@prompts +-5%"),
            accept=Target(seen["accept_length"] or 0.0, 0.05 * (seen["accept_length"] or 0.0),
                          True, label="model@prompts +-5%") if speculative else None,
            check_model=False)


POINTS: dict[str, Callable[[Calibration], None]] = {KIMI: kimi_points, LLAMA: llama_points}


# ----- output -------------------------------------------------------------------------------------
def render(profile: str, rows: Sequence[Row], *, live: bool) -> str:
    headers = ["point", "quantity", "target", "model", "verdict"]
    if live:
        headers += ["model@prompts", "live", "+-2se", "verdict", "live-model"]
    out = []
    for r in rows:
        spec = ".3f" if r.quantity in ("accept length",) or "vs" in r.quantity else ".2f"
        if "vs baseline" in r.quantity:
            model_txt, live_txt = pct(r.model), pct(r.live)
        else:
            model_txt, live_txt = fmt(r.model, spec), fmt(r.live, spec)
        line = [r.point, r.quantity, r.target, model_txt, verdict(r.model_ok)]
        if live:
            gap = rel_diff(r.live, r.model_prompts) if "vs" not in r.quantity else None
            line += [fmt(r.model_prompts, spec, none="-"), live_txt if r.live is not None else "-",
                     fmt(r.live_2se, ".2f", none="-"), verdict(r.live_ok),
                     pct(gap) if gap is not None else "-"]
        out.append(line)
    return f"== {profile}\n" + table(headers, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calibration",
                                     description=__doc__.split("\n\n")[1].strip())
    parser.add_argument("--profile", action="append",
                        help="built-in profile name or profile YAML (repeatable; default: both "
                             "built-in profiles)")
    parser.add_argument("--quick", action="store_true", help="tiny live runs (for tests)")
    parser.add_argument("--model-only", action="store_true", help="skip the live emulator")
    parser.add_argument("--seed", type=int, help="emulator seed of the first live run")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)

    profiles = args.profile or [KIMI, LLAMA]
    sizes = Sizes.for_run(args.quick)
    t0 = time.monotonic()
    print(f"Calibration points ({machine_line()})")
    report: dict[str, Any] = {"machine": machine_line(), "quick": args.quick, "profiles": {}}
    failures = 0
    try:
        with sim_environment(startup_s=0.2):
            for profile in profiles:
                setup = setup_for(profile)
                cal = Calibration(setup, sizes=sizes, seed=args.seed, live=not args.model_only)
                POINTS.get(profile, custom_points)(cal)
                print(render(profile, cal.rows, live=cal.live))
                for r in cal.rows:
                    failures += (r.model_ok is False) + (r.live_ok is False)
                report["profiles"][profile] = {"rows": [asdict(r) for r in cal.rows],
                                               "runs": cal.runs}
                print()
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - t0
    checked = sum((r["model_ok"] is not None) + (r["live_ok"] is not None)
                  for p in report["profiles"].values() for r in p["rows"])
    print(f"{checked - failures}/{checked} checks PASS in {elapsed:.0f} s")
    report.update(elapsed_s=elapsed, checks=checked, failures=failures)
    write_json(args.json, report)
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
