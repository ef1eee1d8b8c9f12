"""The emulated scheduler: runs speculative cycles in real time according to the performance model.

Like SGLang's scheduler it keeps a running batch. New requests are prefilled in an extend forward that
stalls the batch; then every cycle advances all running requests together, each by the number of
tokens its own acceptance draw gives. Phase times are counted as SGLang's CUDA-event device timer
counts them, so ``/metrics`` shows the same counters a real server would.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import AsyncIterator

from autotune.sglang.speculative import MAX_RUNNING_REQUESTS_WITH_SPEC
from autotune.sim.acceptance import AcceptanceDist
from autotune.sim.model import PerformanceModel

_STATS_EVERY = 40  # SGLang refreshes its averaged spec stats every 40 decode iterations.
_CATCH_UP_S = 0.05
#: The emulator's stand-in for SGLang's memory-derived cap without speculation.
NO_SPEC_MAX_RUNNING_REQUESTS = 256


@dataclass
class Chunk:
    """Tokens produced for one request by one scheduler iteration."""

    token_ids: list[int]
    completion_tokens: int
    finished: bool = False
    finish_reason: str | None = None
    meta: dict = field(default_factory=dict)


@dataclass
class EngineStats:
    """Counters and gauges behind ``/metrics`` and ``/server_info``."""

    generation_tokens_total: int = 0
    prompt_tokens_total: int = 0
    num_requests_total: int = 0
    spec_verify_calls_total: int = 0
    forward_seconds: dict[str, float] = field(default_factory=lambda: {
        "eagle_draft": 0.0, "target_verify": 0.0, "eagle_draft_extend": 0.0, "decode": 0.0,
        "extend": 0.0})
    avg_spec_accept_length: float | None = None
    last_spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    gen_throughput: float | None = None
    decode_iterations: int = 0


class _Request:
    __slots__ = ("prompt_tokens", "max_new", "limit", "stop_early", "dist", "queue", "produced",
                 "verify_ct", "correct", "histogram", "token_seed", "aborted")

    def __init__(self, *, prompt_tokens: int, limit: int, stop_early: bool, dist: AcceptanceDist,
                 token_seed: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.limit = limit
        self.stop_early = stop_early
        self.dist = dist
        self.queue: asyncio.Queue[Chunk] = asyncio.Queue()
        self.produced = 0
        self.verify_ct = 0
        self.correct = 0
        self.histogram = [0] * dist.max_tokens
        self.token_seed = token_seed
        self.aborted = False

    def token_ids(self, n: int) -> list[int]:
        # Stable fake ids: a pure function of the prompt and the position.
        return [(self.token_seed + 7919 * (self.produced + i)) % 32000 + 100 for i in range(n)]


def natural_length(prompt: str, max_new_tokens: int) -> tuple[int, bool]:
    """Where a prompt's answer would hit EOS: deterministic, 32..511 tokens."""
    digest = hashlib.blake2b(prompt.encode("utf-8", "replace"), digest_size=4, person=b"eos").digest()
    natural = 32 + int.from_bytes(digest, "big") % 480
    return (natural, True) if natural < max_new_tokens else (max_new_tokens, False)


class SimEngine:
    """Emulated SGLang scheduler.

    Args:
        model: The performance model of this launch.
        max_running_requests: Batch cap; defaults as SGLang (48 with speculation).
        seed: Seed for acceptance draws and measurement noise; None draws one.
        noise_cv: Spread of the measurement noise; None takes the profile's.
    """

    def __init__(self, model: PerformanceModel, *, max_running_requests: int | None = None,
                 seed: int | None = None, noise_cv: float | None = None) -> None:
        self.model = model
        spec = model.config.spec is not None
        # Without speculation SGLang sizes the cap from KV memory; the emulator models no memory.
        cap = (max_running_requests or model.config.max_running_requests
               or (MAX_RUNNING_REQUESTS_WITH_SPEC if spec else NO_SPEC_MAX_RUNNING_REQUESTS))
        self.max_running_requests = int(cap)
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2 ** 31)
        self._rng = random.Random(self.seed)
        self._noise_rng = random.Random(self.seed ^ 0x5EED)
        self.noise_cv = model.profile.noise_cv if noise_cv is None else float(noise_cv)
        # Run-to-run spread (clocks, placement) plus a slow drift within a run.
        self._run_factor = self._lognormal(self.noise_cv)
        self._drift_factor = 1.0
        self._drift_until = 0.0
        self.stats = EngineStats()
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._cum_tokens = 0
        self._cum_verify = 0
        self._cum_correct = 0
        self._cum_proposed = 0
        self._tp_window_start = time.monotonic()
        self._tp_window_tokens = 0

    def _lognormal(self, cv: float) -> float:
        if cv <= 0:
            return 1.0
        z = self._noise_rng.gauss(0.0, 1.0)
        return math.exp(cv * z - cv * cv / 2)

    def _noise(self, now: float) -> float:
        if now >= self._drift_until:
            self._drift_factor = self._lognormal(self.noise_cv / 2)
            self._drift_until = now + 0.5
        return self._run_factor * self._drift_factor

    # ----- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    @property
    def idle(self) -> bool:
        return not self._running and not self._waiting

    def flush_cache(self) -> bool:
        """Reset the cumulative accept statistics, as SGLang's ``/flush_cache``; only when idle."""
        if not self.idle:
            return False
        self._cum_tokens = self._cum_verify = self._cum_correct = self._cum_proposed = 0
        self.stats.avg_spec_accept_length = None
        return True

    # ----- requests --------------------------------------------------------------------------------
    async def generate(self, *, prompt: str, prompt_tokens: int, max_new_tokens: int,
                       ignore_eos: bool) -> AsyncIterator[Chunk]:
        """Stream the chunks of one request until it finishes."""
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if ignore_eos:
            limit, stop_early = max_new_tokens, False
        else:
            limit, stop_early = natural_length(prompt, max_new_tokens)
        digest = hashlib.blake2b(prompt.encode("utf-8", "replace"), digest_size=4).digest()
        req = _Request(prompt_tokens=max(1, prompt_tokens), limit=limit, stop_early=stop_early,
                       dist=self.model.acceptance_of(prompt),
                       token_seed=int.from_bytes(digest, "big"))
        self._waiting.append(req)
        self.stats.num_queue_reqs = len(self._waiting)
        self._wake.set()
        finished = False
        try:
            while True:
                chunk = await req.queue.get()
                finished = chunk.finished
                yield chunk
                if finished:
                    return
        finally:
            if not finished:
                # The client went away: SGLang aborts the request, so stop spending cycles on it.
                req.aborted = True
                if req in self._waiting:
                    self._waiting.remove(req)

    # ----- scheduler loop --------------------------------------------------------------------------
    async def _sleep_until(self, deadline: float) -> None:
        # Always yield, even when late: a zero-cost step must still let the server admit requests.
        await asyncio.sleep(max(deadline - time.monotonic(), 0.0))

    async def _loop(self) -> None:
        deadline = time.monotonic()
        while True:
            if self.idle:
                self._wake.clear()
                await self._wake.wait()
                deadline = time.monotonic()
            # A loaded CPU wakes the loop late; catching up on up to 50 ms of lateness keeps the
            # modelled rate, while idle time is never banked (the deadline resets after idling).
            deadline = max(deadline, time.monotonic() - _CATCH_UP_S)
            room = self.max_running_requests - len(self._running)
            if self._waiting and room > 0:
                admitted = [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]
                deadline = await self._prefill(admitted, deadline)
                continue
            deadline = await self._cycle(deadline)

    async def _prefill(self, reqs: list[_Request], deadline: float) -> float:
        tokens = sum(r.prompt_tokens for r in reqs)
        seconds = self.model.prefill_ms(tokens) / 1e3 * self._noise(deadline)
        deadline += seconds
        await self._sleep_until(deadline)
        st = self.stats
        st.forward_seconds["extend"] += seconds
        st.prompt_tokens_total += tokens
        st.num_requests_total += len(reqs)
        for r in reqs:
            self._emit(r, 1)
            if r.produced < r.limit:
                self._running.append(r)
        st.num_queue_reqs = len(self._waiting)
        st.num_running_reqs = len(self._running)
        return deadline

    async def _cycle(self, deadline: float) -> float:
        batch = self._running = [r for r in self._running if not r.aborted]
        if not batch:
            self.stats.num_running_reqs = 0
            return deadline
        phases = self.model.step(len(batch)).scaled(self._noise(deadline))
        deadline += phases.total_ms / 1e3
        await self._sleep_until(deadline)
        st = self.stats
        spec = self.model.config.spec is not None
        fs = st.forward_seconds
        if spec:
            fs["eagle_draft"] += phases.draft_ms / 1e3
            fs["target_verify"] += phases.verify_ms / 1e3
            fs["eagle_draft_extend"] += phases.extend_ms / 1e3
            st.spec_verify_calls_total += 1
        else:
            fs["decode"] += phases.decode_ms / 1e3
        st.decode_iterations += 1
        rng = self._rng
        still = []
        for r in batch:
            n = r.dist.sample(rng) if spec else 1
            if spec:
                r.verify_ct += 1
                r.histogram[n - 1] += 1
                r.correct += n - 1
                self._cum_verify += 1
                self._cum_correct += n - 1
                self._cum_proposed += r.dist.num_proposed
                self._cum_tokens += n
            self._emit(r, min(n, r.limit - r.produced))
            if r.produced < r.limit:
                still.append(r)
        self._running = still
        st.num_running_reqs = len(still)
        if st.decode_iterations % _STATS_EVERY == 0:
            self._refresh_stats()
        return deadline

    def _refresh_stats(self) -> None:
        st = self.stats
        now = time.monotonic()
        if self._cum_verify:
            st.avg_spec_accept_length = self._cum_tokens / self._cum_verify
            st.spec_accept_rate = self._cum_correct / max(self._cum_proposed, 1)
        st.gen_throughput = self._tp_window_tokens / max(now - self._tp_window_start, 1e-9)
        self._tp_window_start, self._tp_window_tokens = now, 0

    def _emit(self, r: _Request, n: int) -> None:
        ids = r.token_ids(n)
        r.produced += n
        self.stats.generation_tokens_total += n
        self._tp_window_tokens += n
        done = r.produced >= r.limit
        chunk = Chunk(token_ids=ids, completion_tokens=r.produced, finished=done)
        if done:
            chunk.finish_reason = "stop" if r.stop_early else "length"
            chunk.meta = self._final_meta(r)
        r.queue.put_nowait(chunk)

    def _final_meta(self, r: _Request) -> dict:
        if self.model.config.spec is None or r.verify_ct == 0:
            return {}
        proposed = r.verify_ct * r.dist.num_proposed
        accepted_hist = list(r.histogram)
        self.stats.last_spec_accept_length = r.produced / r.verify_ct
        return {
            "spec_verify_ct": r.verify_ct,
            # As SGLang: completion tokens over verify calls, so the prefill token counts too.
            "spec_accept_length": r.produced / r.verify_ct,
            "spec_accept_rate": r.correct / proposed if proposed else None,
            "spec_num_correct_drafts": r.correct,
            "spec_num_proposed_drafts": proposed,
            # Index j: cycles that accepted j draft tokens.
            "spec_correct_drafts_histogram": accepted_hist,
            "spec_accept_histogram": accepted_hist,
        }
