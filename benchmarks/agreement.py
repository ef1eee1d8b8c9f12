"""``python -m benchmarks.agreement --space FILE --params JSON [--concurrency C ...] [--rounds R]
[--waves W] [--min-prompts N] [--output-len L] [--sglang-python PY] [--tokenizer DIR] [--pin] [--json PATH]``.

Does autotune's client (:func:`autotune.bench.client.run_benchmark`) read the same output tok/s as
SGLang's own loader, ``python -m sglang.bench_serving``, on identical requests? One server (the
space's config, launched as its trials launch it), one local ShareGPT-format file written from the
space's prompts, loaded by SGLang's ShareGPT loader; autotune's client sends exactly the rows that
loader made (text, output length, ``ignore_eos``) through ``/generate``, ``bench_serving`` sends them
itself (``--backend sglang``). At each concurrency the two run in turn, ``--rounds`` times, the
order swapped every round, the server's prefix cache flushed before every run (``bench_serving
--flush-cache`` after its one warm-up request; autotune's client after one warm-up request too).

At concurrency C the run is ``max(--min-prompts, --waves * C)`` requests: the first ones of the one
shuffle SGLang's loader makes of the file (``--seed``), so both tools send the same requests in the
same order. Printed per concurrency: each tool's median tok/s and range (max - min over the
median), the ratio of the medians (autotune / bench_serving) and the ratios of the rounds; PASS
within ``--within`` percent. ``bench_serving`` runs in one long-lived process (its command-line entry
called once per run), so SGLang's import is paid once. ``python -m benchmarks.agreement_report`` prints
the tables again from ``--json``, and pools the rounds of several runs.

Beside the tok/s, each run keeps what tells a client's lag from the server's speed (issue 34): each
tool's Little's-law mean in flight over its window (``bench_serving``'s own ``concurrency`` figure),
autotune's dispatch gaps (:mod:`autotune.bench.occupancy`), the lag of a probe sleeping in autotune's
event loop beside the client, and each client process's CPU seconds. ``--pin`` puts the server on the
first allowed CPU and both clients on the others.
Runs here on the emulator (SGLang's loader and bench_serving from ``.venv-sglang-data``) and on a GPU
host with the kit (``scripts/gpu/plan_batch.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from autotune.bench.client import run_benchmark
from autotune.bench.occupancy import Occupancy
from autotune.bench.records import BenchResult, percentile
from autotune.errors import AutotuneError
from autotune.server.group import process_cpu_s
from autotune.server.process import ServerProcess
from autotune.space.prompts import Prompt
from autotune.space.workload import Workload
from benchmarks._common import machine_line, write_json
from benchmarks.agreement_report import level, print_report, to_ms
from benchmarks.profile_overhead import _from_space

REPO = Path(__file__).resolve().parents[1]
SIDE = REPO / "benchmarks" / "_sglang_side.py"
DEFAULT_SGLANG_PYTHON = REPO / ".venv-sglang-data" / "bin" / "python"


def sharegpt_file(workload: Workload, path: Path, output_len: int) -> None:
    """The space's measured prompts as one ShareGPT-format file (the human turn is the prompt)."""
    rows = []
    for p in workload.measured():
        text = p.text if p.text is not None else "\n".join(c for _, c in p.messages or ())
        rows.append({"id": p.id, "conversations": [{"from": "human", "value": text},
                                                   {"from": "gpt", "value": "w5 " * output_len}]})
    path.write_text(json.dumps(rows))


def flush(url: str) -> None:
    resp = httpx.post(url + "/flush_cache", timeout=60)
    if resp.status_code != 200:
        raise AutotuneError(f"/flush_cache answered HTTP {resp.status_code}")


#: Period of the event-loop probe that runs beside autotune's client: long enough to cost the loop
#: nothing measurable (100 wake-ups a second beside ~2,000 chunks), short enough for a p99.
PROBE_S = 0.01


async def _probed(url: str, prompts: list[Prompt], concurrency: int) -> tuple[BenchResult, list[float]]:
    """One run of autotune's client with a probe beside it in its event loop: how late each
    ``PROBE_S`` sleep woke, i.e. how long a ready socket could wait for the loop."""
    lags: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            t = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            lags.append(time.perf_counter() - t - PROBE_S)

    task = asyncio.create_task(probe())
    try:
        res = await run_benchmark(url, prompts, concurrency=concurrency, request_timeout_s=600)
    finally:
        done.set()
        await task
    return res, lags


def autotune_run(url: str, prompts: list[Prompt], concurrency: int) -> dict[str, Any]:
    asyncio.run(run_benchmark(url, prompts[:1], concurrency=1))  # bench_serving's one warm-up request
    flush(url)
    time.sleep(1.0)  # as bench_serving does after its flush
    cpu0 = time.process_time()
    res, lags = asyncio.run(_probed(url, prompts, concurrency))
    cpu = time.process_time() - cpu0
    if res.failed or res.output_tok_s is None:
        raise AutotuneError(f"autotune's client: {res.failed} request(s) failed: {res.errors}")
    occ = Occupancy.of(res.records, concurrency)
    chunks = sum(len(r.chunk_times) for r in res.records)
    return {"tok_s": res.output_tok_s, "tokens": res.total_completion_tokens, "duration_s": res.duration_s,
            "mean_in_flight": occ.mean_in_flight, "gap_p50_s": occ.gap_p50_s, "gap_p90_s": occ.gap_p90_s,
            "gap_max_s": occ.gap_max_s, "idle_slot_share": occ.idle_slot_share,
            "ttft_ms_p50": res.ttft_ms.get(50), "e2e_ms_p50": res.e2e_ms.get(50),
            "cpu_s": cpu, "chunks": chunks, "cpu_us_per_chunk": 1e6 * cpu / chunks if chunks else None,
            "loop_lag_ms_p50": to_ms(percentile(lags, 50)), "loop_lag_ms_p99": to_ms(percentile(lags, 99))}


class BenchServing:
    """``sglang.bench_serving`` in one long-lived process of ``py`` (its import paid once): each
    :meth:`run` is one command-line run of it, as ``python -m sglang.bench_serving ARGS`` would be."""

    def __init__(self, py: str, log: Path, *, offline: bool = False) -> None:
        self._log = log.open("w")
        # A local tokenizer folder: without HF_HUB_OFFLINE its loader still asks huggingface.co
        # about the name and retries (about 30 s a run on a box that cannot reach it).
        env = {**os.environ, "HF_HUB_OFFLINE": "1"} if offline else None
        self._proc = subprocess.Popen([py, str(SIDE), "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._log, text=True, bufsize=1, env=env)

    def run(self, argv: list[str]) -> tuple[int, str]:
        """Exit code and printed output of one run."""
        if self._proc.stdin is None or self._proc.stdout is None:
            raise AutotuneError("bench_serving's process has no pipes")
        self._proc.stdin.write(json.dumps(argv) + "\n")
        self._proc.stdin.flush()
        lines: list[str] = []
        for line in self._proc.stdout:
            if line.startswith("@@DONE "):
                return int(line.split()[1]), "".join(lines)
            lines.append(line)
        raise AutotuneError(f"bench_serving's process ended (exit {self._proc.wait()}); see {self._log.name}")

    def cpu_s(self) -> float | None:
        """CPU seconds its process has used so far (user + system); None where ``/proc`` is not."""
        return process_cpu_s(self._proc.pid)

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()


def sglang_run(bench: BenchServing, url: str, data: Path, n: int, output_len: int, tokenizer: str,
               concurrency: int, seed: int, out: Path) -> dict[str, Any]:
    out.unlink(missing_ok=True)
    cpu0 = bench.cpu_s()
    code, printed = bench.run([
        "--backend", "sglang", "--base-url", url, "--dataset-name", "sharegpt", "--dataset-path", str(data),
        "--num-prompts", str(n), "--sharegpt-output-len", str(output_len), "--max-concurrency", str(concurrency),
        "--tokenizer", tokenizer, "--seed", str(seed), "--flush-cache", "--disable-tqdm", "--output-file", str(out)])
    if code != 0 or not out.exists():
        raise AutotuneError(f"bench_serving exited {code}: {printed[-2000:]}")
    last = json.loads(out.read_text().strip().splitlines()[-1])
    if last.get("completed") != n:
        raise AutotuneError(f"bench_serving completed {last.get('completed')} of {n}")
    cpu1 = bench.cpu_s()
    # Its process's CPU over the whole command: prompt loading, warm-up and flush included, so an upper
    # bound on what streaming cost it. ``concurrency`` is its Little's-law mean in flight (the requests'
    # e2e latencies, send to the last chunk read, over its duration).
    return {"tok_s": last["output_throughput"], "tokens": last.get("total_output_tokens"),
            "duration_s": last.get("duration"), "mean_in_flight": last.get("concurrency"),
            "ttft_ms_p50": last.get("median_ttft_ms"), "e2e_ms_p50": last.get("median_e2e_latency_ms"),
            "cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0}


def pin_clients() -> set[int] | None:
    """Pin this process (autotune's client, and bench_serving's process, started after) to all allowed
    CPUs but the first; return the first, for the server. None with fewer than two CPUs."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    os.sched_setaffinity(0, set(cpus[1:]))
    return {cpus[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agreement",
                                     description=__doc__.split("\n\n")[1].strip())
    parser.add_argument("--space", required=True, help="the space whose config and prompts to use")
    parser.add_argument("--params", required=True, help="the config, as JSON in the space's names")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tool per concurrency")
    parser.add_argument("--waves", type=int, default=2, help="requests per run: WAVES x concurrency...")
    parser.add_argument("--min-prompts", type=int, default=8, help="...and at least this many")
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--within", type=float, default=2.0, help="PASS when the medians agree within this %%")
    parser.add_argument("--sglang-python", default=str(DEFAULT_SGLANG_PYTHON) if DEFAULT_SGLANG_PYTHON.exists()
                        else sys.executable, help="an interpreter with SGLang (bench_serving)")
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the model's, else a word-level one)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pin", action="store_true",
                        help="server on the first allowed CPU, both clients on the others (taskset-like)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if min(args.rounds, args.waves, args.min_prompts, *args.concurrency) < 1 or args.output_len < 4:
        parser.error("--rounds, --waves, --min-prompts, --concurrency must be >= 1 and --output-len >= 4")
    count = {c: max(args.min_prompts, args.waves * c) for c in args.concurrency}
    args.num_prompts = max(count.values())

    try:
        space, params, spec = _from_space(args.space, args.params, None)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="agreement-"))
    workload = Workload.from_spec({**space.workload, "num_prompts": args.num_prompts, "warmup_prompts": 0,
                                   "output_len": args.output_len})
    data = work / "prompts.sharegpt.json"
    sharegpt_file(workload, data, args.output_len)
    tokenizer = args.tokenizer or spec.model_path
    if not (Path(tokenizer) / "tokenizer.json").exists():
        tokenizer = str(work / "tokenizer")
        subprocess.run([args.sglang_python, str(SIDE), "tokenizer", tokenizer], check=True)
    rows_path = work / "rows.json"
    subprocess.run([args.sglang_python, str(SIDE), "rows", str(data), str(args.num_prompts),
                    str(args.output_len), tokenizer, str(args.seed), str(rows_path)], check=True)
    loaded = json.loads(rows_path.read_text())
    if len(loaded) != args.num_prompts:
        print(f"error: SGLang's loader kept {len(loaded)} of {args.num_prompts} prompts", file=sys.stderr)
        return 2
    every = [Prompt(id=f"sharegpt:{i}", max_tokens=r["output_len"], ignore_eos=True, text=r["prompt"])
               for i, r in enumerate(loaded)]
    print(f"Agreement: {', '.join(f'c{c}: {n}' for c, n in count.items())} requests x {args.output_len} tokens "
          f"from SGLang's ShareGPT loader "
          f"({data.name}), config {json.dumps(params)}, {args.rounds} rounds per concurrency, order swapped "
          f"each round, cache flushed before each run ({machine_line()})")
    env = {k: v for k, v in os.environ.items() if k not in set(getattr(space, "unset_env", ()) or ())}
    env.update(spec.env)
    out: dict[str, Any] = {"machine": machine_line(), "params": params, "requests": count,
                           "output_len": args.output_len, "rounds": args.rounds, "levels": []}
    t0 = time.monotonic()
    server_cpus = pin_clients() if args.pin else None
    out["pinned"] = None if server_cpus is None else {"server": sorted(server_cpus),
                                                      "clients": sorted(os.sched_getaffinity(0))}
    bench = BenchServing(args.sglang_python, work / "bench_serving.log", offline=Path(tokenizer).is_dir())
    try:
        with ServerProcess(lambda port: spec.argv(port=port), env=env, inherit_env=False,
                           startup_timeout_s=900, log_path=work / "server.log") as server:
            if server_cpus and server.pid is not None:
                os.sched_setaffinity(server.pid, server_cpus)
            for c in args.concurrency:
                runs: dict[str, list[dict[str, Any]]] = {"autotune": [], "bench_serving": []}
                prompts, n = every[:count[c]], count[c]
                for r in range(args.rounds):
                    order = ("autotune", "bench_serving") if r % 2 == 0 else ("bench_serving", "autotune")
                    for tool in order:
                        server.ensure_alive()
                        runs[tool].append(
                            autotune_run(server.url, prompts, c) if tool == "autotune" else
                            sglang_run(bench, server.url, data, n, args.output_len,
                                       tokenizer, c, args.seed, work / f"bs-c{c}-r{r}.jsonl"))
                out["levels"].append(level(concurrency=c, requests=n, autotune=runs["autotune"],
                                           bench_serving=runs["bench_serving"], within=args.within))
    except (AutotuneError, OSError, subprocess.SubprocessError, httpx.HTTPError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        bench.close()
    print_report(out["levels"], within=args.within)
    out["elapsed_s"] = time.monotonic() - t0
    print(f"\n{sum(lv['ok'] for lv in out['levels'])}/{len(out['levels'])} concurrencies agree within "
          f"{args.within:g}%; {out['elapsed_s']:.0f} s")
    write_json(args.json, out)
    return 0 if all(lv["ok"] for lv in out["levels"]) else 1


if __name__ == "__main__":
    sys.exit(main())
