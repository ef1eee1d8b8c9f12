"""Where a trial's repeat spread comes from, on one server (the real search's spread question).

    python3 scripts/gpu/spread_probe.py --space SPACE --params JSON [--variants 8x192,4x384]
        [--rounds 5] [--json OUT]

Starts the space's config once, as a trial launches it, warms it up on every variant's prompts, and
then measures ``--rounds`` rounds; a round runs each workload variant (``NxL``: N prompts of L
output tokens, the rest of the space's workload kept) once, from a flushed cache, scraped before and
after as a trial is, the order rotated from round to round; ``--full-graphs`` starts it with prefill
CUDA graphs even where the space's ``measure.fast_start`` would leave them out. Each run is one row of
:func:`autotune.trial.result.repeat_breakdown` (tok/s, accept length, prefill GPU seconds, the
other GPU seconds, host seconds), with the GPU's SM clock, temperature and power over the run when
``nvidia-smi`` is there (sampled every 200 ms). Printed per variant: median tok/s, robust spread and
range, and the spread of each part, so it says whether tok/s moves with the acceptance draws, the
prefills, the cycle's GPU time or the host. Exit 0 when every run completed, 1 when one failed,
2 for bad input, 130 when interrupted (SIGINT: the runs so far are still printed and written).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))

from autotune.bench.client import run_benchmark  # noqa: E402
from autotune.errors import AutotuneError  # noqa: E402
from autotune.profile.phases import PhaseProfile  # noqa: E402
from autotune.profile.snapshot import scrape  # noqa: E402
from autotune.server.process import ServerProcess  # noqa: E402
from autotune.space.workload import Workload  # noqa: E402
from autotune.trial.measure import launch_spec  # noqa: E402
from autotune.trial.measure_settings import settings_for  # noqa: E402
from autotune.trial.result import repeat_breakdown, spread_pct  # noqa: E402

SMI_QUERY = "clocks.sm,clocks.mem,temperature.gpu,power.draw"


class Smi:
    """nvidia-smi sampling in the background, each line stamped with this process's clock."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, list[float]]] = []
        self.proc: subprocess.Popen | None = None
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits",
                 "-lms", "200", "-i", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True)
        except OSError:
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                values = [float(v) for v in line.split(",")]
            except ValueError:
                continue
            self.samples.append((time.monotonic(), values))

    def window(self, t0: float, t1: float) -> dict[str, float | None]:
        names = SMI_QUERY.split(",")
        inside = [v for t, v in self.samples if t0 <= t <= t1]
        if not inside:
            return {n: None for n in names}
        return {n: statistics.fmean(v[i] for v in inside) for i, n in enumerate(names)}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def variant_workload(space: Any, text: str) -> Workload:
    try:
        n, length = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise AutotuneError(f"--variants: {text!r} is not NxL (prompts x output tokens), e.g. 8x192") from None
    return Workload.from_spec({**space.workload, "num_prompts": n, "output_len": length},
                              file=space.file)


async def one_run(url: str, workload: Workload, *, speculative: bool) -> dict[str, Any]:
    kwargs = workload.bench_kwargs()
    async with httpx.AsyncClient(timeout=30.0) as client:
        await client.post(url + "/flush_cache")
        before = await scrape(client, url)
        bench = await run_benchmark(url, workload.measured(), **kwargs)
        after = await scrape(client, url)
    if bench.failed or not bench.duration_s:
        raise AutotuneError(f"a run failed: {bench.errors}")
    prof = PhaseProfile.from_snapshots(before, after, wall_s=bench.duration_s,
                                       max_batch=kwargs.get("concurrency"), speculative=speculative,
                                       meta_accept_length=bench.accept_length,
                                       tok_s=bench.output_tok_s)
    return repeat_breakdown([bench], [prof])[0]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median tok/s, and (robust spread %, range %) of tok/s and of each part of the runs."""
    out: dict[str, Any] = {"runs": len(rows),
                           "tok_s": statistics.median(r["tok_s"] for r in rows)}
    for key in ("tok_s", "accept_length", "cycle_gpu_ms", "prefill_s", "host_s", "wall_s",
                "ttft_ms_p50", "clocks.sm"):
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key + "_spread"] = spread_pct(values)  # (None, None) below two values
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu/spread_probe.py",
                                     description=__doc__.split("\n\n")[1].strip())
    parser.add_argument("--space")
    parser.add_argument("--params", default="{}", help="the config, as JSON")
    parser.add_argument("--variants", default=None,
                        help="comma-separated NxL workloads (default: the space's own)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warm-rounds", type=int, default=2,
                        help="unscored rounds of every variant before the measured ones")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--full-graphs", action="store_true",
                        help="prefill CUDA graphs on, whatever the space's measure.fast_start says")
    parser.add_argument("--from-json", metavar="PATH",
                        help="print the runs and figures of a probe saved with --json; starts nothing")
    parser.add_argument("--log", metavar="PATH", help="the server's log (default: a temporary file)")
    args = parser.parse_args(argv)
    from autotune import cli
    from autotune.space.search_space import load_space

    cli.interruptible()
    if args.from_json:
        try:
            saved = json.loads(Path(args.from_json).read_text())
            print(f"{saved['space']} {json.dumps(saved['params'])}, prefill CUDA graphs "
                  f"{'on' if saved['full_graphs'] else 'as the space says'}, from {args.from_json}")
            report(saved["rows"], saved["variants"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"error: {args.from_json}: not a saved probe ({exc})", file=sys.stderr)
            return 2
        return 0
    if not args.space:
        parser.error("--space is required (or --from-json)")

    try:
        space = load_space(args.space)
        params = space.coerce_params(json.loads(args.params))
        reason = space.validate_config(params)
        if reason:
            raise AutotuneError(f"--params: {reason}")
        if space.backend == "sglang":
            space.check_paths()
        names = (args.variants.split(",") if args.variants else
                 [f"{space.workload.get('num_prompts')}x{space.workload.get('output_len')}"])
        workloads = {v: variant_workload(space, v) for v in names}
        if args.rounds < 2:
            raise AutotuneError("--rounds must be >= 2 (a spread needs two runs)")
        config = space.trial_config(params)
        overrides: dict[str, Any] = {"fast_start": False} if args.full_graphs else {}
        spec = launch_spec(config, settings_for(space, **overrides))
    except (AutotuneError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    speculative = bool(spec.server_args.get("speculative_algorithm"))
    env = {**os.environ, **spec.env}
    log = Path(args.log) if args.log else Path(tempfile.mkdtemp(prefix="spread-probe-")) / "server.log"
    rows: list[dict[str, Any]] = []
    smi = Smi()
    t_start = time.monotonic()
    rc = 0
    try:
        with ServerProcess(lambda port: spec.argv(port=port), env=env, inherit_env=False,
                           startup_timeout_s=600, log_path=log) as server:
            started_s = time.monotonic() - t_start
            print(f"server up after {started_s:.1f} s; log {log}", flush=True)
            print("launch: " + spec.shell_command(), flush=True)
            order = list(names)
            for r in range(args.warm_rounds + args.rounds):
                for v in order:
                    server.ensure_alive()
                    t0 = time.monotonic()
                    row = asyncio.run(one_run(server.url, workloads[v], speculative=speculative))
                    t1 = time.monotonic()
                    if row.get("cycle_gpu_s") is not None and row.get("cycles"):
                        row["cycle_gpu_ms"] = 1e3 * row["cycle_gpu_s"] / row["cycles"]
                    row.update(variant=v, round=r - args.warm_rounds, t0_s=t0 - t_start,
                               t1_s=t1 - t_start, **smi.window(t0, t1))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                order = order[1:] + order[:1]
    except (AutotuneError, httpx.HTTPError, OSError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        rc = 1
    except KeyboardInterrupt:  # a deadline's SIGINT: the server is stopped, the runs so far kept
        print("interrupted; the runs so far are kept", file=sys.stderr)
        rc = 130
    finally:
        smi.stop()
    by_variant = report(rows, names, table=False)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"space": args.space, "params": params, "launch": spec.shell_command(),
             "full_graphs": args.full_graphs, "variants": names, "rounds": args.rounds,
             "warm_rounds": args.warm_rounds, "rows": rows, "summary": by_variant,
             "server_log": str(log)}, indent=1))
    return rc


def report(rows: list[dict[str, Any]], names: list[str], *, table: bool = True) -> dict[str, Any]:
    """Print the measured runs (``table``) and each variant's figures; return the figures."""
    measured = [r for r in rows if r["round"] >= 0]
    if table:  # every run; the unscored warm rounds have negative round numbers
        print("variant round   t s  tok/s  accept  cycle GPU ms  prefill s  host s  wall s  "
              "TTFT p50 ms  SM MHz  W")
        for r in rows:
            print(f"{r['variant']:>7} {r['round']:5d} {r['t0_s']:5.0f} {r['tok_s']:6.1f}  "
                  f"{num(r.get('accept_length'), '.3f'):>6}  {num(r.get('cycle_gpu_ms'), '.3f'):>12}  "
                  f"{num(r.get('prefill_s'), '.3f'):>9}  {num(r.get('host_s'), '.3f'):>6}  "
                  f"{r['wall_s']:6.2f}  {num(r.get('ttft_ms_p50'), '.1f'):>11}  "
                  f"{num(r.get('clocks.sm'), '.0f'):>6}  {num(r.get('power.draw'), '.0f')}")
    by_variant = {v: summary([r for r in measured if r["variant"] == v]) for v in names
                  if any(r["variant"] == v for r in measured)}
    for v, s in by_variant.items():
        parts = ", ".join(f"{k[:-7]} {fmt(s[k])}" for k in s if k.endswith("_spread"))
        print(f"{v}: {s['runs']} runs, median {s['tok_s']:.1f} tok/s; robust spread / range %: {parts}")
    return by_variant


def num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def fmt(pair: tuple[float | None, float | None]) -> str:
    return "/".join("n/a" if v is None else f"{v:.2f}" for v in pair)


if __name__ == "__main__":
    sys.exit(main())
