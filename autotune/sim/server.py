"""``python -m autotune.sim.server``: an SGLang server emulator, started like ``sglang.launch_server``.

It takes the same command line as ``python -m sglang.launch_server`` (parsed by SGLang's own parser
through ``autotune.sglang.args``; a bad flag prints argparse's ``error: ...`` and exits 2), answers
the same HTTP endpoints (see ``autotune.sim.app``) and times generation with the calibrated
performance model of ``autotune.sim.model``. Start-up logs lines like SGLang's, and ``/health``
answers 503 until the modelled start-up time has passed.

Environment:

- ``AUTOTUNE_SIM_PROFILE``: built-in profile name or YAML path (default ``kimi-k2.5-eagle3-tp8``).
  A bad profile: message on stderr, exit 1. ``AUTOTUNE_SIM_STARTUP_S``: start-up s, instead of the profile's.
- ``AUTOTUNE_SIM_SEED``: noise seed (else ``--random-seed``, else random); reported in
  ``/server_info`` under ``autotune_sim.seed``. ``AUTOTUNE_SIM_NOISE_CV`` overrides the profile's noise.
- ``AUTOTUNE_SIM_FAULT``: faults to inject; see ``autotune.sim.faults``.
- ``CUDA_VISIBLE_DEVICES``: the GPUs this server may use; too few for ``--tp-size`` is fatal, as are
  the model's out-of-memory and unsupported-backend verdicts (exit 1, with SGLang-like log lines).
- ``AUTOTUNE_SIM_GPU_LOCK_DIR``: when set, the server takes an exclusive ``flock`` on
  ``<dir>/gpu<id>.lock`` for each visible GPU (``0..tp_size-1`` when ``CUDA_VISIBLE_DEVICES`` is
  unset) for its whole life, writing its pid into the file; a GPU already locked is fatal ("GPU <id>
  already in use by pid <pid>", exit 1). It also appends ``{pid, cuda_visible_devices, tp_size, port,
  start, end}`` to ``<dir>/usage.jsonl`` when it exits (on SIGTERM/SIGINT, a crash or a fatal
  start-up error; not on SIGKILL, which no process can see).
- ``AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT``: per-position rates by prompt text (``autotune.sim.config``).
- ``AUTOTUNE_SIM_STOP_DIAG_S``: seconds it pauses on SIGTERM/SIGINT before it exits (default 0), as
  SGLang 0.5.17 pauses 5 s for crash diagnostics when stopped, unless both of its switches are off
  (:func:`autotune.sglang.trial_start.crash_diagnostics_on`).
- ``--skip-server-warmup``: no warm-up request of its own before it reports ready, as in SGLang.
- ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``: adds ``sglang:forward_execution_seconds_total`` to
  ``/metrics`` (which exists only with ``--enable-metrics``).
"""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import json
import logging
import os
import random
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import uvicorn

from autotune.errors import AutotuneError, LaunchArgsError
from autotune.sglang.args import parse_server_args
from autotune.sglang.trial_start import crash_diagnostics_on
from autotune.sim.api_common import GenRequest, SimState, drive
from autotune.sim.app import create_app
from autotune.sim.config import ModelConfig
from autotune.sim.emulator import PROFILE_ENV, SEED_ENV
from autotune.sim.engine import SimEngine
from autotune.sim.faults import FAULT_ENV, FaultPlan, crash, parse_faults
from autotune.sim.graph_capture import prefill_capture_share, prefill_graph_sizes, prefill_graphs_on
from autotune.sim.model import PerformanceModel
from autotune.sim.profile import load_profile

#: Seconds of SGLang's crash-diagnostics pause when stopped (see the module docstring).
STOP_DIAG_ENV = "AUTOTUNE_SIM_STOP_DIAG_S"

DEFAULT_PROFILE = "kimi-k2.5-eagle3-tp8"
PROG = "python -m autotune.sim.server"

logger = logging.getLogger("autotune.sim")


class _RankFilter(logging.Filter):
    """Gives every record a ``rank`` (" TP0" for scheduler lines, "" otherwise), as SGLang prints."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "rank"):
            record.rank = ""
        return True


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s%(rank)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    handler.addFilter(_RankFilter())
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def visible_gpu_ids(env: Mapping[str, str]) -> list[str] | None:
    """GPU ids from ``CUDA_VISIBLE_DEVICES``: None if unset; the list stops at the first invalid entry,
    as CUDA's does (so ``""`` and ``"-1"`` mean no GPU)."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    ids: list[str] = []
    for part in raw.split(","):
        part = part.strip()
        if not part or part.startswith("-"):
            break
        ids.append(part)
    return ids


class GpuClaim:
    """Exclusive per-GPU lock files plus one usage line, proving no GPU is used twice at once.

    Args:
        lock_dir: Where ``gpu<id>.lock`` and ``usage.jsonl`` live (created if missing).
        gpu_ids: The GPUs to lock.
        record: Extra fields of the usage line (``cuda_visible_devices``, ``tp_size``, ``port``).
    """

    def __init__(self, lock_dir: Path, gpu_ids: list[str], record: dict[str, Any]) -> None:
        self.lock_dir = lock_dir
        self.gpu_ids = gpu_ids
        self.record = record
        self._fds: list[int] = []
        self._start: float | None = None
        self._done = False

    def acquire(self) -> str | None:
        """Lock every GPU. Returns None, or the "already in use" message (and holds nothing)."""
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        for gpu in self.gpu_ids:
            path = self.lock_dir / f"gpu{gpu}.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                self.release()
                return f"GPU {gpu} already in use by pid {holder}"
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self._fds.append(fd)
        self._start = time.time()
        return None

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def finish(self) -> None:
        """Append the usage line (once). Safe to call from a signal handler or before ``os._exit``."""
        if self._done or self._start is None:
            return
        self._done = True
        line = {"pid": os.getpid(), **self.record, "start": self._start, "end": time.time()}
        with open(self.lock_dir / "usage.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def _fail(message: str, code: int) -> int:
    print(message, file=sys.stderr, flush=True)
    return code


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {raw!r}")
    return value


def _version() -> str:
    try:
        from importlib.metadata import version

        base = version("sglang")
    except Exception:  # noqa: BLE001 - not installed: report the version we emulate
        base = "0.5.23"
    return f"{base}-autotune-sim"


_EXC_HEAD = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)\b:")


def _fatal_exc_line(message: str) -> str:
    """The model's start-up verdict as the last line of a Python traceback."""
    return message if _EXC_HEAD.match(message) else f"RuntimeError: {message}"


def _is_oom(message: str) -> bool:
    return "out of memory" in message.lower() or "not enough memory" in message.lower()


async def _startup(state: Any, *, startup_s: float, fatal: str | None,
                   prefill_capture_s: float = 0.0) -> None:
    """SGLang's start-up, compressed to ``startup_s`` seconds plus ``prefill_capture_s`` for the
    prefill CUDA graphs; sets ``state.ready`` at the end."""
    faults: FaultPlan = state.faults
    die = state.die
    args = state.args
    profile = state.model.profile
    tp = int(args.get("tp_size") or 1)
    tp0 = {"rank": " TP0"}
    gpu_mem = float(getattr(profile, "gpu_memory_gib", 80.0))
    weights = (float(getattr(profile, "weights_gib", 0.0))
               + (float(getattr(profile, "draft_weights_gib", 0.0)) if state.spec_enabled else 0.0)) / tp
    logger.info("Uvicorn running on http://%s:%s (Press CTRL+C to quit)", args.get("host"), args.get("port"))
    logger.info("Init torch distributed begin.", extra=tp0)
    if fatal is not None and not _is_oom(fatal):
        await asyncio.sleep(0.05 * startup_s)
        die(_fatal_exc_line(fatal), where="__init__")
    await asyncio.sleep(0.1 * startup_s)
    logger.info("Init torch distributed ends. mem usage=0.00 GB", extra=tp0)
    logger.info("Load weight begin. avail mem=%.2f GB", gpu_mem, extra=tp0)
    if faults.crash_at_start:
        await asyncio.sleep(0.1 * startup_s)
        die("RuntimeError: autotune sim fault crash_at_start", where="load_model")
    await asyncio.sleep(0.45 * startup_s)
    logger.info("Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB.",
                getattr(profile, "name", "model"), max(gpu_mem - weights, 0.0), weights, extra=tp0)
    if faults.oom:
        die(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            f"capacity of {gpu_mem:.2f} GiB of which 1.12 GiB is free. (autotune sim fault oom)",
            where="init_memory_pool")
    if fatal is not None:
        die(_fatal_exc_line(fatal), where="init_memory_pool")
    logger.info("KV Cache is allocated. mem_fraction_static=%s", args.get("mem_fraction_static"), extra=tp0)
    await asyncio.sleep(0.1 * startup_s)
    logger.info("Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB",
                max(gpu_mem - weights, 0.0), extra=tp0)
    if faults.never_healthy:
        logger.warning("autotune sim fault never_healthy: start-up will not finish")
        return
    t0 = time.perf_counter()
    await asyncio.sleep(0.3 * startup_s)
    logger.info("Capture cuda graph end. Time elapsed: %.2f s.", time.perf_counter() - t0, extra=tp0)
    if prefill_capture_s > 0:
        # SGLang 0.5.17's own lines (scripts/gpu/prefill_capture.py reads both).
        logger.info("Capture target prefill CUDA graph begin. backend=breakable, num_tokens=%s, avail mem=%.2f GB",
                    prefill_graph_sizes(args)[0], max(gpu_mem - weights, 0.0), extra=tp0)
        t0 = time.perf_counter()
        await asyncio.sleep(prefill_capture_s)
        logger.info("Capture target prefill CUDA graph end. elapsed=%.2f s, mem usage=0.00 GB, avail mem=%.2f GB.",
                    time.perf_counter() - t0, max(gpu_mem - weights, 0.0), extra=tp0)
    else:
        logger.info("Prefill CUDA graphs disabled: no prefill capture.", extra=tp0)
    logger.info("max_total_num_tokens=%s, chunked_prefill_size=%s, max_prefill_tokens=%s, "
                "max_running_requests=%s, context_len=%s", state.sim_info.get("max_total_num_tokens"),
                args.get("chunked_prefill_size"), args.get("max_prefill_tokens"),
                state.sim_info.get("max_running_requests"), state.context_len, extra=tp0)
    # SGLang's own warm-up: one /generate of 8 tokens, counted in the metrics like any request.
    if not args.get("skip_server_warmup"):
        warm = GenRequest(prompt="The capital city of France is", prompt_tokens=7, max_new_tokens=8,
                          ignore_eos=True, client=False)
        async for _ in drive(state, warm):
            pass
    state.ready = True
    logger.info("The server is fired up and ready to roll!")
    if faults.crash_after_s is not None:
        await asyncio.sleep(faults.crash_after_s)
        die(f"RuntimeError: autotune sim fault crash_after_s:{faults.crash_after_s:g}")


def main(argv: list[str] | None = None) -> int:
    """Run the emulator until it is killed. Returns the exit code for start-up failures."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _setup_logging()
    try:
        faults = parse_faults(os.environ.get(FAULT_ENV))
        startup_override = _env_float("AUTOTUNE_SIM_STARTUP_S")
        noise_cv = _env_float("AUTOTUNE_SIM_NOISE_CV")
        seed_env = os.environ.get(SEED_ENV)
        seed_from_env = int(seed_env) if seed_env not in (None, "") else None
    except ValueError as exc:
        return _fail(f"{PROG}: error: {exc}", 1)

    try:
        args = dict(parse_server_args(argv))
    except LaunchArgsError as exc:
        msg = getattr(exc, "message", None) or str(exc)
        if "error:" not in msg:
            msg = f"{PROG}: error: {msg}"
        return _fail(f"usage: {PROG} [sglang.launch_server arguments]\n{msg}", 2)

    profile_name = os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE
    try:
        profile = load_profile(profile_name)
    except (AutotuneError, OSError, ValueError) as exc:
        return _fail(f"{PROG}: error: cannot load simulator profile {profile_name!r} "
                     f"(AUTOTUNE_SIM_PROFILE): {exc}", 1)


    host = str(args.get("host") or "127.0.0.1")
    port = int(args.get("port") or 30000)
    args["host"], args["port"] = host, port
    logger.info("server_args=ServerArgs(%s)", ", ".join(f"{k}={v!r}" for k, v in args.items()))
    if faults.active:
        logger.warning("autotune sim faults: %s", ",".join(faults.active))
    tp = int(args.get("tp_size") or 1)
    gpu_ids = visible_gpu_ids(os.environ)
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    logger.info("CUDA_VISIBLE_DEVICES=%s (%s), tp_size=%d", "<unset>" if cvd is None else repr(cvd),
                "all GPUs" if gpu_ids is None else f"{len(gpu_ids)} GPU(s): {gpu_ids}", tp)

    try:
        model = PerformanceModel(profile, ModelConfig.from_server_args(args, os.environ))
        fatal = model.check_startup(visible_gpus=None if gpu_ids is None else len(gpu_ids))
    except (AutotuneError, ValueError, KeyError, TypeError) as exc:
        return _fail(f"{PROG}: error: the performance model rejected this launch: {exc}", 1)

    claim: GpuClaim | None = None
    lock_dir = os.environ.get("AUTOTUNE_SIM_GPU_LOCK_DIR")
    if lock_dir:
        claim = GpuClaim(Path(lock_dir), gpu_ids if gpu_ids is not None else [str(i) for i in range(tp)],
                         {"cuda_visible_devices": cvd, "tp_size": tp, "port": port})
        busy = claim.acquire()
        if busy is not None:
            logger.error(busy)
            return 1
        atexit.register(claim.finish)

    def die(exc_line: str, *, where: str = "event_loop_overlap") -> NoReturn:
        crash(exc_line, where=where, code=1, before_exit=claim.finish if claim else None)

    seed = seed_from_env if seed_from_env is not None else args.get("random_seed")
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 30)
    startup_s = faults.slow_start if faults.slow_start is not None else (
        startup_override if startup_override is not None else float(model.startup_s))
    # startup_s is a full start; the prefill-graph capture share of it is skipped without those graphs.
    # A slow_start fault keeps its whole length.
    share = 0.0 if faults.slow_start is not None else float(getattr(profile, "prefill_graph_share", 0.0))
    prefill_capture_s = startup_s * share * prefill_capture_share(args) if prefill_graphs_on(args) else 0.0
    startup_s *= 1.0 - share
    sim_info = {"profile": getattr(profile, "name", profile_name), "profile_source": profile_name,
                "gpu_ids": gpu_ids, "cuda_visible_devices": cvd, "seed": seed, "noise_cv": noise_cv,
                "startup_s": startup_s + prefill_capture_s, "prefill_capture_s": prefill_capture_s,
                "faults": faults.active,
                "max_total_num_tokens": None, "pid": os.getpid()}

    engine = SimEngine(model, max_running_requests=args.get("max_running_requests"), seed=seed,
                       noise_cv=noise_cv)
    sim_info["max_running_requests"] = engine.max_running_requests

    async def startup(st: SimState) -> None:
        while not server.started:  # log and time the start-up only once the port is bound
            await asyncio.sleep(0.01)
        await _startup(st, startup_s=startup_s, fatal=fatal, prefill_capture_s=prefill_capture_s)

    state = SimState(args=args, argv=argv, model=model, engine=engine, faults=faults, die=die,
                     sim_info=sim_info, version=_version(),
                     device_timer=os.environ.get("SGLANG_ENABLE_METRICS_DEVICE_TIMER", "").lower()
                     in ("true", "1", "yes", "y"),
                     startup=startup)
    config = uvicorn.Config(create_app(state), host=host, port=port, loop="auto", http="auto",
                            log_level="warning", access_log=False, lifespan="on")
    stop_pause = _env_float(STOP_DIAG_ENV) or 0.0
    server = _Server(config, on_exit=claim.finish if claim else None,
                     stop_pause_s=stop_pause if crash_diagnostics_on(os.environ) else 0.0)
    server.run()
    return 0


class _Server(uvicorn.Server):
    """uvicorn's server, but SIGTERM/SIGINT end the process at once, like SGLang's kill_process_tree."""

    def __init__(self, config: uvicorn.Config, *, on_exit: Callable[[], None] | None = None,
                 stop_pause_s: float = 0.0) -> None:
        super().__init__(config)
        self._on_exit = on_exit
        self._stop_pause_s = stop_pause_s

    def handle_exit(self, sig: int, frame: Any) -> None:
        logger.info("Received %s, shutting down.", signal.Signals(sig).name)
        if self._stop_pause_s > 0:  # blocking, as SGLang's own handler is
            logger.info("Sleeping %g seconds before crash diagnostics to let GPU activity settle.",
                        self._stop_pause_s)
            for h in logger.handlers:
                h.flush()
            time.sleep(self._stop_pause_s)
            logger.info("No live scheduler processes found; skipping py-spy and CUDA coredump.")
        if self._on_exit is not None:
            try:
                self._on_exit()
            except OSError:
                pass
        for h in logger.handlers:
            h.flush()
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)


if __name__ == "__main__":
    sys.exit(main())
