"""What a benchmark run measured: one :class:`RequestRecord` per request and its summary.

Metrics derive from :class:`RequestRecord` only. ITL is per token from the server's cumulative
counts: a chunk carrying ``k`` new tokens after a gap ``g`` contributes ``k`` samples of ``g/k``,
so coarse or fine chunking does not bias the distribution. Unknown values are None, never 0.
:class:`BenchResult` summarises a run's records (throughput, percentiles via :func:`percentile`,
accept length, errors); it lives apart from the HTTP client in :mod:`autotune.bench.client` so
that results can be read, summarised and tested without a server or ``httpx``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PERCENTILES = (50, 90, 99)


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
        kind: The prompt's kind (its data's ``"category"``), None when the data names none.
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
    kind: str | None = None

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
            "index": self.index, "prompt_id": self.prompt_id, "kind": self.kind, "ok": self.ok,
            "start": shift(self.start), "end": shift(self.end),
            "first_token": shift(self.first_token), "last_token": shift(self.last_token),
            "ttft_s": self.ttft_s, "e2e_s": self.e2e_s, "decode_tok_s": self.decode_tok_s,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason, "spec": self.spec, "error": self.error,
            "http_status": self.http_status,
            "chunk_times": [t + epoch_offset for t in self.chunk_times],
            "chunk_tokens": self.chunk_tokens,
        }


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
        pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
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
        # total_out is known exactly when some request is done
        tok_s = (total_out / duration) if (total_out is not None and duration and duration > 0) else None

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

    @property
    def peak_in_flight(self) -> int | None:
        """Most requests in flight at once, from the records' send and close times (what
        ``vllm bench serve`` prints as peak concurrent requests): the load a rate really built,
        where the run's ``concurrency`` is only its cap. None without records, or where a
        record's end is unknown."""
        if not self.records or any(r.end is None for r in self.records):
            return None
        steps = in_flight_steps([r.start for r in self.records],
                                [r.end for r in self.records if r.end is not None])
        return max((now for _, now in steps), default=0)

    def to_dict(self) -> dict[str, Any]:
        """Flat, JSON-ready metrics (no records); None stays None."""
        out: dict[str, Any] = {
            "api": self.api, "concurrency": self.concurrency, "request_rate": self.request_rate,
            "num_requests": self.num_requests, "peak_in_flight": self.peak_in_flight,
            "completed": self.completed,
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


def in_flight_steps(starts: Sequence[float], ends: Sequence[float]) -> list[tuple[float, int]]:
    """The client's in-flight count after each send (``starts``) and close (``ends``), in time
    order: ``(time, count)``. The one sweep that the peak, the tail share
    (:func:`autotune.profile.load.client_tail_share`) and the steady interval
    (:mod:`autotune.bench.steady`) read.

    At one instant an end sorts before a start (-1 < 1): a request that closes as the next is sent
    was not in flight beside it.
    """
    now = 0
    out = []
    for t, step in sorted([(t, 1) for t in starts] + [(t, -1) for t in ends]):
        now += step
        out.append((t, now))
    return out
