"""``python -m benchmarks.client_ceiling [--quick] [--repeats R] [--output-len L] [--concurrency C]
[--json PATH]``.

How many streamed tokens per second can the benchmark client (:func:`autotune.bench.client.run_benchmark`)
take in on one core? The server is the emulator on a profile whose forwards cost nothing
(``benchmarks/profiles/zero-compute.yaml``), run as a separate process, without speculation so that
every token is its own SSE chunk (the most work per token for the client). This process is pinned
to one CPU and the server to the others.

Per API (``generate`` and ``chat``) and output length it prints the wall-clock streamed tokens/s,
the client's CPU time per token (``time.process_time()`` of this process, everything included:
event loop, HTTP, SSE and JSON parsing, records), and the client ceiling, tokens per client CPU
second. PASS when the ceiling is at least 20,000 tokens/s. The ceiling is an extrapolation from CPU
time, so the run also says whether the client was seen streaming at least 10,000 tokens/s of wall
clock (``STREAMED_TARGET_TOK_S``; issue 34: a batch server on one H200 reaches about 5,000); raise
``--concurrency`` to reach it. SGLang's ``/generate`` stream repeats the whole output so far in
every chunk (``text`` and ``output_ids`` are cumulative unless the server runs with
``--incremental-streaming-output``), so its cost per token grows with the output length; the chat
stream sends deltas.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.bench.client import run_benchmark
from autotune.errors import AutotuneError
from autotune.launch.spec import LaunchSpec
from autotune.server.process import ServerProcess
from autotune.space.workload import Workload
from benchmarks._common import (
    ZERO_COMPUTE,
    fmt,
    half_range,
    machine_line,
    median,
    table,
    verdict,
    write_json,
)

TARGET_TOK_S = 20_000
STREAMED_TARGET_TOK_S = 10_000


@dataclass
class Run:
    """One benchmark run's totals."""

    tokens: int
    wall_s: float
    cpu_s: float

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s

    @property
    def cpu_us_per_token(self) -> float:
        return 1e6 * self.cpu_s / self.tokens

    @property
    def ceiling(self) -> float:
        return self.tokens / self.cpu_s if self.cpu_s > 0 else float("inf")


@dataclass
class Row:
    """Median figures of one (api, output length)."""

    api: str
    output_len: int
    requests: int
    tok_s: float
    tok_s_spread: float | None
    cpu_us_per_token: float
    cpu_us_spread: float | None
    ceiling: float
    ok: bool
    runs: list[dict[str, float]]


def pin_cpus() -> tuple[set[int] | None, set[int] | None]:
    """Pin this process to one allowed CPU; return (client CPUs, CPUs left for the server)."""
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return set(cpus), None
    client = {cpus[0]}
    os.sched_setaffinity(0, client)
    return client, set(cpus[1:])


def measure(url: str, workload: Workload, *, api: str, concurrency: int) -> Run:
    """One run: the measured prompts at ``concurrency``, timed in wall and client CPU time."""
    prompts = workload.measured()
    c0, t0 = time.process_time(), time.perf_counter()
    result = asyncio.run(run_benchmark(url, prompts, api=api, concurrency=concurrency,
                                       request_timeout_s=120))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if result.failed or result.completed != len(prompts) or not result.total_completion_tokens:
        raise AutotuneError(f"{api}: {result.failed} of {len(prompts)} requests failed: "
                            f"{result.errors}")
    expected = sum(p.max_tokens for p in prompts)
    if result.total_completion_tokens != expected:
        raise AutotuneError(f"{api}: the server reported {result.total_completion_tokens} tokens, "
                            f"{expected} were asked for")
    return Run(tokens=result.total_completion_tokens, wall_s=wall, cpu_s=cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client_ceiling",
                                     description=__doc__.split("\n\n")[1].strip())
    parser.add_argument("--output-len", type=int, action="append",
                        help="tokens per request (repeatable; default 256, 1024 and 2048)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--repeats", type=int, default=3, help="runs per API and length")
    parser.add_argument("--quick", action="store_true", help="one short run each (for tests)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    lengths = args.output_len or ([64] if args.quick else [256, 1024, 2048])
    repeats = 1 if args.quick else args.repeats
    if args.concurrency < 1 or repeats < 1 or min(lengths) < 1:
        parser.error("--concurrency, --repeats and --output-len must be >= 1")

    client_cpus, server_cpus = pin_cpus()
    print(f"Client ceiling: zero-compute emulator, no speculation (1 token per chunk), "
          f"concurrency {args.concurrency}; client on CPU {sorted(client_cpus or [])}, server on "
          f"{sorted(server_cpus) if server_cpus else 'any CPU'} ({machine_line()})")
    spec = LaunchSpec(model_path="sim/zero-compute", server_args={"tp_size": 1},
                      env={"AUTOTUNE_SIM_PROFILE": ZERO_COMPUTE, "AUTOTUNE_SIM_STARTUP_S": "0.1"},
                      backend="sim")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    env.update(spec.env)
    log = Path(tempfile.mkdtemp(prefix="client-ceiling-")) / "server.log"
    rows: list[Row] = []
    t0 = time.monotonic()
    try:
        with ServerProcess(lambda port: spec.argv(port=port), env=env, inherit_env=False,
                           startup_timeout_s=120, log_path=log) as server:
            if server_cpus and server.pid is not None:
                os.sched_setaffinity(server.pid, server_cpus)
            for length in lengths:
                # At least 16k tokens per run (the client's fixed costs, e.g. the ~25 ms TLS
                # context of a new httpx client, fade), two requests per connection.
                n = max(2 * args.concurrency, -(-16384 // length)) if not args.quick \
                    else 2 * args.concurrency
                workload = Workload.from_spec({"num_prompts": n, "warmup_prompts": 1,
                                               "output_len": length,
                                               "concurrency": args.concurrency})
                for api in ("generate", "chat"):
                    measure(server.url, Workload.from_spec(
                        {"num_prompts": 1, "warmup_prompts": 0, "output_len": 16,
                         "concurrency": 1}), api=api, concurrency=1)  # warm imports and paths
                    runs = [measure(server.url, workload, api=api, concurrency=args.concurrency)
                            for _ in range(repeats)]
                    tok_s = [r.tok_s for r in runs]
                    cpu = [r.cpu_us_per_token for r in runs]
                    ceiling = 1e6 / median(cpu)  # type: ignore[operator]
                    rows.append(Row(api, length, n, median(tok_s), half_range(tok_s),  # type: ignore[arg-type]
                                    median(cpu), half_range(cpu), ceiling,  # type: ignore[arg-type]
                                    ceiling >= TARGET_TOK_S,
                                    [{"tokens": r.tokens, "wall_s": r.wall_s, "cpu_s": r.cpu_s}
                                     for r in runs]))
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(["api", "output len", "requests", "streamed tok/s", "spread", "client CPU us/tok",
                 "spread", "ceiling tok/s/core", "verdict"],
                [[r.api, str(r.output_len), str(r.requests), fmt(r.tok_s, ",.0f"),
                  fmt(r.tok_s_spread, ",.0f"), fmt(r.cpu_us_per_token, ".1f"),
                  fmt(r.cpu_us_spread, ".1f"), fmt(r.ceiling, ",.0f"), verdict(r.ok)]
                 for r in rows]))
    elapsed = time.monotonic() - t0
    passed = sum(r.ok for r in rows)
    print(f"\n{passed}/{len(rows)} at >= {TARGET_TOK_S:,} tokens/s per client core "
          f"(median of {repeats}); {elapsed:.0f} s")
    fastest = max(rows, key=lambda r: r.tok_s)
    streamed_ok = fastest.tok_s >= STREAMED_TARGET_TOK_S
    print(f"Streamed at up to {fastest.tok_s:,.0f} tokens/s of wall clock ({fastest.api}, output "
          f"{fastest.output_len}, concurrency {args.concurrency}): {verdict(streamed_ok)} at >= "
          f"{STREAMED_TARGET_TOK_S:,}")
    write_json(args.json, {"machine": machine_line(), "quick": args.quick,
                           "streamed_tok_s_max": fastest.tok_s, "streamed_target_tok_s": STREAMED_TARGET_TOK_S,
                           "streamed_ok": streamed_ok,
                           "concurrency": args.concurrency, "target_tok_s": TARGET_TOK_S,
                           "rows": [asdict(r) for r in rows], "elapsed_s": elapsed})
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
