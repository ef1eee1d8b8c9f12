"""Unit tests of the benchmark client: SSE decoding, both wire formats, metrics, load shape.

Streams are hand-built byte sequences served through ``httpx.MockTransport``; a fake clock that
the stream advances before each network read makes every timestamp exact. The throughput test
at the end uses a real HTTP server on 127.0.0.1 in a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import textwrap
import time

import httpx
import numpy as np
import pytest

from autotune.bench._sse import SSEDecoder
from autotune.bench.client import build_request, poisson_arrivals, run_benchmark, run_benchmark_sync
from autotune.bench.records import BenchResult, RequestRecord, percentile
from autotune.space.prompts import Prompt

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Script(httpx.AsyncByteStream):
    """Yields byte pieces, advancing the fake clock by ``gaps[i]`` before piece i."""

    def __init__(self, pieces: list[bytes], gaps: list[float] | None = None,
                 clock: FakeClock | None = None, fail_after: int | None = None) -> None:
        self.pieces, self.gaps, self.clock, self.fail_after = pieces, gaps, clock, fail_after

    async def __aiter__(self):
        for i, piece in enumerate(self.pieces):
            if self.fail_after is not None and i == self.fail_after:
                raise httpx.ReadError("connection reset by peer")
            if self.clock is not None and self.gaps is not None:
                self.clock.t += self.gaps[i]
            yield piece


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def generate_events(ks: list[int], *, prompt_tokens: int = 7, spec: dict | None = None,
                    finish: dict | None = None) -> list[bytes]:
    """SGLang /generate chunks (cumulative text and ids) carrying ks[i] new tokens each."""
    out, ids = [], []
    for i, k in enumerate(ks):
        ids += list(range(len(ids), len(ids) + k))
        last = i == len(ks) - 1
        meta = {"id": "r1", "finish_reason": (finish or {"type": "length", "length": len(ids)})
                if last else None, "prompt_tokens": prompt_tokens,
                "completion_tokens": len(ids), "cached_tokens": 0}
        if last:
            meta["e2e_latency"] = 0.5
            meta.update(spec or {})
        out.append(sse({"text": "tok " * len(ids), "output_ids": list(ids), "meta_info": meta}))
    out.append(sse(b"[DONE]"))
    return out


def chat_events(ks: list[int], *, prompt_tokens: int = 9, continuous: bool = True,
                spec: dict | None = None) -> list[bytes]:
    """SGLang /v1/chat/completions chunks for an output arriving ks[i] tokens at a time."""
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta, finish=None, usage=None):
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish, "matched_stop": None}],
                "usage": usage}

    out = [sse(chunk({"role": "assistant", "content": ""}))]
    total = 0
    for k in ks:
        total += k
        usage = ({"prompt_tokens": prompt_tokens, "completion_tokens": total,
                  "total_tokens": prompt_tokens + total} if continuous else None)
        out.append(sse(chunk({"content": "x" * k}, usage=usage)))
    out.append(sse(chunk({}, finish="length")))
    if spec:
        out.append(sse({**base, "choices": [], "usage": None,
                        "sglext": {"spec_tokens_details": spec}}))
    out.append(sse({**base, "choices": [], "usage": {
        "prompt_tokens": prompt_tokens, "completion_tokens": total,
        "total_tokens": prompt_tokens + total}}))
    out.append(sse(b"[DONE]"))
    return out


def prompts(n: int, *, max_tokens: int = 8, chat: bool = False) -> list[Prompt]:
    if chat:
        return [Prompt(id=f"p{i}", max_tokens=max_tokens, ignore_eos=True,
                       messages=(("user", f"question {i}"),)) for i in range(n)]
    return [Prompt(id=f"p{i}", max_tokens=max_tokens, ignore_eos=True, text=f"prompt {i}")
            for i in range(n)]


def serve(handler) -> httpx.MockTransport:
    return httpx.MockTransport(handler)


def run(pieces_for, *, n=1, api="generate", concurrency=1, clock=None, **kw) -> BenchResult:
    """Benchmark n prompts against a transport whose i-th response is pieces_for(i, request)."""
    counter = {"i": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        i = counter["i"]
        counter["i"] += 1
        return pieces_for(i, request)

    return asyncio.run(run_benchmark("http://test", prompts(n, chat=api == "chat"), api=api,
                                     concurrency=concurrency, transport=serve(handler),
                                     clock=clock or FakeClock(), **kw))


def stream_response(pieces, gaps=None, clock=None, **kw) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"},
                          stream=Script(pieces, gaps, clock, **kw))


# ---------------------------------------------------------------------------------------------
# SSE decoding
# ---------------------------------------------------------------------------------------------


def decode_all(pieces: list[bytes]) -> list[tuple[str | None, bytes]]:
    d = SSEDecoder()
    out = []
    for p in pieces:
        out += d.feed(p)
    return out + d.close()


def test_sse_split_at_every_byte_gives_the_same_events():
    stream = (b": ping\n\ndata: {\"a\": 1}\n\ndata: first\ndata: second\n\n"
              b"event: sglext_ids\ndata: {\"x\": 2}\n\ndata:\n\n\n\ndata: [DONE]\n\n")
    whole = decode_all([stream])
    assert whole == [(None, b'{"a": 1}'), (None, b"first\nsecond"), ("sglext_ids", b'{"x": 2}'),
                     (None, b"[DONE]")]
    assert decode_all([stream[i:i + 1] for i in range(len(stream))]) == whole


def test_sse_crlf_and_cr_line_endings_including_crlf_split_across_reads():
    lf = b"data: one\n\n: keep-alive\n\ndata: two\n\n"
    crlf = lf.replace(b"\n", b"\r\n")
    cr = lf.replace(b"\n", b"\r")
    expected = [(None, b"one"), (None, b"two")]
    assert decode_all([crlf]) == expected
    assert decode_all([cr]) == expected
    cut = crlf.index(b"\r\n") + 1  # between CR and LF
    assert decode_all([crlf[:cut], crlf[cut:]]) == expected
    rng = random.Random(3)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(crlf)), 4))
        parts = [crlf[a:b] for a, b in zip([0, *cuts], [*cuts, len(crlf)], strict=True)]
        assert decode_all(parts) == expected


def test_sse_event_without_final_blank_line_is_delivered_at_close():
    d = SSEDecoder()
    assert d.feed(b"data: {\"last\": true}") == []
    assert d.close() == [(None, b'{"last": true}')]


# ---------------------------------------------------------------------------------------------
# /generate stream
# ---------------------------------------------------------------------------------------------


def test_generate_multi_token_chunks_timing_and_counts():
    clock = FakeClock(100.0)
    ks = [1, 3, 1, 4]  # tokens per chunk, as a speculative server sends them
    gaps = [0.050, 0.030, 0.010, 0.040, 0.001]  # before each piece; the last piece is [DONE]
    spec = {"spec_verify_ct": 3, "spec_accept_length": 3.0, "spec_accept_rate": 0.6,
            "spec_num_correct_drafts": 5, "spec_num_proposed_drafts": 9,
            "spec_correct_drafts_histogram": [0, 1, 0, 2]}
    res = run(lambda i, req: stream_response(generate_events(ks, spec=spec), gaps, clock),
              clock=clock)
    (rec,) = res.records
    assert rec.ok and rec.finish_reason == "length"
    assert rec.chunk_tokens == [1, 4, 5, 9]
    assert rec.completion_tokens == 9 and rec.prompt_tokens == 7
    assert rec.ttft_s == pytest.approx(0.050)
    assert rec.e2e_s == pytest.approx(0.131)
    # 8 tokens after the first, over 0.03 + 0.01 + 0.04 s
    assert rec.decode_tok_s == pytest.approx(8 / 0.080)
    assert rec.itl_samples() == [pytest.approx((0.010, 3)), pytest.approx((0.010, 1)),
                                 pytest.approx((0.010, 4))]
    assert rec.spec == spec
    assert res.accept_length == pytest.approx(9 / 3)
    assert res.itl_ms[50] == pytest.approx(10.0) and res.itl_ms[99] == pytest.approx(10.0)
    assert res.output_tok_s == pytest.approx(9 / 0.131)


def test_itl_is_not_biased_by_chunking():
    """The same token timeline sent one token per chunk or in bursts gives the same ITL."""
    token_gap = 0.012

    def itl_for(ks):
        clock = FakeClock()
        gaps = [0.1] + [token_gap * k for k in ks[1:]] + [0.0]
        res = run(lambda i, req: stream_response(generate_events(ks), gaps, clock), clock=clock)
        return res.itl_ms, res.records[0].decode_tok_s

    fine_itl, fine_dec = itl_for([1] * 13)
    coarse_itl, coarse_dec = itl_for([1, 4, 2, 6])
    for q in (50, 90, 99):
        assert fine_itl[q] == pytest.approx(token_gap * 1e3)
        assert coarse_itl[q] == pytest.approx(fine_itl[q])
    assert coarse_dec == pytest.approx(fine_dec)


def test_generate_stream_split_across_reads_with_crlf_and_pings():
    events = generate_events([1, 2, 2])
    blob = b": ping\r\n\r\n".join(e.replace(b"\n", b"\r\n") for e in events)
    rng = random.Random(0)
    cuts = sorted(rng.sample(range(1, len(blob)), 25))
    pieces = [blob[a:b] for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=True)]
    res = run(lambda i, req: stream_response(pieces))
    (rec,) = res.records
    assert rec.ok, rec.error
    assert rec.chunk_tokens == [1, 3, 5] and rec.completion_tokens == 5


def test_generate_error_mid_stream_is_failed_and_not_counted():
    clock = FakeClock()

    def respond(i, req):
        if i == 1:
            events = generate_events([1, 1, 1])[:2] + [
                sse({"error": {"message": "KV cache exhausted", "type": "invalid_request_error",
                               "code": 400, "retryable": False}}), sse(b"[DONE]")]
        else:
            events = generate_events([1, 1, 1])
        return stream_response(events, [0.01] * len(events), clock)

    res = run(respond, n=3, clock=clock)
    assert (res.completed, res.failed) == (2, 1)
    bad = res.records[1]
    assert not bad.ok and "KV cache exhausted" in bad.error
    assert bad.ttft_s is None and bad.e2e_s is None and bad.itl_samples() == []
    assert res.total_completion_tokens == 6
    assert res.errors == {bad.error: 1}


def test_stream_that_stops_before_the_final_chunk_is_failed():
    res = run(lambda i, req: stream_response(generate_events([1, 1, 1])[:2]))
    assert res.failed == 1 and "before the final chunk" in res.records[0].error


def test_connection_reset_mid_stream_is_failed():
    res = run(lambda i, req: stream_response(generate_events([1, 1, 1]), fail_after=2))
    assert res.failed == 1 and "ReadError" in res.records[0].error


def test_abort_finish_reason_is_failed():
    events = generate_events([1, 1], finish={"type": "abort", "message": "aborted by user"})
    res = run(lambda i, req: stream_response(events))
    assert res.failed == 1 and "aborted by user" in res.records[0].error


def test_http_error_status_is_failed():
    res = run(lambda i, req: httpx.Response(503, text="server overloaded"))
    rec = res.records[0]
    assert rec.http_status == 503 and rec.error.startswith("HTTP 503") and "overloaded" in rec.error


def test_connect_error_is_failed_and_nothing_completed_means_none():
    def refuse(i, req):
        raise httpx.ConnectError("connection refused")

    res = run(refuse, n=2)
    assert (res.completed, res.failed) == (0, 2)
    d = res.to_dict()
    for key in ("output_tok_s", "total_completion_tokens", "decode_tok_s_p50", "ttft_ms_p50",
                "itl_ms_p90", "e2e_ms_p99", "accept_length", "total_prompt_tokens"):
        assert d[key] is None, key
    assert d["duration_s"] is not None  # the window existed, it just produced nothing


def test_request_timeout_is_failed():
    class Slow(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield generate_events([1, 1])[0]
            await asyncio.sleep(5)
            yield b""

    res = asyncio.run(run_benchmark(
        "http://test", prompts(1), api="generate", concurrency=1, request_timeout_s=0.1,
        transport=serve(lambda r: httpx.Response(200, stream=Slow()))))
    assert res.failed == 1 and "request_timeout_s" in res.records[0].error


def test_malformed_chunk_is_failed():
    res = run(lambda i, req: stream_response([b"data: {not json\n\n", sse(b"[DONE]")]))
    assert res.failed == 1 and "malformed" in res.records[0].error


def test_no_spec_fields_means_accept_length_none():
    res = run(lambda i, req: stream_response(generate_events([1, 1, 1])))
    assert res.completed == 1 and res.accept_length is None and res.spec_verify_ct is None


# ---------------------------------------------------------------------------------------------
# chat stream
# ---------------------------------------------------------------------------------------------


def test_chat_stream_with_continuous_usage_and_spec_details():
    clock = FakeClock()
    spec = {"spec_accept_rate": 0.5, "spec_accept_length": 2.0, "spec_cap_length": 0.0,
            "spec_block_accept_length": 0.0, "spec_num_correct_drafts": 3,
            "spec_num_proposed_drafts": 6, "spec_verify_ct": 3,
            "spec_correct_drafts_histogram": [1, 1, 1], "spec_cap_lens_histogram": []}
    events = chat_events([1, 2, 3], spec=spec)
    # role, 3 content chunks, finish, sglext, usage, DONE
    gaps = [0.02, 0.01, 0.02, 0.03, 0.001, 0.001, 0.001, 0.001]
    seen = {}

    def respond(i, req):
        seen["body"] = json.loads(req.content)
        seen["path"] = req.url.path
        return stream_response(events, gaps, clock)

    res = run(respond, api="chat", clock=clock)
    (rec,) = res.records
    assert rec.ok, rec.error
    assert seen["path"] == "/v1/chat/completions"
    assert seen["body"]["stream_options"] == {"include_usage": True,
                                              "continuous_usage_stats": True}
    assert rec.chunk_tokens == [1, 3, 6] and rec.completion_tokens == 6
    assert rec.prompt_tokens == 9 and rec.finish_reason == "length"
    assert rec.ttft_s == pytest.approx(0.03)  # the role chunk carries no token
    assert rec.last_token - rec.start == pytest.approx(0.08)  # usage chunk is not a token
    assert rec.itl_samples() == [pytest.approx((0.01, 2)), pytest.approx((0.01, 3))]
    assert rec.spec["spec_verify_ct"] == 3 and res.accept_length == pytest.approx(2.0)


def test_chat_without_per_chunk_usage_has_no_itl_but_totals():
    res = run(lambda i, req: stream_response(chat_events([1, 2, 3], continuous=False)),
              api="chat")
    (rec,) = res.records
    assert rec.ok and rec.completion_tokens == 6 and rec.chunk_tokens is None
    assert len(rec.chunk_times) == 3
    assert rec.itl_samples() == [] and res.itl_ms[50] is None


def test_chat_without_usage_at_all_is_failed_not_zero():
    events = [e for e in chat_events([1, 1], continuous=False) if b'"choices": []' not in e]
    res = run(lambda i, req: stream_response(events), api="chat")
    assert res.failed == 1 and "no completion token count" in res.records[0].error
    assert res.output_tok_s is None


def test_chat_error_chunk_is_failed():
    events = chat_events([1, 1])[:2] + [sse({"error": {
        "object": "error", "message": "boom", "type": "InternalServerError", "code": 500}}),
        sse(b"[DONE]")]
    res = run(lambda i, req: stream_response(events), api="chat")
    assert res.failed == 1 and "boom" in res.records[0].error


# ---------------------------------------------------------------------------------------------
# request bodies
# ---------------------------------------------------------------------------------------------


def test_generate_body_matches_sglang_contract():
    p = Prompt(id="a", max_tokens=32, ignore_eos=True, text="Hello")
    body = build_request(p, api="generate")
    assert body == {"text": "Hello", "sampling_params": {"max_new_tokens": 32,
                                                         "ignore_eos": True, "temperature": 0},
                    "stream": True}
    try:
        from sglang.srt.entrypoints.api_contract import generate_contract_error
    except Exception:  # noqa: BLE001 - sglang is optional here
        pytest.skip("sglang not importable")
    assert generate_contract_error(body) is None


def test_chat_body_is_accepted_by_sglang_request_model():
    p = Prompt(id="a", max_tokens=16, ignore_eos=False,
               messages=(("system", "be brief"), ("user", "hi")))
    body = build_request(p, api="chat", model="m")
    assert body["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "hi"}]
    assert body["max_completion_tokens"] == 16 and body["ignore_eos"] is False
    try:
        from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    except Exception:  # noqa: BLE001
        pytest.skip("sglang not importable")
    req = ChatCompletionRequest.model_validate(body)
    assert req.stream_options.continuous_usage_stats and req.return_spec_tokens_details


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="concurrency"):
        asyncio.run(run_benchmark("http://x", prompts(1)))
    with pytest.raises(ValueError, match="api"):
        asyncio.run(run_benchmark("http://x", prompts(1), api="completions", concurrency=1))
    with pytest.raises(ValueError, match="request_rate"):
        asyncio.run(run_benchmark("http://x", prompts(1), request_rate=0))


# ---------------------------------------------------------------------------------------------
# load shape
# ---------------------------------------------------------------------------------------------


def test_concurrency_limit_is_respected_and_reached():
    state = {"now": 0, "max": 0}

    class Tracked(httpx.AsyncByteStream):
        async def __aiter__(self):
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
            try:
                for piece in generate_events([1, 1]):
                    await asyncio.sleep(0.002)
                    yield piece
            finally:
                state["now"] -= 1

    res = asyncio.run(run_benchmark(
        "http://t", prompts(24), api="generate", concurrency=4,
        transport=serve(lambda r: httpx.Response(200, stream=Tracked()))))
    assert res.completed == 24
    assert state["max"] == 4
    assert sorted(r.index for r in res.records) == list(range(24))


def test_poisson_arrivals_are_seeded():
    a = poisson_arrivals(2000, 50.0, seed=1)
    assert a == poisson_arrivals(2000, 50.0, seed=1)
    assert a != poisson_arrivals(2000, 50.0, seed=2)
    assert a[0] == 0.0 and all(x <= y for x, y in zip(a, a[1:], strict=False))
    assert a[-1] / 1999 == pytest.approx(1 / 50.0, rel=0.1)


def test_request_rate_run_follows_the_schedule():
    starts = []

    def handler(request):
        starts.append(time.perf_counter())
        return httpx.Response(200, stream=Script(generate_events([1])))

    n, rate = 12, 100.0
    t0 = time.perf_counter()
    res = asyncio.run(run_benchmark("http://t", prompts(n), request_rate=rate, seed=5,
                                    transport=serve(handler)))
    assert res.completed == n
    expected = poisson_arrivals(n, rate, seed=5)
    for got, want in zip(sorted(starts), expected, strict=True):
        assert got - t0 >= want - 1e-3  # never early
    assert sorted(starts)[-1] - t0 < expected[-1] + 0.5


def test_max_duration_stops_new_requests_and_lets_started_ones_finish():
    class SlowStream(httpx.AsyncByteStream):
        async def __aiter__(self):
            for piece in generate_events([1, 1]):
                await asyncio.sleep(0.02)
                yield piece

    res = asyncio.run(run_benchmark(
        "http://t", prompts(50), concurrency=1, max_duration_s=0.15,
        transport=serve(lambda r: httpx.Response(200, stream=SlowStream()))))
    assert res.failed == 0
    assert 1 <= res.completed < 50
    assert res.not_started == 50 - res.completed
    assert res.num_requests == res.completed


# ---------------------------------------------------------------------------------------------
# statistics and export
# ---------------------------------------------------------------------------------------------


def test_percentile_matches_numpy_with_and_without_weights():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 30)
        vals = [rng.uniform(0, 100) for _ in range(n)]
        wts = [rng.randint(1, 5) for _ in range(n)]
        q = rng.choice([0, 1, 37.5, 50, 90, 99, 100])
        assert percentile(vals, q) == pytest.approx(float(np.percentile(vals, q)))
        assert percentile(vals, q, wts) == pytest.approx(
            float(np.percentile(np.repeat(vals, wts), q)))
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_decode_tok_s_unknown_for_single_token_outputs():
    rec = RequestRecord(index=0, prompt_id="a", start=0.0, end=0.2, chunk_times=[0.1],
                        chunk_tokens=[1], completion_tokens=1, finish_reason="length")
    assert rec.decode_tok_s is None and rec.itl_samples() == []
    res = BenchResult.from_records([rec], api="generate")
    assert res.decode_tok_s_p50 is None and res.itl_ms[50] is None
    assert res.output_tok_s == pytest.approx(1 / 0.2)


def test_to_dict_and_records_jsonl(tmp_path):
    clock = FakeClock(50.0)
    res = run(lambda i, req: stream_response(generate_events([1, 2]), [0.1, 0.1, 0.0], clock),
              n=2, clock=clock)
    d = res.to_dict()
    json.dumps(d)  # JSON-ready
    assert d["completed"] == 2 and d["ttft_ms_p50"] == pytest.approx(100.0)
    assert d["window_end_unix"] - d["window_start_unix"] == pytest.approx(d["duration_s"])
    assert abs(d["window_start_unix"] - time.time()) < 60
    path = res.write_records(tmp_path / "records.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1]
    assert rows[0]["chunk_tokens"] == [1, 3] and rows[0]["ok"] is True


def test_sync_wrapper_and_raw_capture():
    pieces = generate_events([2, 2])
    res = run_benchmark_sync("http://t", prompts(1), concurrency=1, keep_raw=True,
                             transport=serve(lambda r: stream_response(pieces)))
    rec = res.records[0]
    assert rec.ok and b"".join(chunk for _, chunk in rec.raw) == b"".join(pieces)


# ---------------------------------------------------------------------------------------------
# throughput against a real local HTTP server
# ---------------------------------------------------------------------------------------------

_FAST_SERVER = textwrap.dedent(r'''
    import asyncio, json, sys
    TOKENS, PER_CHUNK = int(sys.argv[1]), int(sys.argv[2])

    def body():
        parts, ids = [], []
        for start in range(0, TOKENS, PER_CHUNK):
            ids.extend(range(start, min(start + PER_CHUNK, TOKENS)))
            fin = {"type": "length", "length": len(ids)} if len(ids) == TOKENS else None
            meta = {"id": "x", "finish_reason": fin, "prompt_tokens": 10,
                    "completion_tokens": len(ids), "cached_tokens": 0}
            parts.append(b"data: " + json.dumps({"text": "ab " * len(ids), "output_ids": ids,
                                                 "meta_info": meta}).encode() + b"\n\n")
        parts.append(b"data: [DONE]\n\n")
        return parts

    PARTS = body()

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                for p in PARTS:
                    writer.write(b"%x\r\n%s\r\n" % (len(p), p))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())
''')


def test_client_takes_in_every_chunk_of_48_fast_streams():
    """Every chunk of 48 concurrent streams is parsed and counted. How many tokens per CPU second
    the client takes in is a benchmark figure, not a test (``python -m benchmarks.client_ceiling``:
    PASS at 20,000), since a loaded box moves it."""
    tokens, per_chunk = 512, 4
    proc = subprocess.Popen([sys.executable, "-c", _FAST_SERVER, str(tokens), str(per_chunk)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        n = 48
        res = run_benchmark_sync(f"http://127.0.0.1:{port}", prompts(n, max_tokens=tokens),
                                 concurrency=8)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert res.completed == n, res.errors
    assert res.total_completion_tokens == n * tokens
    assert all(r.chunk_tokens[-1] == tokens and len(r.chunk_tokens) == tokens // per_chunk
               for r in res.records)


def test_peak_in_flight_counts_overlapping_records_and_none_when_unknown():
    def rec(i: int, start: float, end: float | None) -> RequestRecord:
        return RequestRecord(index=i, prompt_id=f"p{i}", start=start, end=end)

    # 0-3 and 1-2 overlap; 3-4 is sent as 0-3 closes, so it never runs beside it.
    peak = BenchResult.from_records([rec(0, 0.0, 3.0), rec(1, 1.0, 2.0), rec(2, 3.0, 4.0)],
                                    api="generate")
    assert peak.peak_in_flight == 2 and peak.to_dict()["peak_in_flight"] == 2
    assert BenchResult.from_records([rec(0, 0.0, 1.0), rec(1, 1.0, 2.0)],
                                    api="generate").peak_in_flight == 1
    assert BenchResult.from_records([rec(0, 0.0, None)], api="generate").peak_in_flight is None
    assert BenchResult.from_records([], api="generate").peak_in_flight is None


def test_pool_work_per_request_does_not_grow_with_concurrency(monkeypatch):
    """Issue 34: httpcore 1.0's pool checks every connection, and for each idle one every connection
    again, on each send and close, on the event loop between chunks. One pool of 32 connections did
    thousands of checks per request (0.65x bench_serving's tok/s at c64 on one core); one connection
    per slot does a few, at any concurrency. Counted, not timed, so a loaded box cannot move it; each
    slot keeps its one connection alive, so a run opens as many connections as it has slots."""
    import httpcore

    checks = {"idle": 0, "opened": 0}
    is_idle, init = httpcore.AsyncHTTPConnection.is_idle, httpcore.AsyncHTTPConnection.__init__

    def counted_is_idle(self):
        checks["idle"] += 1
        return is_idle(self)

    def counted_init(self, *args, **kwargs):
        checks["opened"] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(httpcore.AsyncHTTPConnection, "is_idle", counted_is_idle)
    monkeypatch.setattr(httpcore.AsyncHTTPConnection, "__init__", counted_init)
    proc = subprocess.Popen([sys.executable, "-c", _FAST_SERVER, "16", "4"], stdout=subprocess.PIPE, text=True)
    per_request = {}
    try:
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
        for concurrency in (2, 32):
            checks.update(idle=0, opened=0)
            n = 3 * concurrency
            res = run_benchmark_sync(url, prompts(n, max_tokens=16), concurrency=concurrency)
            assert res.completed == n, res.errors
            assert checks["opened"] == concurrency
            per_request[concurrency] = checks["idle"] / n
        # Poisson arrivals capped at 3: slots' clients are made as needed and handed on, never more than 3.
        checks.update(opened=0)
        res = run_benchmark_sync(url, prompts(12, max_tokens=16), request_rate=500.0, concurrency=3)
        assert res.completed == 12, res.errors
        assert 1 <= checks["opened"] <= 3
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert per_request[32] <= 2 * per_request[2] + 2, per_request
