"""Async streaming benchmark client: per-request timestamps, server-side token counts, summary.

Wire formats (read from SGLang 0.5.23's source, ``srt/entrypoints/http_server.py``,
``srt/managers/tokenizer_manager.py``, ``srt/entrypoints/openai/serving_chat.py``):

``POST /generate`` with ``{"text": ..., "sampling_params": {"max_new_tokens": N, "ignore_eos": b,
"temperature": 0}, "stream": true}`` answers ``text/event-stream`` frames ``data: <json>\\n\\n`` and
finally ``data: [DONE]\\n\\n``. Each JSON chunk is ``{"text", "output_ids", "meta_info"}``. With the
default ``--incremental-streaming-output`` off, ``text`` and ``output_ids`` are *cumulative* (the
whole output so far; with the flag on they are deltas). ``meta_info.completion_tokens`` is always
the cumulative count of output tokens, so one chunk can carry several tokens (speculative cycles,
``--stream-interval``). Every chunk's meta_info has ``id``, ``finish_reason`` (None until the
last chunk, then ``{"type": "length", "length": N}`` or ``{"type": "stop", "matched": ...}`` or
``{"type": "abort", "message": ...}``), ``prompt_tokens``, ``completion_tokens``,
``cached_tokens``. The final chunk adds ``e2e_latency`` and, with speculation, ``spec_verify_ct``,
``spec_accept_length`` (= completion_tokens / spec_verify_ct, which counts the prefill token),
``spec_accept_rate``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts`` and
``spec_correct_drafts_histogram``. An error after the stream started is sent as
``data: {"error": {"message", "type", "code", ...}}`` followed by ``data: [DONE]``.

``POST /v1/chat/completions`` with ``"stream": true`` sends ``chat.completion.chunk`` objects:
first a role chunk (``delta: {"role": "assistant", "content": ""}``, no tokens), then one chunk
per server output step with a non-empty ``delta.content`` (the text *delta*), then a chunk with
``finish_reason`` and no content, then (only when asked) an ``sglext`` chunk, then with
``stream_options.include_usage`` a usage chunk (``choices: []``, ``usage: {prompt_tokens,
completion_tokens, total_tokens}``) and ``data: [DONE]``. With
``stream_options.continuous_usage_stats`` every content chunk also carries ``usage`` with the
cumulative ``completion_tokens``, which is what per-token ITL needs, so this client asks for it.
``"return_spec_tokens_details": true`` makes SGLang add an ``sglext.spec_tokens_details`` chunk
with the same ``spec_*`` fields as ``/generate``'s final meta_info. Errors are
``data: {"error": {"object": "error", "message", "type", "code"}}``.

SGLang 0.5.17 (checked in its wheel) sends the same ``/generate`` fields plus the older names
``spec_accepted_drafts``, ``spec_proposed_drafts`` and ``spec_accept_histogram``; fields are read
by name and an older name fills its current one only when that is missing
(:data:`autotune.bench._sse.SPEC_ALIASES`). Its chat API has no ``sglext.spec_tokens_details`` (the
request's ``return_spec_tokens_details`` is ignored), so with ``api: chat`` on 0.5.17 the
per-request accept length is unknown (None), not zero.

Each request becomes a :class:`~autotune.bench.records.RequestRecord` and a run a
:class:`~autotune.bench.records.BenchResult`; every metric is derived there, from the records only.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import ssl
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from autotune.bench._net import slot_transport
from autotune.bench._sse import ChatAccumulator, GenerateAccumulator, SSEDecoder, StreamAccumulator
from autotune.bench.records import BenchResult, RequestRecord

if TYPE_CHECKING:
    from autotune.space.prompts import Prompt

try:
    import orjson as _orjson

    def _dumps(obj: Any) -> bytes:
        return _orjson.dumps(obj)
except ImportError:  # pragma: no cover
    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj).encode()

APIS = ("generate", "chat")
_PATHS = {"generate": "/generate", "chat": "/v1/chat/completions"}
_ACCUMULATORS: dict[str, type[StreamAccumulator]] = {"generate": GenerateAccumulator,
                                                     "chat": ChatAccumulator}

#: Connect quickly or fail; a read may wait for a long prefill under load.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=120.0, write=30.0, pool=600.0)


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------

def build_request(prompt: Prompt, *, api: str, model: str | None = None) -> dict[str, Any]:
    """The JSON body for one prompt, greedy decoding.

    Args:
        prompt: The prompt.
        api: ``generate`` (SGLang native) or ``chat`` (OpenAI-compatible).
        model: Model name for ``chat``; SGLang accepts any name for its one model.
    """
    if api == "generate":
        return {"text": prompt.as_text(),
                "sampling_params": {"max_new_tokens": prompt.max_tokens,
                                    "ignore_eos": prompt.ignore_eos, "temperature": 0},
                "stream": True}
    if api == "chat":
        return {"model": model or "default", "messages": prompt.as_messages(),
                "max_completion_tokens": prompt.max_tokens, "ignore_eos": prompt.ignore_eos,
                "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                "return_spec_tokens_details": True}
    raise ValueError(f"api must be one of {APIS}, got {api!r}")


async def stream_request(client: httpx.AsyncClient, url: str, body: bytes, *,
                         accumulator: StreamAccumulator, clock: Callable[[], float],
                         request_timeout_s: float | None, keep_raw: bool = False,
                         ) -> tuple[float, float, int | None, str | None,
                                    list[tuple[float, bytes]] | None]:
    """Transport for one request: send, timestamp each network read, feed its SSE events.

    Returns:
        ``(start, end, http_status, transport_error, raw_reads)``.
    """
    decoder = SSEDecoder()
    raw: list[tuple[float, bytes]] | None = [] if keep_raw else None
    status: int | None = None
    error: str | None = None
    start = clock()
    try:
        async with asyncio.timeout(request_timeout_s):
            async with client.stream("POST", url, content=body,
                                     headers={"content-type": "application/json"}) as resp:
                status = resp.status_code
                if status != 200:
                    detail = (await resp.aread())[:300].decode("utf-8", "replace")
                    error = f"HTTP {status}: {detail}"
                else:
                    feed = decoder.feed
                    on_event = accumulator.on_event
                    async for chunk in resp.aiter_raw():
                        t = clock()
                        if raw is not None:
                            raw.append((t, chunk))
                        for name, data in feed(chunk):
                            on_event(t, name, data)
                        if accumulator.error is not None:
                            break
                    t = clock()
                    for name, data in decoder.close():
                        accumulator.on_event(t, name, data)
    except TimeoutError:
        error = f"request exceeded request_timeout_s={request_timeout_s}"
    except httpx.TimeoutException as exc:
        error = f"{type(exc).__name__}: {exc or 'timed out'}"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    return start, clock(), status, error, raw


def _finish_record(index: int, prompt_id: str, acc: StreamAccumulator, start: float,
                   end: float, status: int | None, error: str | None,
                   raw: list[tuple[float, bytes]] | None, *, kind: str | None = None) -> RequestRecord:
    if error is None:
        error = acc.error
    if error is None and acc.finish_reason is None:
        error = "stream ended before the final chunk"
    if error is None and acc.completion_tokens is None:
        error = "server reported no completion token count"
    return RequestRecord(
        index=index, prompt_id=prompt_id, start=start, end=end, chunk_times=acc.times,
        chunk_tokens=acc.counts, prompt_tokens=acc.prompt_tokens,
        completion_tokens=acc.completion_tokens, finish_reason=acc.finish_reason,
        spec=acc.spec, error=error, http_status=status, raw=raw, kind=kind)


# --------------------------------------------------------------------------------------------
# Connections
# --------------------------------------------------------------------------------------------

class SlotClients:
    """One single-connection :class:`httpx.AsyncClient` per request slot, kept alive across the
    slot's requests and handed out from a free list.

    Why not one client with a pool of ``concurrency`` connections: httpcore's pool (1.0.x) walks
    every connection, and for each idle one every connection again, on each request sent and each
    response closed, probing each idle socket with a system call: about 3,700 checks per request at
    32 connections, 15,500 at 64, run on the event loop between chunks, so finished requests were
    noticed and replaced late. At c64 on the emulator it read 0.65-0.96x ``sglang.bench_serving``'s
    tok/s, 0.975-0.992x with a connection per slot (issue 34, docs/benchmarks.md). A pool of one
    connection costs a constant per request. Each connection reads through
    :class:`autotune.bench._net.AsyncioBackend` (a third less CPU per token than anyio's).

    With an injected ``transport`` (tests), every slot shares one client over it.
    """

    def __init__(self, *, timeout: httpx.Timeout, transport: httpx.AsyncBaseTransport | None,
                 cap: int) -> None:
        self._timeout = timeout
        self._shared = (httpx.AsyncClient(transport=transport, timeout=timeout,
                                          limits=httpx.Limits(max_connections=cap,
                                                              max_keepalive_connections=cap))
                        if transport is not None else None)
        self._free: list[httpx.AsyncClient] = []
        self._made: list[httpx.AsyncClient] = []
        self._ssl: ssl.SSLContext | None = None

    def _new(self) -> httpx.AsyncClient:
        if self._ssl is None:  # ~30 ms to build; every client shares the one
            self._ssl = httpx.create_ssl_context()
        client = httpx.AsyncClient(timeout=self._timeout, transport=slot_transport(ssl_context=self._ssl))
        self._made.append(client)
        return client

    def prepare(self, n: int) -> None:
        """Build ``n`` clients now (before the window), so that the first requests do not wait."""
        if self._shared is None:
            self._free.extend(self._new() for _ in range(max(0, n - len(self._free))))

    def acquire(self) -> httpx.AsyncClient:
        """A client for one request; give it back with :meth:`release`."""
        if self._shared is not None:
            return self._shared
        return self._free.pop() if self._free else self._new()

    def release(self, client: httpx.AsyncClient) -> None:
        """Return a client from :meth:`acquire` for the next request."""
        if client is not self._shared:
            self._free.append(client)

    async def aclose(self) -> None:
        """Close every client (and its connection)."""
        clients = [self._shared] if self._shared is not None else self._made
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)


# --------------------------------------------------------------------------------------------
# Load generation
# --------------------------------------------------------------------------------------------

def poisson_arrivals(n: int, rate: float, *, seed: int) -> list[float]:
    """Offsets (seconds from the run's start) of ``n`` Poisson arrivals; the first is at 0."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(rate)
        out.append(t)
    return out


def _check_args(api: str, concurrency: int | None, request_rate: float | None,
                max_duration_s: float | None) -> None:
    if api not in APIS:
        raise ValueError(f"api must be one of {APIS}, got {api!r}")
    if concurrency is None and request_rate is None:
        raise ValueError("set concurrency (closed loop), request_rate (Poisson), or both")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(
            concurrency, int) or concurrency < 1):
        raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if request_rate is not None and not (request_rate > 0 and math.isfinite(request_rate)):
        raise ValueError(f"request_rate must be a finite number > 0, got {request_rate!r}")
    if max_duration_s is not None and not max_duration_s > 0:
        raise ValueError(f"max_duration_s must be > 0, got {max_duration_s!r}")


async def run_benchmark(base_url: str, prompts: Sequence[Prompt], *, api: str = "generate",
                        concurrency: int | None = None, request_rate: float | None = None,
                        max_duration_s: float | None = None,
                        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
                        request_timeout_s: float | None = 600.0,
                        transport: httpx.AsyncBaseTransport | None = None, seed: int = 0,
                        model: str | None = None, keep_raw: bool = False,
                        clock: Callable[[], float] = time.perf_counter) -> BenchResult:
    """Drive ``prompts`` against a server and summarise.

    Load shape: ``concurrency`` alone keeps that many requests in flight (1 = batch-1
    latency); ``request_rate`` sends Poisson arrivals (seeded by ``seed``), capped at
    ``concurrency`` in flight when both are set and uncapped (every prompt may be in flight, as
    ``bench_serving``'s default ``--max-concurrency``) when ``concurrency`` is None. No request
    starts after ``max_duration_s``;
    requests in flight then finish (each bounded by ``request_timeout_s``).

    Args:
        base_url: ``http://host:port``.
        prompts: What to send, in order.
        api: ``generate`` or ``chat``.
        concurrency: Requests in flight at most; None for no cap (needs ``request_rate``).
        request_rate: Mean requests per second of a Poisson process.
        max_duration_s: Stop starting requests after this long.
        timeout: httpx timeouts (connect, read between chunks, write, pool).
        request_timeout_s: Whole-request limit; None for none.
        transport: Transport for the httpx client (tests inject one).
        seed: Seed of the arrival process.
        model: Model name sent to the chat API.
        keep_raw: Keep each network read with its timestamp in the records.
        clock: Monotonic clock in seconds (tests inject one).

    Returns:
        The summary, with every record.
    """
    _check_args(api, concurrency, request_rate, max_duration_s)
    url = base_url.rstrip("/") + _PATHS[api]
    bodies = [_dumps(build_request(p, api=api, model=model)) for p in prompts]
    ids = [p.id for p in prompts]
    acc_cls = _ACCUMULATORS[api]
    n = len(prompts)
    cap = concurrency if concurrency is not None else max(n, 1)
    records: list[RequestRecord | None] = [None] * n
    clients = SlotClients(timeout=timeout, transport=transport, cap=cap)
    if request_rate is None:
        clients.prepare(min(cap, n))
    epoch_offset = time.time() - clock()
    t0 = clock()
    deadline = None if max_duration_s is None else t0 + max_duration_s

    try:

        async def one(i: int) -> None:
            acc = acc_cls()
            client = clients.acquire()
            try:
                start, end, status, err, raw = await stream_request(
                    client, url, bodies[i], accumulator=acc, clock=clock,
                    request_timeout_s=request_timeout_s, keep_raw=keep_raw)
            finally:
                clients.release(client)
            records[i] = _finish_record(i, ids[i], acc, start, end, status, err, raw, kind=prompts[i].kind)

        if request_rate is None:
            next_i = 0

            async def worker() -> None:
                nonlocal next_i
                while next_i < n and (deadline is None or clock() < deadline):
                    i = next_i
                    next_i += 1
                    await one(i)

            await asyncio.gather(*(worker() for _ in range(min(cap, n))))
        else:
            sem = asyncio.Semaphore(cap)

            async def gated(i: int) -> None:
                async with sem:
                    if deadline is None or clock() < deadline:
                        await one(i)

            tasks = []
            try:
                for i, offset in enumerate(poisson_arrivals(n, request_rate, seed=seed)):
                    arrival = t0 + offset
                    if deadline is not None and arrival >= deadline:
                        break
                    delay = arrival - clock()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(asyncio.create_task(gated(i)))
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
    finally:
        await clients.aclose()

    done = [r for r in records if r is not None]
    return BenchResult.from_records(done, api=api, not_started=n - len(done),
                                    epoch_offset=epoch_offset, concurrency=concurrency,
                                    request_rate=request_rate)


def run_benchmark_sync(base_url: str, prompts: Sequence[Prompt], **kwargs: Any) -> BenchResult:
    """:func:`run_benchmark` from synchronous code (starts its own event loop)."""
    return asyncio.run(run_benchmark(base_url, prompts, **kwargs))
