"""``python -m benchmarks.load_200 [--quick] [--trials N] [--concurrency C] [--json PATH]
[--workdir DIR]``.

The tuner at scale: a 200-trial search, 8 trials at a time, on the sim backend, on a local
three-node Ray cluster (``ray.cluster_utils.Cluster``: a head without GPUs, an 8-GPU and a 4-GPU
node, each a real raylet declaring logical GPUs). Every server is a real emulator process; the
profile's forwards cost nothing (``benchmarks/profiles/zero-compute.yaml``) and the workload is
one prompt of a few tokens, so what is measured is the tuner: Ray Tune, the Optuna searcher, the
trial processes, server start and stop, and the MLflow bookkeeping, not the model.

This process is the search's driver (``autotune.search.run.run_search`` with the cluster's address).
It prints the driver's resident memory (RSS) over time with the number of trials done, and the
tuner overhead per trial at that scale as the search reports it (``SearchOutcome.overheads_s``:
from a trial's slot being free to the end of its bookkeeping, minus what the trial measured):
median, p90, max, and the median of the first and last quarter of the trials (does the overhead
grow with the number of trials?). It also counts trials lost (planned minus finished) and, from
the emulator's per-node GPU usage records, GPUs held by two servers at once (must be 0).

``--quick`` runs 16 trials (for the test suite).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import ZERO_COMPUTE, fmt, machine_line, table, write_json

NAME = "load-200"
# (name, GPUs, CPUs): the head hosts no trial; the GPU nodes declare autotune_node like real ones.
NODES = (("head", 0, 1), ("gpu8", 8, 8), ("gpu4", 4, 4))
WORKLOAD = {"source": "builtin", "num_prompts": 1, "warmup_prompts": 0, "output_len": 4,
            "concurrency": 1, "seed": 0}


def space_dict(trials: int, concurrency: int) -> dict[str, Any]:
    """The searched space: EAGLE-3 tree shape, TP 1/2, NCCL algorithm (four baseline groups)."""
    return {
        "name": NAME,
        "description": "tuner load test: zero-compute emulator, one tiny prompt per trial",
        "backend": "sim",
        "profile": ZERO_COMPUTE,
        "model_path": "sim/zero-compute",
        "draft_model_path": "sim/zero-compute-draft",
        "fixed_args": {"speculative_algorithm": "EAGLE3"},
        "parameters": {
            "tp_size": {"type": "categorical", "choices": [1, 2]},
            "speculative_num_steps": {"type": "int", "low": 1, "high": 4},
            "speculative_eagle_topk": {"type": "categorical", "choices": [1, 2]},
            "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 8,
                                             "when": "speculative_eagle_topk > 1"},
            "NCCL_ALGO": {"type": "categorical", "choices": [None, "Ring"]},
        },
        "workload": WORKLOAD,
        "measure": {"repeats": 1, "startup_timeout_s": 120},
        "budget": {"trials": trials},
        "resources": {"cpus_per_trial": 1},
        "search": {"sampler": "tpe", "seed": 0, "finalists": 1, "finalist_repeats": 1,
                   "max_concurrent": concurrency},
    }


def rss_mb() -> float:
    """Resident memory of this process (the driver), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def trials_done(ray_root: Path) -> int:
    """Trials that reported a result so far (Ray Tune's result files)."""
    return sum(1 for p in ray_root.glob("run-*/trainable_*/result.json") if p.stat().st_size > 0)


class Sampler(threading.Thread):
    """Samples the driver's RSS and the trials done every ``every_s`` seconds."""

    def __init__(self, ray_root: Path, every_s: float) -> None:
        super().__init__(daemon=True)
        self.ray_root = ray_root
        self.every_s = every_s
        self.samples: list[tuple[float, int, float]] = []
        self._halt = threading.Event()
        self._t0 = time.monotonic()

    def sample(self) -> tuple[float, int, float]:
        point = (time.monotonic() - self._t0, trials_done(self.ray_root), rss_mb())
        self.samples.append(point)
        return point

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            t, done, mb = self.sample()
            print(f"  t={t:6.0f} s  trials done {done:4d}  driver RSS {mb:7.1f} MiB", flush=True)

    def stop(self) -> tuple[float, int, float]:
        """Stop sampling; returns one last sample (not added to ``samples``)."""
        self._halt.set()
        self.join()
        return (time.monotonic() - self._t0, trials_done(self.ray_root), rss_mb())


def start_cluster(lock_root: Path) -> Any:
    """The three nodes; each GPU node gets its own emulator GPU-lock directory (logical GPU ids
    are per node, so the locks must be too)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from ray.cluster_utils import Cluster

    def args(name: str, gpus: int, cpus: int) -> dict[str, Any]:
        out: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus, "include_dashboard": False,
                               "object_store_memory": 80 * 1024 * 1024}
        if gpus:
            out["resources"] = {"autotune_node": 1}
            out["env_vars"] = {"AUTOTUNE_SIM_GPU_LOCK_DIR": str(lock_root / name)}
        return out

    (head, *rest) = NODES
    cluster = Cluster(initialize_head=True, head_node_args=args(*head))
    for node in rest:
        cluster.add_node(**args(*node))
    cluster.wait_for_nodes()
    return cluster


def gpu_overlaps(lock_root: Path) -> int:
    """Pairs of servers that held one GPU of one node at the same time, from usage.jsonl."""
    by_gpu: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for usage in lock_root.glob("*/usage.jsonl"):
        for line in usage.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                for gpu in (rec.get("cuda_visible_devices") or "").split(","):
                    by_gpu[(usage.parent.name, gpu)].append((rec["start"], rec["end"]))
    bad = 0
    for spans in by_gpu.values():
        spans.sort()
        bad += sum(1 for (_, end), (start, _) in itertools.pairwise(spans) if start < end)
    return bad


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(trials: int, concurrency: int, workdir: Path, sample_s: float) -> dict[str, Any]:
    """Start the cluster, run the search as its driver, and return the figures."""
    import ray

    from autotune.search.options import SearchOptions
    from autotune.search.run import run_search

    space_path = workdir / f"{NAME}.yaml"
    space_path.write_text(yaml.safe_dump(space_dict(trials, concurrency), sort_keys=False))
    lock_root = workdir / "gpu-locks"
    t_cluster = time.monotonic()
    cluster = start_cluster(lock_root)
    cluster_s = time.monotonic() - t_cluster
    sampler = Sampler(workdir / "mlruns" / "ray" / NAME, sample_s)
    rss_before = rss_mb()
    log = workdir / "search.log"
    try:
        sampler.start()
        t0 = time.monotonic()
        with open(log, "w") as out:
            outcome = run_search(SearchOptions(space=str(space_path), address=cluster.address,
                                               concurrency=concurrency, root=str(workdir)), out=out)
        wall = time.monotonic() - t0
        # The search's end (finalists, the parent run's plots) is over: sample the driver now.
        final = sampler.stop()
    finally:
        if sampler.is_alive():
            sampler.stop()
        ray.shutdown()
        cluster.shutdown()
    overheads = list(outcome.overheads_s)
    quarter = max(1, len(overheads) // 4)
    samples = sampler.samples
    peak = max([mb for _, _, mb in samples] + [final[2]])
    last = final[2]
    # Growth while trials finish: from the first sample with a finished trial (Ray, MLflow and the
    # searcher are loaded by then) to the last sample taken while the search ran.
    during = [s for s in samples if s[1] >= 1]
    growth = None
    if len(during) >= 2 and during[-1][1] > during[0][1]:
        growth = (during[-1][2] - during[0][2]) / (during[-1][1] - during[0][1]) * 100
    return {
        "machine": machine_line(),
        # Relative to the repository: the figures are committed (docs/measurements/), and the
        # checkout's place says nothing about the run.
        "profile": str(Path(ZERO_COMPUTE).relative_to(Path(__file__).resolve().parent.parent)),
        "workload": WORKLOAD,
        "nodes": [{"name": n, "gpus": g, "cpus": c} for n, g, c in NODES],
        "trials_planned": trials,
        "trials_finished": outcome.trials,
        "trials_lost": trials - outcome.trials,
        "trials_failed": outcome.failed,
        "interrupted": outcome.interrupted,
        "concurrency": concurrency,
        "cluster_start_s": round(cluster_s, 1),
        "wall_s": round(wall, 1),
        "trials_per_min": round(outcome.trials / wall * 60, 2) if wall else None,
        "rss_mb_before": round(rss_before, 1),
        "rss_mb_peak": round(peak, 1),
        "rss_mb_end": round(last, 1),
        "rss_mb_at_first_trial": round(during[0][2], 1) if during else None,
        "rss_mb_growth_per_100_trials": round(growth, 1) if growth is not None else None,
        "rss_samples": [[round(t, 1), done, round(mb, 1)] for t, done, mb in [*samples, final]],
        "overhead_s": {
            "n": len(overheads),
            "median": quantile(overheads, 0.5),
            "p90": quantile(overheads, 0.9),
            "max": max(overheads, default=None),
            "mean": statistics.fmean(overheads) if overheads else None,
            "median_first_quarter": quantile(overheads[:quarter], 0.5),
            "median_last_quarter": quantile(overheads[-quarter:], 0.5),
        },
        "gpu_overlaps": gpu_overlaps(lock_root),
        "search_log": str(log),
        "workdir": str(workdir),
    }


def report(fig: dict[str, Any]) -> str:
    """The human-readable summary."""
    o = fig["overhead_s"]
    lines = [
        (f"Trials: {fig['trials_finished']} of {fig['trials_planned']} finished "
        f"({fig['trials_failed']} failed), lost {fig['trials_lost']}, concurrency "
        f"{fig['concurrency']}; {fig['wall_s']:.0f} s wall ({fig['trials_per_min']} trials/min); "
        f"cluster start {fig['cluster_start_s']:.0f} s"),
        f"GPUs held by two servers at once: {fig['gpu_overlaps']}",
        "",
        "Driver RSS (MiB): " + f"at start {fig['rss_mb_before']:.0f} (before Ray and MLflow load), "
        f"at the first finished trial {fmt(fig['rss_mb_at_first_trial'], '.0f')}, peak "
        f"{fig['rss_mb_peak']:.0f}, after the search's end {fig['rss_mb_end']:.0f}; growth while "
        "trials finish "
        f"{fmt(fig['rss_mb_growth_per_100_trials'], '.1f')} MiB per 100 trials",
        "",
        table(["tuner overhead per trial (s)", "value"], [
            ["median", fmt(o["median"], ".2f")], ["p90", fmt(o["p90"], ".2f")],
            ["max", fmt(o["max"], ".2f")], ["mean", fmt(o["mean"], ".2f")],
            ["median, first quarter of trials", fmt(o["median_first_quarter"], ".2f")],
            ["median, last quarter of trials", fmt(o["median_last_quarter"], ".2f")],
            ["trials counted", str(o["n"])]]),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load_200",
                                     description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("--quick", action="store_true", help="16 trials (test suite)")
    parser.add_argument("--trials", type=int, help="trials (default 200, 16 with --quick)")
    parser.add_argument("--concurrency", type=int, default=8, help="trials at once (default 8)")
    parser.add_argument("--sample-s", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--json", help="write the figures here as JSON")
    parser.add_argument("--workdir", help="keep the search's files here (default: a temp dir, "
                        "removed afterwards)")
    args = parser.parse_args(argv)
    trials = args.trials or (16 if args.quick else 200)
    if trials < 1 or args.concurrency < 1:
        parser.error("--trials and --concurrency must be >= 1")
    keep = args.workdir is not None
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="autotune-load-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"Load test: {trials} trials, concurrency {args.concurrency}, sim backend, "
          f"profile {ZERO_COMPUTE}", flush=True)
    print("  cluster: " + ", ".join(f"{n} ({g} GPUs, {c} CPUs)" for n, g, c in NODES), flush=True)
    print(f"  workload: {json.dumps(WORKLOAD)}; 1 repeat; space "
          "tp 1/2 x EAGLE-3 steps 1-4, topk 1/2, draft tokens x NCCL_ALGO null/Ring", flush=True)
    print(f"  {machine_line()}; work dir {workdir}", flush=True)
    try:
        fig = run(trials, args.concurrency, workdir, args.sample_s)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if not keep:  # a temp dir already removed: its path would name nothing
        fig.pop("search_log", None)
        fig.pop("workdir", None)
    print("\n" + report(fig), flush=True)
    write_json(args.json, fig)
    ok = fig["trials_lost"] == 0 and fig["gpu_overlaps"] == 0 and not fig["interrupted"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
