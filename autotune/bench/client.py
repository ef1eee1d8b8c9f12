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

Metrics derive from :class:`RequestRecord` only. ITL is per token from the server's cumulative
counts: a chunk carrying ``k`` new tokens after a gap ``g`` contributes ``k`` samples of ``g/k``,
so coarse or fine chunking does not bias the distribution. Unknown values are None, never 0.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from autotune.bench._sse import ChatAccumulator, GenerateAccumulator, SSEDecoder, StreamAccumulator

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
PERCENTILES = (50, 90, 99)


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------

@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request. Times are seconds on the run's monotonic clock.

    Attributes:
        index: Position of the prompt in the submitted list.
        prompt_id: The prompt's id.
        start: When the request was sent.
        end: When the response stream closed (or the request failed).
        chunk_times: Arrival time of every chunk that carried new tokens.
        chunk_tokens: The server's cumulative completion-token count at each of those chunks;
            None when the server gave no per-chunk counts.
        prompt_tokens: Server-reported prompt tokens.
        completion_tokens: Server-reported completion tokens (final).
        finish_reason: ``length``, ``stop``... for a completed request.
        spec: Final ``spec_*`` fields from the server, empty without speculation.
        error: Why the request failed; None for a completed request.
        http_status: The response status, None if no response arrived.
        raw: ``(arrival_time, bytes)`` of each network read, only with ``keep_raw``.
    """

    index: int
    prompt_id: str
    start: float
    end: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] | None = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    http_status: int | None = None
    raw: list[tuple[float, bytes]] | None = None

    @property
    def ok(self) -> bool:
        """Whether the request completed and its numbers can be used."""
        return self.error is None

    @property
    def first_token(self) -> float | None:
        """Arrival time of the first chunk with tokens."""
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def last_token(self) -> float | None:
        """Arrival time of the last chunk with tokens."""
        return self.chunk_times[-1] if self.chunk_times else None

    @property
    def ttft_s(self) -> float | None:
        """Time to first token."""
        return None if not self.ok or not self.chunk_times else self.chunk_times[0] - self.start

    @property
    def e2e_s(self) -> float | None:
        """End-to-end latency of a completed request."""
        return None if not self.ok or self.end is None else self.end - self.start

    @property
    def decode_tok_s(self) -> float | None:
        """Decode speed: tokens after the first chunk over first-to-last token time.

        With the usual first chunk of one token this is ``(completion_tokens - 1) /
        (last - first)``; a first chunk of several tokens has them all produced before it arrived.
        """
        if not self.ok or self.completion_tokens is None or len(self.chunk_times) < 2:
            return None
        first_count = self.chunk_tokens[0] if self.chunk_tokens else 1
        span = self.chunk_times[-1] - self.chunk_times[0]
        tokens = self.completion_tokens - first_count
        if span <= 0 or tokens <= 0:
            return None
        return tokens / span

    def itl_samples(self) -> list[tuple[float, int]]:
        """Per-token inter-token latencies as ``(seconds_per_token, token_count)`` pairs.

        Empty when the request failed or the server gave no per-chunk token counts.
        """
        times, counts = self.chunk_times, self.chunk_tokens
        if not self.ok or not counts or len(times) < 2:
            return []
        out = []
        for i in range(1, len(times)):
            k = counts[i] - counts[i - 1]
            if k > 0:
                out.append(((times[i] - times[i - 1]) / k, k))
        return out

    def to_dict(self, *, epoch_offset: float = 0.0) -> dict[str, Any]:
        """JSON-ready form; ``epoch_offset`` turns clock times into Unix times."""
        def shift(t: float | None) -> float | None:
            return None if t is None else t + epoch_offset
        return {
            "index": self.index, "prompt_id": self.prompt_id, "ok": self.ok,
            "start": shift(self.start), "end": shift(self.end),
            "first_token": shift(self.first_token), "last_token": shift(self.last_token),
            "ttft_s": self.ttft_s, "e2e_s": self.e2e_s, "decode_tok_s": self.decode_tok_s,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason, "spec": self.spec, "error": self.error,
            "http_status": self.http_status,
            "chunk_times": [t + epoch_offset for t in self.chunk_times],
            "chunk_tokens": self.chunk_tokens,
        }


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float,
               weights: Sequence[int] | None = None) -> float | None:
    """Linear-interpolated percentile (numpy's default method); None for no data.

    Args:
        values: Samples.
        q: Percentile in [0, 100].
        weights: Optional positive integer multiplicity of each sample; the result equals the
            percentile of the samples repeated that many times, without building that list.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    if weights is None:
        pairs = sorted((v, 1) for v in values)
    else:
        if len(weights) != len(values):
            raise ValueError("values and weights differ in length")
        pairs = sorted((v, w) for v, w in zip(values, weights) if w > 0)
    total = sum(w for _, w in pairs)
    if total == 0:
        return None
    pos = q / 100 * (total - 1)
    rank = math.floor(pos)
    lo = _value_at_rank(pairs, rank)
    frac = pos - rank
    if frac == 0:
        return lo
    return lo + (_value_at_rank(pairs, rank + 1) - lo) * frac


def _value_at_rank(pairs: Sequence[tuple[float, int]], rank: int) -> float:
    """The ``rank``-th (0-based) sample of sorted ``(value, multiplicity)`` pairs."""
    seen = 0
    for v, w in pairs:
        seen += w
        if rank < seen:
            return v
    return pairs[-1][0]


def _pcts(values: Sequence[float], weights: Sequence[int] | None = None,
          scale: float = 1.0) -> dict[int, float | None]:
    out: dict[int, float | None] = {}
    for q in PERCENTILES:
        p = percentile(values, q, weights)
        out[q] = None if p is None else p * scale
    return out


@dataclass
class BenchResult:
    """Summary of one benchmark run. Every unknown is None.

    Attributes:
        api: ``generate`` or ``chat``.
        num_requests: Requests sent.
        completed: Requests that finished with server token counts.
        failed: Requests sent that did not complete.
        not_started: Prompts never sent because ``max_duration_s`` ran out.
        window_start, window_end: First request start and last request end (monotonic clock).
        epoch_offset: Add to a clock time to get a Unix time.
        duration_s: ``window_end - window_start``.
        output_tok_s: Completion tokens of completed requests over ``duration_s``.
        total_completion_tokens, total_prompt_tokens: Over completed requests.
        decode_tok_s_p50, decode_tok_s_p90: Per-request decode speed.
        ttft_ms, itl_ms, e2e_ms: ``{50: ..., 90: ..., 99: ...}`` in milliseconds.
        accept_length: Sum of completion tokens / sum of ``spec_verify_ct`` over completed
            requests that report it (SGLang's per-request convention, counting the prefill token).
        spec_verify_ct: Sum of ``spec_verify_ct`` over those requests.
        errors: Distinct error messages and how often each occurred.
        records: Every request's record (not part of :meth:`to_dict`).
    """

    api: str
    num_requests: int
    completed: int
    failed: int
    not_started: int
    window_start: float | None
    window_end: float | None
    epoch_offset: float
    duration_s: float | None
    output_tok_s: float | None
    total_completion_tokens: int | None
    total_prompt_tokens: int | None
    decode_tok_s_p50: float | None
    decode_tok_s_p90: float | None
    ttft_ms: dict[int, float | None]
    itl_ms: dict[int, float | None]
    e2e_ms: dict[int, float | None]
    accept_length: float | None
    spec_verify_ct: int | None
    errors: dict[str, int]
    concurrency: int | None = None
    request_rate: float | None = None
    records: list[RequestRecord] = field(default_factory=list, repr=False)

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord], *, api: str, not_started: int = 0,
                     epoch_offset: float = 0.0, concurrency: int | None = None,
                     request_rate: float | None = None) -> BenchResult:
        """Summarise request records (the only input of every metric)."""
        done = [r for r in records if r.ok]
        starts = [r.start for r in records]
        ends = [r.end for r in records if r.end is not None]
        w0 = min(starts) if starts else None
        w1 = max(ends) if ends else None
        duration = (w1 - w0) if (w0 is not None and w1 is not None) else None
        total_out = sum(r.completion_tokens or 0 for r in done) if done else None
        prompt_counts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
        tok_s = (total_out / duration) if (done and duration and duration > 0) else None

        decode = [v for v in (r.decode_tok_s for r in done) if v is not None]
        itl_v: list[float] = []
        itl_w: list[int] = []
        for r in done:
            for v, k in r.itl_samples():
                itl_v.append(v)
                itl_w.append(k)
        ttft = [v for v in (r.ttft_s for r in done) if v is not None]
        e2e = [v for v in (r.e2e_s for r in done) if v is not None]

        spec_done = [r for r in done if r.spec.get("spec_verify_ct")]
        verify = sum(int(r.spec["spec_verify_ct"]) for r in spec_done) if spec_done else None
        accept = (sum(r.completion_tokens or 0 for r in spec_done) / verify) if verify else None

        return cls(
            api=api, num_requests=len(records), completed=len(done),
            failed=len(records) - len(done), not_started=not_started,
            window_start=w0, window_end=w1, epoch_offset=epoch_offset, duration_s=duration,
            output_tok_s=tok_s, total_completion_tokens=total_out,
            total_prompt_tokens=sum(prompt_counts) if prompt_counts else None,
            decode_tok_s_p50=percentile(decode, 50), decode_tok_s_p90=percentile(decode, 90),
            ttft_ms=_pcts(ttft, scale=1e3), itl_ms=_pcts(itl_v, itl_w, scale=1e3),
            e2e_ms=_pcts(e2e, scale=1e3), accept_length=accept, spec_verify_ct=verify,
            errors=dict(Counter(r.error for r in records if r.error is not None)),
            concurrency=concurrency, request_rate=request_rate, records=list(records),
        )

    @property
    def window_start_unix(self) -> float | None:
        """Window start as a Unix time."""
        return None if self.window_start is None else self.window_start + self.epoch_offset

    @property
    def window_end_unix(self) -> float | None:
        """Window end as a Unix time."""
        return None if self.window_end is None else self.window_end + self.epoch_offset

    def to_dict(self) -> dict[str, Any]:
        """Flat, JSON-ready metrics (no records); None stays None."""
        out: dict[str, Any] = {
            "api": self.api, "concurrency": self.concurrency, "request_rate": self.request_rate,
            "num_requests": self.num_requests, "completed": self.completed,
            "failed": self.failed, "not_started": self.not_started,
            "window_start_unix": self.window_start_unix, "window_end_unix": self.window_end_unix,
            "duration_s": self.duration_s, "output_tok_s": self.output_tok_s,
            "total_completion_tokens": self.total_completion_tokens,
            "total_prompt_tokens": self.total_prompt_tokens,
            "decode_tok_s_p50": self.decode_tok_s_p50, "decode_tok_s_p90": self.decode_tok_s_p90,
        }
        for name, d in (("ttft_ms", self.ttft_ms), ("itl_ms", self.itl_ms),
                        ("e2e_ms", self.e2e_ms)):
            for q in PERCENTILES:
                out[f"{name}_p{q}"] = d.get(q)
        out["accept_length"] = self.accept_length
        out["spec_verify_ct"] = self.spec_verify_ct
        out["errors"] = dict(self.errors)
        return out

    def iter_record_dicts(self) -> Iterable[dict[str, Any]]:
        """Each record as a JSON-ready dict with Unix times."""
        for r in self.records:
            yield r.to_dict(epoch_offset=self.epoch_offset)

    def write_records(self, path: str | Path) -> Path:
        """Write the records as JSON lines; returns the path."""
        p = Path(path)
        with p.open("w", encoding="utf-8") as fh:
            for d in self.iter_record_dicts():
                fh.write(json.dumps(d) + "\n")
        return p


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
                   raw: list[tuple[float, bytes]] | None) -> RequestRecord:
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
        spec=acc.spec, error=error, http_status=status, raw=raw)


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
    ``concurrency`` in flight when both are set. No request starts after ``max_duration_s``;
    requests in flight then finish (each bounded by ``request_timeout_s``).

    Args:
        base_url: ``http://host:port``.
        prompts: What to send, in order.
        api: ``generate`` or ``chat``.
        concurrency: Requests in flight at most.
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
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=cap)
    records: list[RequestRecord | None] = [None] * n
    epoch_offset = time.time() - clock()
    t0 = clock()
    deadline = None if max_duration_s is None else t0 + max_duration_s

    async with httpx.AsyncClient(transport=transport, timeout=timeout, limits=limits) as client:

        async def one(i: int) -> None:
            acc = acc_cls()
            start, end, status, err, raw = await stream_request(
                client, url, bodies[i], accumulator=acc, clock=clock,
                request_timeout_s=request_timeout_s, keep_raw=keep_raw)
            records[i] = _finish_record(i, ids[i], acc, start, end, status, err, raw)

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

    done = [r for r in records if r is not None]
    return BenchResult.from_records(done, api=api, not_started=n - len(done),
                                    epoch_offset=epoch_offset, concurrency=concurrency,
                                    request_rate=request_rate)


def run_benchmark_sync(base_url: str, prompts: Sequence[Prompt], **kwargs: Any) -> BenchResult:
    """:func:`run_benchmark` from synchronous code (starts its own event loop)."""
    return asyncio.run(run_benchmark(base_url, prompts, **kwargs))
