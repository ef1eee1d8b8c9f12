"""Expected result of a closed-loop benchmark at concurrency > 1, by replaying the engine's loop.

At concurrency 1 the analytic expectation in :meth:`PerformanceModel.expected` is exact. With
several requests in flight two things it cannot see matter: the engine prefills every waiting
request in one stalling forward, and at the end of a finite workload the batch drains. This replays
:class:`autotune.sim.engine.SimEngine`'s loop with each request advancing by its mean tokens per
cycle, so the expectation covers both. It costs about one step per cycle (milliseconds a config).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Sequence

from autotune.sglang.speculative import MAX_RUNNING_REQUESTS_WITH_SPEC
from autotune.sim.engine import NO_SPEC_MAX_RUNNING_REQUESTS
from autotune.sim.model import PerformanceModel


@dataclass(frozen=True)
class Request:
    """One prompt of the workload: its prompt tokens, output tokens and mean tokens per cycle."""

    input_len: int
    output_len: int
    tokens_per_cycle: float


def replay(model: PerformanceModel, requests: Sequence[Request], concurrency: int, *,
           max_running: int | None = None) -> tuple[float, float]:
    """``(output tok/s over the window, busy ms)`` of a closed loop of ``requests``.

    The client keeps ``concurrency`` requests in flight; a request that finishes is replaced by
    the next one, which reaches the engine during the following step (the client reacts within a
    millisecond, steps take several), exactly as with the real client against the emulator.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    cap = max_running or (MAX_RUNNING_REQUESTS_WITH_SPEC if model.config.spec is not None
                          else NO_SPEC_MAX_RUNNING_REQUESTS)
    pending = deque(requests)
    waiting: list[Request] = [pending.popleft() for _ in range(min(concurrency, len(pending)))]
    arriving = 0
    running: list[list[float]] = []  # [tokens still to make, tokens per cycle]
    t = 0.0
    total = sum(r.output_len for r in requests)
    while waiting or running or arriving:
        if not running and not waiting:
            # The engine idles until the replacement requests arrive.
            waiting.extend(pending.popleft() for _ in range(min(arriving, len(pending))))
            arriving = 0
            continue
        if waiting and len(running) < cap:
            admitted, waiting = waiting[: cap - len(running)], waiting[cap - len(running):]
            t += model.prefill_ms(sum(r.input_len for r in admitted))
            done = 0
            for r in admitted:
                if r.output_len > 1:
                    running.append([r.output_len - 1.0, r.tokens_per_cycle])
                else:
                    done += 1
            arriving += done
            continue
        t += model.step(len(running)).total_ms
        waiting.extend(pending.popleft() for _ in range(min(arriving, len(pending))))
        arriving = 0
        still: list[list[float]] = []
        for job in running:
            job[0] -= job[1]
            if job[0] > 1e-9:
                still.append(job)
            else:
                arriving += 1
        running = still
        if not pending:
            arriving = 0
    return (total / t * 1e3 if t > 0 else float("nan")), t
