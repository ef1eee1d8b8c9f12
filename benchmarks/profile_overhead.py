"""``python -m benchmarks.profile_overhead [--quick] [--pairs N] [--profile P] [--json PATH]``, or on
any backend ``... --space FILE --params JSON [--timer-only] [--mem-fraction F]``.

What does the phase profile cost? Two emulators run side by side with the same config and the same
seed: ``on`` has ``--enable-metrics`` and ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1`` and is scraped
(``/metrics`` and ``/server_info``) before and after every run, as a trial does; ``off`` has neither
and is never scraped. Runs alternate between them (on-off, then off-on, ...), so drift in the
machine's load hits both alike, and with the same seed each pair draws the same acceptance
lengths (on real SGLang both servers get ``--random-seed`` of that seed: it seeds the draws of
forced acceptance). Printed: every run's output tok/s, the medians, the ratio of the medians and the median of
the per-pair ratios. PASS when both ratios are within 1% of 1.

With ``--space`` the two servers are that space's config ``--params`` (real SGLang on a GPU: both
servers share it, each with ``--mem-fraction`` of its memory, and only the one being measured
runs; an idle SGLang server launches no GPU work). ``--timer-only`` keeps ``--enable-metrics`` on
both and toggles only ``SGLANG_ENABLE_METRICS_DEVICE_TIMER``: the cost of the CUDA-event timer
itself, which the emulator cannot show.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from autotune.bench.client import run_benchmark
from autotune.errors import AutotuneError
from autotune.launch.spec import LaunchSpec
from autotune.profile.phases import PhaseProfile
from autotune.profile.snapshot import scrape
from autotune.server.process import ServerProcess
from autotune.space.search_space import SearchSpace
from autotune.space.workload import Workload
from autotune.trial.measure import DEVICE_TIMER_ENV, launch_spec
from benchmarks._common import (
    LLAMA,
    bench_space,
    describe,
    fmt,
    machine_line,
    median,
    pct,
    setup_for,
    spec_params,
    table,
    verdict,
    write_json,
)

TOLERANCE = 0.01


def off_spec(on: LaunchSpec, *, timer_only: bool = False) -> LaunchSpec:
    """The same launch without the device timer, and without metrics unless ``timer_only``."""
    args = {k: v for k, v in on.server_args.items() if timer_only or k != "enable_metrics"}
    env = {k: v for k, v in on.env.items() if k not in DEVICE_TIMER_ENV}
    return LaunchSpec(model_path=on.model_path, draft_model_path=on.draft_model_path,
                      server_args=args, env=env, backend=on.backend, trial_only=on.trial_only)


def _from_space(path: str, params_json: str, mem_fraction: float | None, *,
                full_graphs: bool = False) -> tuple[SearchSpace, dict, LaunchSpec]:
    """(space, params, the 'on' launch) of a space's config, as its trials launch it."""
    import json

    from autotune.space.search_space import load_space
    from autotune.trial.measure_settings import settings_for

    space = load_space(path)
    params = space.coerce_params(json.loads(params_json))
    reason = space.validate_config(params)
    if reason:
        raise AutotuneError(f"--params: {reason}")
    if space.backend == "sglang":
        space.check_paths()
    overrides: dict[str, Any] = {"fast_start": False} if full_graphs else {}
    on = launch_spec(space.trial_config(params), settings_for(space, **overrides))
    if mem_fraction is not None:
        on = replace(on, server_args={**on.server_args, "mem_fraction_static": mem_fraction})
    return space, params, on


async def one_run(url: str, workload: Workload, *, profiled: bool) -> dict[str, Any]:
    """One measured run; with ``profiled``, scraped before and after like a trial."""
    kwargs = workload.bench_kwargs()
    async with httpx.AsyncClient(timeout=30.0) as client:
        before = await scrape(client, url) if profiled else None
        bench = await run_benchmark(url, workload.measured(), **kwargs)
        after = await scrape(client, url) if profiled else None
    if bench.failed or not bench.output_tok_s or not bench.duration_s:
        raise AutotuneError(f"a run failed: {bench.errors}")
    # Per-request accept length (meta_info): equal on both servers when the seeds pair the draws.
    out: dict[str, Any] = {"tok_s": bench.output_tok_s, "tokens": bench.total_completion_tokens,
                           "accept_meta": bench.accept_length}
    if profiled:
        prof = PhaseProfile.from_snapshots(before, after, wall_s=bench.duration_s,  # type: ignore[arg-type]
                                           max_batch=kwargs.get("concurrency"),
                                           speculative=True, tok_s=bench.output_tok_s)
        if not prof.device_timer or prof.verify_ms is None:
            raise AutotuneError(f"the profiled server gave no phase profile: {prof.notes}")
        out.update(cycle_ms=prof.cycle_ms, verify_ms=prof.verify_ms,
                   accept_length=prof.accept_length)
    return out


def _argv_at(spec: LaunchSpec, port: int) -> list[str]:
    return spec.argv(port=port)


def sim_backend(spec: LaunchSpec) -> bool:
    from autotune.backend import get_backend

    return get_backend(spec.backend).emulated


def cycles_per_s(run: dict[str, Any]) -> float | None:
    """A run's tok/s over its accept length: speculative cycles a second. On real SGLang the forced
    acceptance draws differ between the two servers, and that noise divides out here."""
    acc = run.get("accept_meta")
    return run["tok_s"] / acc if acc else None


def report(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Print the pairs and the figures of ``runs`` (``{"on": [...], "off": [...]}``); return the
    figures. The verdict is on tok/s; the per-cycle ratios are printed beside it."""
    on_tok = [r["tok_s"] for r in runs["on"]]
    off_tok = [r["tok_s"] for r in runs["off"]]
    on_med, off_med = median(on_tok), median(off_tok)
    pairs = [a / b for a, b in zip(on_tok, off_tok, strict=True)]
    pair_ratio = median(pairs)
    if on_med is None or off_med is None or pair_ratio is None:
        raise AutotuneError("no measured pairs to report")
    ratio = on_med / off_med
    ok = abs(ratio - 1) < TOLERANCE and abs(pair_ratio - 1) < TOLERANCE
    print(table(["pair", "order", "on tok/s", "off tok/s", "on/off", "on cycle ms", "accept on/off"],
                [[str(i + 1), "on-off" if i % 2 == 0 else "off-on", fmt(a["tok_s"]),
                  fmt(b["tok_s"]), fmt(pair, ".4f"), fmt(a.get("cycle_ms")),
                  f"{fmt(a.get('accept_meta'), '.3f')}/{fmt(b.get('accept_meta'), '.3f')}"]
                 for i, (a, b, pair) in enumerate(zip(runs["on"], runs["off"], pairs, strict=True))]))
    print(f"\nmedian tok/s: on {fmt(median(on_tok))}, off {fmt(median(off_tok))}; "
          f"ratio of medians {ratio:.4f} ({pct(ratio - 1)}); median pair ratio "
          f"{pair_ratio:.4f} ({pct(pair_ratio - 1)}); pair ratios "
          f"{min(pairs):.4f}-{max(pairs):.4f}")
    on_c = [cycles_per_s(r) for r in runs["on"]]
    off_c = [cycles_per_s(r) for r in runs["off"]]
    figures: dict[str, Any] = {"median_on": median(on_tok), "median_off": median(off_tok),
                               "ratio": ratio, "pair_ratio": pair_ratio, "ok": ok}
    if all(c is not None for c in on_c + off_c):
        c_ratio = median(on_c) / median(off_c)  # type: ignore[operator,arg-type]
        c_pair = median([a / b for a, b in zip(on_c, off_c, strict=True)])  # type: ignore[operator]
        print(f"per cycle (tok/s / accept length, the acceptance draws divided out): ratio of "
              f"medians {c_ratio:.4f} ({pct(c_ratio - 1)}); median pair ratio {c_pair:.4f} "
              f"({pct(c_pair - 1)})")  # type: ignore[operator]
        figures.update(cycle_ratio=c_ratio, cycle_pair_ratio=c_pair)
    print(f"{verdict(ok)}: the phase profile changes tok/s by less than {100 * TOLERANCE:g}%"
          if ok else f"{verdict(ok)}: the phase profile changes tok/s by "
          f"{pct(ratio - 1)} (tolerance {100 * TOLERANCE:g}%)")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_overhead",
                                     description=__doc__.split("\n\n")[1].strip())
    parser.add_argument("--profile", default=LLAMA, help=f"sim profile (default {LLAMA})")
    parser.add_argument("--pairs", type=int, default=6, help="on/off pairs")
    parser.add_argument("--seed", type=int, help="emulator seed of both servers (default random)")
    parser.add_argument("--quick", action="store_true", help="two short pairs (for tests)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--space", help="measure this space's config (any backend) instead")
    parser.add_argument("--params", default="{}", help="with --space: the config, as JSON")
    parser.add_argument("--timer-only", action="store_true",
                        help="toggle only the device timer; --enable-metrics stays on both")
    parser.add_argument("--mem-fraction", type=float,
                        help="with --space: two servers share one GPU; the first gets this "
                             "mem_fraction_static, the second twice it (SGLang's KV sizing)")
    parser.add_argument("--full-graphs", action="store_true",
                        help="with --space: prefill CUDA graphs on, whatever measure.fast_start says")
    parser.add_argument("--from-json", metavar="PATH",
                        help="print the figures of a run saved with --json; starts nothing")
    args = parser.parse_args(argv)
    if args.from_json:
        import json

        try:
            saved = json.loads(Path(args.from_json).read_text())
            print(f"{saved['what']} overhead: {saved['profile']} {saved['config']} "
                  f"({saved['machine']}), from {args.from_json}")
            return 0 if report(saved["runs"])["ok"] else 1
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"error: {args.from_json}: not a saved run of this benchmark ({exc})", file=sys.stderr)
            return 2
    pairs = 2 if args.quick else args.pairs
    if pairs < 1:
        parser.error("--pairs must be >= 1")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)

    try:
        if args.space:
            space, params, on = _from_space(args.space, args.params, args.mem_fraction,
                                            full_graphs=args.full_graphs)
            if not sim_backend(on) and "random_seed" not in on.server_args:
                # SGLang draws forced acceptance from its seeded RNG: one seed on both servers
                # gives both the same draws, so a pair differs by the timer alone.
                on = replace(on, server_args={**on.server_args, "random_seed": seed})
            label = space.name
            n, out = space.workload.get("num_prompts"), space.workload.get("output_len")
        else:
            setup = setup_for(args.profile)
            label = setup.profile
            n, out = (2, 32) if args.quick else (8, 128)
            space = bench_space(setup, {"source": "builtin", "num_prompts": n, "warmup_prompts": 1,
                                        "output_len": out, "concurrency": 1, "seed": 0})
            params = spec_params(setup, 5)
            on = launch_spec(space.trial_config(params))
    except (AutotuneError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    workload = Workload.from_spec(space.workload, file=space.file)
    specs = {"on": on, "off": off_spec(on, timer_only=args.timer_only)}
    sim = sim_backend(on)
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith("AUTOTUNE_SIM_") and k not in DEVICE_TIMER_ENV}
    what = "device-timer" if args.timer_only else "phase-profile"
    print(f"{what} overhead: {label} {describe(params)}, {n} prompts x {out} "
          f"tokens, concurrency 1, seed {seed} on both servers ({machine_line()})")
    logs = Path(tempfile.mkdtemp(prefix="profile-overhead-"))
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    t0 = time.monotonic()
    interrupted = False
    try:
        with ExitStack() as stack:
            servers = {}
            if args.mem_fraction is not None:
                # SGLang sizes its KV pool as if alone on the GPU (free memory after its weights,
                # minus (1 - fraction) of the total), so the server started second needs twice the
                # fraction to hold as much as the first: each then has about that fraction.
                second = specs["off"]
                specs["off"] = replace(second, server_args={**second.server_args,
                                                            "mem_fraction_static": 2 * args.mem_fraction})
            for name, spec in specs.items():
                env = {**base_env, **spec.env}
                if sim:
                    env.update({"AUTOTUNE_SIM_STARTUP_S": "0.2", "AUTOTUNE_SIM_SEED": str(seed)})
                servers[name] = stack.enter_context(ServerProcess(
                    functools.partial(_argv_at, spec), env=env, inherit_env=False,
                    startup_timeout_s=120 if sim else 600, log_path=logs / f"{name}.log"))
            metrics_off = httpx.get(servers["off"].url + "/metrics", timeout=10).status_code
            if metrics_off == 200 and not args.timer_only:
                raise AutotuneError("the 'off' server serves /metrics; it is not off")
            warm = workload.warmup() + workload.measured()  # every prompt shape compiled on both
            for name in ("on", "off"):
                asyncio.run(run_benchmark(servers[name].url, warm, concurrency=1))
            for i in range(pairs):
                order = ("on", "off") if i % 2 == 0 else ("off", "on")
                for name in order:
                    servers[name].ensure_alive()
                    runs[name].append(asyncio.run(one_run(servers[name].url, workload,
                                                          profiled=name == "on")))
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a deadline's SIGINT: the servers are stopped; whole pairs are kept
        done = min(len(runs["on"]), len(runs["off"]))
        runs = {name: r[:done] for name, r in runs.items()}
        print(f"interrupted after {done} whole pair(s) of {pairs}", file=sys.stderr)
        if not done:
            return 130
        interrupted = True
    elapsed = time.monotonic() - t0
    figures = report(runs)
    print(f"{elapsed:.0f} s")
    write_json(args.json, {"machine": machine_line(), "quick": args.quick, "what": what,
                           "timer_only": args.timer_only, "space": args.space,
                           "profile": label, "config": describe(params), "seed": seed,
                           "runs": runs, **figures, "elapsed_s": elapsed,
                           "pairs_asked": pairs, "interrupted": interrupted})
    if interrupted:
        return 130
    ok = figures["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
