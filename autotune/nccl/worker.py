"""One rank of an NCCL probe candidate: ``python -m autotune.nccl.worker SPEC_JSON``.

The parent (:mod:`autotune.nccl.runner`) starts ``tp`` of these per candidate, with the
candidate's environment already in place: NCCL reads its environment once per process, so every
candidate needs fresh processes. A worker imports torch and creates its CUDA context first, writes
``ready`` to its status file, then blocks on stdin until the parent sends ``{"port": N}``. That
way the next candidate's workers pay their start-up cost while the current one measures, and only
one candidate measures at a time. It then joins a fresh process group, times all-reduce at each
message size and, on rank 0, writes the result to the status file.

Only torch and the standard library are imported: this runs on GPU boxes without Ray or MLflow.
The environment variable ``AUTOTUNE_NCCL_PROBE_FAULT`` (``exit``, ``exit:<rank>``, ``hang``) makes
a worker fail on purpose, for the tests of the parent's failure handling.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

FAULT_ENV = "AUTOTUNE_NCCL_PROBE_FAULT"
_MULTICAST_VARS = ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
EXIT_FAULT = 3


def _write(path: Path, record: dict[str, Any]) -> None:
    """Atomically replace the status file (the parent polls it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _watch_parent(parent: int) -> None:
    """Exit when the probe that started this worker is gone (it was SIGKILLed, say)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def _fault(rank: int) -> None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return
    kind, _, who = spec.partition(":")
    if who and int(who) != rank:
        return
    if kind == "exit":
        sys.stderr.write(f"{FAULT_ENV}={spec}: rank {rank} exits on purpose\n")
        sys.stderr.flush()
        os._exit(EXIT_FAULT)
    if kind == "hang":
        time.sleep(3600)


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list."""
    pos = (len(sorted_values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def _stats(samples_us: list[float]) -> dict[str, Any]:
    ordered = sorted(samples_us)
    return {"median_us": _quantile(ordered, 0.5), "p10_us": _quantile(ordered, 0.1),
            "p90_us": _quantile(ordered, 0.9), "iters": len(ordered)}


def _time_cuda(torch: Any, dist: Any, tensor: Any, iters: int, warmup: int,
               batch: int = 1) -> list[float]:
    """Per-call latency from CUDA events: ``iters`` samples of ``batch`` back-to-back all-reduces.

    With ``batch`` 1 each eager call is timed alone, and the sample also holds the wait for the
    slower rank's launch. With a larger batch the ranks first meet (a tiny all-reduce, then a
    synchronize, outside the timed region), and the launches queue ahead of the GPU as in a
    CUDA-graph replay, so the sample is the collective's own time. Events are read after the loop: a
    synchronize inside the timed region would change what is timed (REFERENCE.md section 4).
    """
    for _ in range(warmup):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    meet = torch.ones(1, dtype=tensor.dtype, device=tensor.device)
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(iters)]
    for start, stop in pairs:
        if batch > 1:
            dist.all_reduce(meet)
            torch.cuda.synchronize()
        start.record()
        for _ in range(batch):
            dist.all_reduce(tensor)
        stop.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(stop) * 1e3 / batch for start, stop in pairs]


def _time_cpu(dist: Any, tensor: Any, iters: int, warmup: int, batch: int = 1) -> list[float]:
    """Per-call latency of blocking gloo all-reduces, by the wall clock, ``batch`` calls a sample."""
    for _ in range(warmup):
        dist.all_reduce(tensor)
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(batch):
            dist.all_reduce(tensor)
        out.append((time.perf_counter() - t0) * 1e6 / batch)
    return out


def run(spec: dict[str, Any]) -> None:
    """Prepare, wait for the go, measure, report (rank 0)."""
    rank, world = int(spec["rank"]), int(spec["world"])
    status = Path(spec["status_file"])
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    import torch
    import torch.distributed as dist

    backend = spec["backend"]
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
        torch.empty(1, device=device)  # the CUDA context, before the go
    _write(status, {"state": "ready", "pid": os.getpid()})
    line = sys.stdin.readline()
    if not line.strip():
        return  # the parent closed our stdin without a go: nothing to do
    go = json.loads(line)
    _fault(rank)
    t0 = time.perf_counter()
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{go['port']}", rank=rank,
                            world_size=world, timeout=_timedelta(spec["init_timeout_s"]))
    dtype = torch.bfloat16
    try:
        probe = torch.ones(8, dtype=dtype, device=device)
        dist.all_reduce(probe)  # also makes NCCL build its communicator, outside the timings
    except RuntimeError:
        if backend == "nccl":
            raise
        dtype = torch.float32  # a gloo build without bf16 reductions
    init_s = time.perf_counter() - t0
    batch = int(spec.get("batch", 1))
    sizes = []
    for tokens in spec["tokens"]:
        tensor = torch.ones((int(tokens), int(spec["hidden"])), dtype=dtype, device=device)
        if backend == "nccl":
            samples = _time_cuda(torch, dist, tensor, spec["iters"], spec["warmup"], batch)
        else:
            samples = _time_cpu(dist, tensor, spec["iters"], spec["warmup"], batch)
        sizes.append({"tokens": int(tokens), "bytes": tensor.numel() * tensor.element_size(),
                      **_stats(samples)})
        del tensor
    # Rank 0's figures rank the candidates; every rank's medians are kept beside them
    # (rank_medians_us), since each rank's time also holds its wait for the others.
    medians = [s["median_us"] for s in sizes]
    gathered: list[Any] = [None] * world
    # Over gloo: the candidate's NCCL env governs only what is measured. (NCCL_ALGO=Tree, say,
    # has no AllGather algorithm; a server with it fails at its first all-gather, the probe not.)
    side = dist.new_group(backend="gloo") if backend == "nccl" else None
    dist.all_gather_object(gathered, medians, group=side)
    for i, size in enumerate(sizes):
        size["rank_medians_us"] = [g[i] for g in gathered]
    dist.destroy_process_group()
    if rank == 0:
        # What NCCL actually saw, so a report shows the environment each candidate ran with.
        seen = {k: v for k, v in os.environ.items()
                if k.startswith("NCCL_") or k in _MULTICAST_VARS}
        facts = {"dtype": str(dtype).replace("torch.", ""), "init_s": init_s,
                 "torch_version": torch.__version__, "env_seen": dict(sorted(seen.items()))}
        if backend == "nccl":
            version = torch.cuda.nccl.version()
            facts["nccl_version"] = (".".join(str(v) for v in version)
                                     if isinstance(version, tuple) else str(version))
            facts["gpu_name"] = torch.cuda.get_device_name(rank)
            facts["gpu_count"] = torch.cuda.device_count()
        _write(status, {"state": "done", "sizes": sizes, **facts})


def _timedelta(seconds: float) -> Any:
    import datetime

    return datetime.timedelta(seconds=float(seconds))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(args[0])
    run(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
