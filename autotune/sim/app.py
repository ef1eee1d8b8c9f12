"""The emulator's HTTP API: SGLang 0.5.23's endpoints and response shapes over ``SimEngine``.

Endpoints (field names as in ``sglang/srt/entrypoints/http_server.py`` and ``openai/*.py``):
``/health``, ``/health_generate``, ``/ready``, ``/model_info``, ``/get_model_info``, ``/server_info``,
``/get_server_info``, ``/flush_cache``, ``/generate``, ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions`` and, only with ``--enable-metrics``, ``/metrics``.

``/generate`` streams like SGLang: without ``--incremental-streaming-output`` every SSE event carries
the *cumulative* ``text`` and ``output_ids``; with it, only the new part. ``meta_info`` counts are
always cumulative. The OpenAI endpoints stream deltas. Not emulated (answered 400): batches of
prompts in one streaming request, ``n > 1``, logprobs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, NoReturn

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from autotune.sim import tokens
from autotune.sim.faults import FaultPlan
from autotune.sim.metrics_text import CONTENT_TYPE, MetricsContext, RequestCounters, render_metrics

try:
    import orjson

    _dumps: Callable[[Any], bytes] = orjson.dumps
    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - orjson comes with the sglang parser deps
    import json

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads

logger = logging.getLogger("autotune.sim")

DEFAULT_CONTEXT_LEN = 262144
DEFAULT_CHAT_MAX_TOKENS = 4096  # stands in for "until EOS or the context is full"
_HEALTH_TIMEOUT_S = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
_TRUE = ("true", "1", "yes", "y")


@dataclass
class SimState:
    """Everything the endpoints share. Built by ``autotune.sim.server``.

    Args:
        args: Resolved ``ServerArgs`` fields.
        argv: The command line (for ``launch_command``).
        model: The ``PerformanceModel``.
        engine: The ``SimEngine``.
        faults: Faults to inject.
        die: Ends the process like a crashing scheduler, given the exception line.
        sim_info: The ``autotune_sim`` object of ``/server_info`` (profile, GPU ids, seed...).
        version: Reported as ``version``.
        device_timer: Whether ``SGLANG_ENABLE_METRICS_DEVICE_TIMER`` is on.
        startup: Coroutine run as a task once the HTTP server is up; it sets ``ready``.
    """

    args: dict[str, Any]
    argv: list[str]
    model: Any
    engine: Any
    faults: FaultPlan
    die: Callable[[str], NoReturn]
    sim_info: dict[str, Any]
    version: str
    device_timer: bool = False
    startup: Callable[[SimState], Awaitable[None]] | None = None
    ready: bool = False
    start_time: float = field(default_factory=time.time)
    counters: RequestCounters = field(default_factory=RequestCounters)
    num_client_requests: int = 0
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def model_name(self) -> str:
        return str(self.args.get("served_model_name") or self.args.get("model_path") or "default")

    @property
    def context_len(self) -> int:
        return int(self.args.get("context_length") or DEFAULT_CONTEXT_LEN)

    @property
    def spec_enabled(self) -> bool:
        return bool(self.args.get("speculative_algorithm"))


@dataclass
class GenRequest:
    """One generation through the engine."""

    prompt: str
    prompt_tokens: int
    max_new_tokens: int
    ignore_eos: bool = False
    streaming: bool = False
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    log_metrics: bool = True   # counted in /metrics (health checks are not)
    client: bool = True        # a client request: faults apply (not health checks, not warm-up)
    arrival: float = field(default_factory=time.perf_counter)


class _BadRequest(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


class _JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return _dumps(content)


def _sglang_error(message: str, status: int = 400) -> _BadRequest:
    """The native API's error shape (``_create_error_response``)."""
    return _BadRequest(_JSON({"error": {"message": message}}, status_code=status))


def _openai_error(message: str, status: int = 400, err_type: str = "BadRequestError") -> _BadRequest:
    """The OpenAI API's ``ErrorResponse`` shape."""
    return _BadRequest(_JSON({"object": "error", "message": message, "type": err_type,
                              "param": None, "code": status}, status_code=status))


def _validation_error(message: str) -> _BadRequest:
    """FastAPI's request-validation failure, which SGLang turns into a 400 ``ErrorResponse``."""
    return _BadRequest(_JSON({"object": "error", "message": message, "type": "Bad Request",
                              "param": None, "code": 400}, status_code=400))


async def _json_body(request: Request, *, require_json_type: bool) -> dict[str, Any]:
    if require_json_type:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise _validation_error("[{'loc': ['header', 'content-type'], 'msg': 'Unsupported Media "
                                    "Type: Only 'application/json' is allowed', 'type': 'value_error'}]")
    raw = await request.body()
    try:
        body = _loads(raw) if raw else None
    except ValueError as exc:
        raise _validation_error(f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise _validation_error("the request body must be a JSON object")
    return body


def _int_field(obj: dict[str, Any], key: str, default: int | None, *, where: str,
               error: Callable[[str], _BadRequest], minimum: int = 0) -> int | None:
    value = obj.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{where}{key} must be an integer, got {value!r}")
    if value < minimum:
        raise error(f"{key} must be at least {minimum}, got {value}.")
    return value


def _check_sampling(params: dict[str, Any], error: Callable[[str], _BadRequest]) -> None:
    """SGLang's ``SamplingParams.verify`` for the fields a benchmark sends."""
    def num(key: str, default: float) -> float:
        v = params.get(key, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise error(f"{key} must be a number, got {v!r}")
        return float(v)

    t = num("temperature", 1.0)
    if not math.isfinite(t) or t < 0:
        raise error(f"temperature must be a non-negative finite number, got {t}.")
    p = num("top_p", 1.0)
    if not 0.0 < p <= 1.0:
        raise error(f"top_p must be in (0, 1], got {p}.")
    if "ignore_eos" in params and not isinstance(params["ignore_eos"], bool):
        raise error(f"ignore_eos must be a boolean, got {params['ignore_eos']!r}")


def _check_length(state: SimState, req: GenRequest) -> None:
    """The tokenizer manager's context-length checks."""
    if req.prompt_tokens >= state.context_len:
        raise ValueError(f"The input ({req.prompt_tokens} tokens) is longer than the model's context "
                         f"length ({state.context_len} tokens).")
    if req.max_new_tokens + req.prompt_tokens > state.context_len:
        raise ValueError(
            f"Requested token count exceeds the model's maximum context length of {state.context_len} "
            f"tokens. You requested a total of {req.max_new_tokens + req.prompt_tokens} tokens: "
            f"{req.prompt_tokens} tokens from the input messages and {req.max_new_tokens} tokens for "
            "the completion. Please reduce the number of tokens in the input messages or the "
            "completion to fit within the limit.")


def _not_ready() -> Response:
    return _JSON({"error": {"message": "The server is not ready: it is still starting up."}},
                 status_code=503)


# ----- the engine driver ---------------------------------------------------------------------------
async def drive(state: SimState, req: GenRequest) -> AsyncIterator[Any]:
    """Run one request through the engine, applying faults and counting it when it finishes.

    Yields the engine's chunks (``token_ids``, ``completion_tokens``, ``finished``,
    ``finish_reason``, ``meta``).
    """
    crash_here = hang_at = None
    if req.client:
        state.num_client_requests += 1
        limit = state.faults.crash_after_requests
        crash_here = limit is not None and state.num_client_requests > limit
        hang_at = state.faults.hang_mid_stream
    if req.max_new_tokens == 0:
        chunks: Any = _empty_chunks()
    else:
        chunks = state.engine.generate(prompt=req.prompt, prompt_tokens=req.prompt_tokens,
                                       max_new_tokens=req.max_new_tokens, ignore_eos=req.ignore_eos)
    try:
        while True:
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            if chunk.finished and req.log_metrics:
                state.counters.observe(streaming=req.streaming, prompt_tokens=req.prompt_tokens,
                                       completion_tokens=chunk.completion_tokens,
                                       spec_verify_ct=(chunk.meta or {}).get("spec_verify_ct"))
            yield chunk
            if crash_here:
                state.die(f"RuntimeError: autotune sim fault crash_after_requests:"
                          f"{state.faults.crash_after_requests} (request {state.num_client_requests})")
            if hang_at is not None and not chunk.finished and chunk.completion_tokens >= hang_at:
                await chunks.aclose()
                logger.warning("fault hang_mid_stream:%d: request %s stops after %d tokens",
                               hang_at, req.rid, chunk.completion_tokens)
                await asyncio.Event().wait()
    finally:
        await chunks.aclose()


async def _empty_chunks() -> AsyncIterator[Any]:
    yield SimpleNamespace(token_ids=[], completion_tokens=0, finished=True, finish_reason="length",
                          meta={})


def _finish_json(chunk: Any, max_new_tokens: int) -> dict[str, Any] | None:
    if not chunk.finished:
        return None
    if chunk.finish_reason == "stop":
        return {"type": "stop", "matched": tokens.EOS_TOKEN_ID}
    return {"type": "length", "length": max_new_tokens}


def _meta_info(state: SimState, req: GenRequest, chunk: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": _finish_json(chunk, req.max_new_tokens),
        "prompt_tokens": req.prompt_tokens,
        "weight_version": state.args.get("weight_version") or "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": chunk.completion_tokens,
        "cached_tokens": 0,
    }
    if chunk.finished:
        meta["e2e_latency"] = time.perf_counter() - req.arrival
        if state.spec_enabled and chunk.meta:
            meta.update(chunk.meta)
        meta["response_sent_to_client_ts"] = time.time()
    return meta


# ----- /generate -----------------------------------------------------------------------------------
def _parse_generate(state: SimState, body: dict[str, Any]) -> tuple[list[GenRequest], bool, bool]:
    """Returns (requests, is_batch, stream)."""
    text, input_ids = body.get("text"), body.get("input_ids")
    if text is None and input_ids is None:
        raise _sglang_error("Either text, input_ids or input_embeds should be provided.")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _BadRequest(_JSON({"error": f"stream: expected a boolean, got {stream!r}"}, status_code=400))
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise _BadRequest(_JSON({"error": "sampling_params: expected an object (a batch of sampling "
                                          "params is not emulated)"}, status_code=400))
    max_new = _int_field(params, "max_new_tokens", 128, where="sampling_params.",
                         error=_sglang_error, minimum=0)
    _check_sampling(params, _sglang_error)
    ignore_eos = bool(params.get("ignore_eos", False))
    prompts: list[tuple[str, int]] = []
    is_batch = False
    if text is not None:
        if isinstance(text, str):
            prompts = [(text, tokens.count_tokens(text))]
        elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            is_batch = True
            prompts = [(t, tokens.count_tokens(t)) for t in text]
        else:
            raise _BadRequest(_JSON({"error": "text: expected a string or a non-empty list of strings"},
                                    status_code=400))
    else:
        if isinstance(input_ids, list) and input_ids and all(
                isinstance(i, int) and not isinstance(i, bool) for i in input_ids):
            prompts = [(tokens.prompt_text_from_ids(input_ids), len(input_ids))]
        elif isinstance(input_ids, list) and input_ids and all(
                isinstance(x, list) and x and all(isinstance(i, int) for i in x) for x in input_ids):
            is_batch = True
            prompts = [(tokens.prompt_text_from_ids(x), len(x)) for x in input_ids]
        else:
            raise _BadRequest(_JSON({"error": "input_ids: expected a non-empty list of token ids or "
                                              "a list of such lists"}, status_code=400))
    if is_batch and stream:
        raise _sglang_error("autotune sim: streaming a batch of prompts in one request is not emulated")
    rid = body.get("rid") if isinstance(body.get("rid"), str) and not is_batch else None
    reqs = []
    for prompt, n in prompts:
        req = GenRequest(prompt=prompt, prompt_tokens=n, max_new_tokens=max_new or 0,
                         ignore_eos=ignore_eos, streaming=stream)
        if rid:
            req.rid = rid
        try:
            _check_length(state, req)
        except ValueError as exc:
            raise _sglang_error(str(exc)) from None
        reqs.append(req)
    return reqs, is_batch, stream


async def _generate_one(state: SimState, req: GenRequest) -> dict[str, Any]:
    ids: list[int] = []
    last = None
    async for chunk in drive(state, req):
        ids.extend(chunk.token_ids)
        last = chunk
    if last is None:  # the engine ended without a final chunk: report what we know
        last = SimpleNamespace(token_ids=[], completion_tokens=len(ids), finished=True,
                               finish_reason="length", meta={})
    return {"text": tokens.detokenize(ids), "output_ids": ids, "meta_info": _meta_info(state, req, last)}


async def _generate_stream(state: SimState, req: GenRequest) -> AsyncIterator[bytes]:
    incremental = bool(state.args.get("incremental_streaming_output"))
    ids: list[int] = []
    text = ""
    detok = tokens.detokenize
    async for chunk in drive(state, req):
        new_ids = chunk.token_ids
        piece = detok(new_ids)
        if incremental:
            out = {"text": piece, "output_ids": new_ids, "meta_info": _meta_info(state, req, chunk)}
        else:
            ids.extend(new_ids)
            text += piece
            out = {"text": text, "output_ids": ids, "meta_info": _meta_info(state, req, chunk)}
        yield b"data: " + _dumps(out) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def generate(request: Request) -> Response:
    state: SimState = request.app.state.sim
    try:
        body = await _json_body(request, require_json_type=False)
        if not state.ready:
            return _not_ready()
        reqs, is_batch, stream = _parse_generate(state, body)
    except _BadRequest as exc:
        return exc.response
    if stream:
        return StreamingResponse(_generate_stream(state, reqs[0]), media_type="text/event-stream")
    if is_batch:
        return _JSON(list(await asyncio.gather(*(_generate_one(state, r) for r in reqs))))
    return _JSON(await _generate_one(state, reqs[0]))


# ----- OpenAI-compatible API -----------------------------------------------------------------------
def _stream_options(body: dict[str, Any]) -> tuple[bool, bool]:
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise _validation_error("stream_options: expected an object")
    return bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats"))


def _usage(prompt_tokens: int, completion_tokens: int, *, compact: bool = False) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens,
                             "total_tokens": prompt_tokens + completion_tokens,
                             "completion_tokens": completion_tokens}
    if not compact:
        usage["prompt_tokens_details"] = None
    usage["reasoning_tokens"] = 0
    if not compact:
        usage["completion_tokens_details"] = None
    return usage


def _openai_common(state: SimState, body: dict[str, Any], prompt: str, prompt_tokens: int,
                   max_tokens: int | None) -> GenRequest:
    if body.get("n", 1) not in (1, None):
        raise _openai_error("autotune sim: n > 1 is not emulated")
    if body.get("logprobs") not in (None, False):
        raise _openai_error("autotune sim: logprobs are not emulated")
    _check_sampling(body, _openai_error)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _validation_error(f"stream: Input should be a valid boolean, got {stream!r}")
    req = GenRequest(prompt=prompt, prompt_tokens=prompt_tokens,
                     max_new_tokens=DEFAULT_CHAT_MAX_TOKENS if max_tokens is None else max_tokens,
                     ignore_eos=bool(body.get("ignore_eos", False)), streaming=stream)
    if max_tokens is None:
        req.max_new_tokens = max(0, min(req.max_new_tokens, state.context_len - prompt_tokens))
    try:
        _check_length(state, req)
    except ValueError as exc:
        raise _openai_error(str(exc)) from None
    return req


def _finish_type(chunk: Any) -> tuple[str | None, int | None]:
    if not chunk.finished:
        return None, None
    if chunk.finish_reason == "stop":
        return "stop", tokens.EOS_TOKEN_ID
    return "length", None


async def completions(request: Request) -> Response:
    state: SimState = request.app.state.sim
    try:
        body = await _json_body(request, require_json_type=True)
        if not state.ready:
            return _not_ready()
        prompt = body.get("prompt")
        if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
            raise _openai_error("Prompt cannot be empty")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            text, n = prompt, tokens.count_tokens(prompt)
        elif isinstance(prompt, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            text, n = tokens.prompt_text_from_ids(prompt), len(prompt)
        else:
            raise _openai_error("autotune sim: a batch of prompts in one request is not emulated")
        max_tokens = _int_field(body, "max_tokens", 16, where="", error=_openai_error)
        req = _openai_common(state, body, text, n, max_tokens)
        include_usage, continuous = _stream_options(body)
    except _BadRequest as exc:
        return exc.response
    model = body.get("model") or "default"
    created = int(time.time())
    if req.streaming:
        return StreamingResponse(_completion_stream(state, req, model, created, include_usage, continuous),
                                 media_type="text/event-stream")
    ids: list[int] = []
    last = None
    async for chunk in drive(state, req):
        ids.extend(chunk.token_ids)
        last = chunk
    finish, matched = _finish_type(last) if last is not None else ("length", None)
    return _JSON({
        "id": req.rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": tokens.detokenize(ids), "logprobs": None,
                     "finish_reason": finish, "matched_stop": matched}],
        "usage": _usage(req.prompt_tokens, len(ids)), "metadata": None})


async def _completion_stream(state: SimState, req: GenRequest, model: str, created: int,
                             include_usage: bool, continuous: bool) -> AsyncIterator[bytes]:
    completion_tokens = 0
    async for chunk in drive(state, req):
        completion_tokens = chunk.completion_tokens
        finish, matched = _finish_type(chunk)
        out = {"id": req.rid, "object": "text_completion", "created": created, "model": model,
               "choices": [{"index": 0, "text": tokens.detokenize(chunk.token_ids), "logprobs": None,
                            "finish_reason": finish, "matched_stop": matched}],
               "usage": _usage(req.prompt_tokens, completion_tokens) if continuous else None}
        yield b"data: " + _dumps(out) + b"\n\n"
    if include_usage:
        yield b"data: " + _dumps({"id": req.rid, "object": "text_completion", "created": created,
                                  "model": model, "choices": [],
                                  "usage": _usage(req.prompt_tokens, completion_tokens, compact=True)}
                                 ) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def chat_completions(request: Request) -> Response:
    state: SimState = request.app.state.sim
    try:
        body = await _json_body(request, require_json_type=True)
        if not state.ready:
            return _not_ready()
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise _validation_error("messages: Field required (a list of messages)")
        if not messages:
            raise _openai_error("Messages cannot be empty.")
        try:
            prompt = tokens.apply_chat_template(messages)
        except ValueError as exc:
            raise _validation_error(str(exc)) from None
        max_tokens = _int_field(body, "max_completion_tokens", None, where="", error=_openai_error)
        if max_tokens is None:
            max_tokens = _int_field(body, "max_tokens", None, where="", error=_openai_error)
        req = _openai_common(state, body, prompt, tokens.count_tokens(prompt), max_tokens)
        include_usage, continuous = _stream_options(body)
    except _BadRequest as exc:
        return exc.response
    model = body.get("model") or "default"
    created = int(time.time())
    if req.streaming:
        spec_details = bool(body.get("return_spec_tokens_details"))
        return StreamingResponse(_chat_stream(state, req, model, created, include_usage, continuous,
                                              spec_details=spec_details),
                                 media_type="text/event-stream")
    ids: list[int] = []
    last = None
    async for chunk in drive(state, req):
        ids.extend(chunk.token_ids)
        last = chunk
    finish, matched = _finish_type(last) if last is not None else ("length", None)
    return _JSON({
        "id": req.rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0,
                     "message": {"role": "assistant", "content": tokens.detokenize(ids),
                                 "reasoning_content": None},
                     "logprobs": None, "finish_reason": finish, "matched_stop": matched}],
        "usage": _usage(req.prompt_tokens, len(ids)), "metadata": None})


async def _chat_stream(state: SimState, req: GenRequest, model: str, created: int,
                       include_usage: bool, continuous: bool, *,
                       spec_details: bool = False) -> AsyncIterator[bytes]:
    head = {"id": req.rid, "object": "chat.completion.chunk", "created": created, "model": model}

    def event(delta: dict[str, Any], finish: str | None = None, matched: int | None = None,
              usage: dict[str, Any] | None = None) -> bytes:
        out = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                    "finish_reason": finish, "matched_stop": matched}]}
        if usage is not None:
            out["usage"] = usage
        return b"data: " + _dumps(out) + b"\n\n"

    first = True
    completion_tokens = 0
    finish = matched = None
    final_meta: dict[str, Any] = {}
    async for chunk in drive(state, req):
        if first:
            first = False
            yield event({"reasoning_content": None, "role": "assistant", "content": ""})
        completion_tokens = chunk.completion_tokens
        piece = tokens.detokenize(chunk.token_ids)
        if piece:
            yield event({"reasoning_content": None, "content": piece},
                        usage=_usage(req.prompt_tokens, completion_tokens) if continuous else None)
        if chunk.finished:
            finish, matched = _finish_type(chunk)
            final_meta = chunk.meta
    if finish is not None:
        yield event({"reasoning_content": None}, finish, matched)
    if spec_details and final_meta.get("spec_verify_ct"):
        # SGLang's extension chunk: the same spec_* fields /generate puts in its final meta_info.
        details = {k: v for k, v in final_meta.items() if k.startswith("spec_")}
        yield b"data: " + _dumps({**head, "choices": [], "sglext": {
            "spec_tokens_details": [details]}}) + b"\n\n"
    if include_usage:
        yield b"data: " + _dumps({**head, "choices": [],
                                  "usage": _usage(req.prompt_tokens, completion_tokens)}) + b"\n\n"
    yield b"data: [DONE]\n\n"


# ----- health, info, cache, metrics ----------------------------------------------------------------
async def health(request: Request) -> Response:
    state: SimState = request.app.state.sim
    if not state.ready:
        return Response(status_code=503)
    if request.url.path == "/health" and os.environ.get(
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() not in _TRUE:
        return Response(status_code=200)
    req = GenRequest(prompt="health", prompt_tokens=1, max_new_tokens=1, log_metrics=False, client=False)

    async def one_token() -> None:
        async for _ in drive(state, req):
            break

    try:
        await asyncio.wait_for(one_token(), timeout=_HEALTH_TIMEOUT_S)
    except TimeoutError:
        logger.error("Health check failed. Server couldn't get a response from detokenizer for last "
                     "%g seconds.", _HEALTH_TIMEOUT_S)
        return Response(status_code=503)
    return Response(status_code=200)


async def ready(request: Request) -> Response:
    return Response(status_code=200 if request.app.state.sim.ready else 503)


async def model_info(request: Request) -> Response:
    state: SimState = request.app.state.sim
    a = state.args
    return _JSON({
        "model_path": a.get("model_path"), "served_model_name": state.model_name,
        "tokenizer_path": a.get("tokenizer_path") or a.get("model_path"), "is_generation": True,
        "preferred_sampling_params": a.get("preferred_sampling_params"),
        "weight_version": a.get("weight_version") or "default", "load_format": a.get("load_format"),
        "reasoning_parser": a.get("reasoning_parser"), "tool_call_parser": a.get("tool_call_parser"),
        "disaggregation_mode": a.get("disaggregation_mode"), "has_image_understanding": False,
        "has_audio_understanding": False, "model_type": None, "architectures": None})


def _internal_state(state: SimState) -> dict[str, Any]:
    a = state.args
    stats = state.engine.stats
    out = dict(a)
    out["world_size"] = int(a.get("tp_size") or 1) * int(a.get("pp_size") or 1)
    out["startup_time"] = state.start_time
    out["effective_max_running_requests_per_dp"] = state.sim_info.get("max_running_requests")
    out["last_gen_throughput"] = getattr(stats, "gen_throughput", None) or 0.0
    if state.spec_enabled:
        accept = getattr(stats, "avg_spec_accept_length", None)
        if accept is not None:
            out["avg_spec_accept_length"] = accept
    return out


async def server_info(request: Request) -> Response:
    state: SimState = request.app.state.sim
    if request.url.path == "/get_server_info":
        logger.warning("Endpoint '/get_server_info' is deprecated and will be removed in a future "
                       "version. Please use '/server_info' instead.")
    info = dict(state.args)
    info["launch_command"] = " ".join(state.argv)
    info.update({"status": "ready" if state.ready else "starting",
                 "max_total_num_tokens": state.sim_info.get("max_total_num_tokens"),
                 "max_req_input_len": state.context_len - 1,
                 "startup_time": state.start_time,
                 "internal_states": [_internal_state(state)],
                 "version": state.version, "frontend": "python",
                 "autotune_sim": state.sim_info})
    return _JSON(info)


async def flush_cache(request: Request) -> Response:
    state: SimState = request.app.state.sim
    if state.engine.flush_cache():
        logger.info("Cache flushed successfully!", extra={"rank": " TP0"})
        return PlainTextResponse(
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
            "waiting requests, the operation will not be performed.)\n")
    stats = state.engine.stats
    logger.warning("Cache not flushed because there are pending requests. #queue-req: %s, "
                   "#running-req: %s", getattr(stats, "num_queue_reqs", None),
                   getattr(stats, "num_running_reqs", None), extra={"rank": " TP0"})
    return PlainTextResponse("Flush cache failed.\n", status_code=400)


async def metrics(request: Request) -> Response:
    state: SimState = request.app.state.sim
    a = state.args
    ctx = MetricsContext(model_name=state.model_name, spec_enabled=state.spec_enabled,
                         spec_num_steps=a.get("speculative_num_steps"),
                         spec_num_draft_tokens=a.get("speculative_num_draft_tokens"),
                         device_timer=state.device_timer, created=state.start_time)
    return Response(render_metrics(state.engine.stats, state.counters, ctx), media_type=CONTENT_TYPE)


async def models(request: Request) -> Response:
    state: SimState = request.app.state.sim
    name = state.model_name
    return _JSON({"object": "list", "data": [
        {"id": name, "object": "model", "created": int(state.start_time), "owned_by": "sglang",
         "root": name, "parent": None, "max_model_len": state.context_len}]})


async def _log_decode_batches(state: SimState, every_s: float = 5.0) -> None:
    """SGLang's periodic "Decode batch" log line, while there is work."""
    while True:
        await asyncio.sleep(every_s)
        stats = state.engine.stats
        running = getattr(stats, "num_running_reqs", 0) or 0
        if not running:
            continue
        msg = f"Decode batch, #running-req: {running}, "
        if state.spec_enabled and getattr(stats, "last_spec_accept_length", None) is not None:
            rate = getattr(stats, "spec_accept_rate", None) or 0.0
            msg += f"accept len: {stats.last_spec_accept_length:.2f}, accept rate: {rate:.2f}, "
        msg += (f"cuda graph: True, gen throughput (token/s): "
                f"{getattr(stats, 'gen_throughput', 0.0) or 0.0:.2f}, "
                f"#queue-req: {getattr(stats, 'num_queue_reqs', 0) or 0}")
        logger.info(msg, extra={"rank": " TP0"})


def create_app(state: SimState) -> Starlette:
    """The Starlette app for one emulated server. Starts the engine and ``state.startup``."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await state.engine.start()
        if state.startup is not None:
            state.tasks.append(asyncio.create_task(state.startup(state)))
        state.tasks.append(asyncio.create_task(_log_decode_batches(state)))
        try:
            yield
        finally:
            for task in state.tasks:
                task.cancel()
            await state.engine.stop()

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/health_generate", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/model_info", model_info, methods=["GET"]),
        Route("/get_model_info", model_info, methods=["GET"]),
        Route("/server_info", server_info, methods=["GET"]),
        Route("/get_server_info", server_info, methods=["GET"]),
        Route("/flush_cache", flush_cache, methods=["GET", "POST"]),
        Route("/generate", generate, methods=["POST", "PUT"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    ]
    if state.args.get("enable_metrics"):
        routes.append(Route("/metrics", metrics, methods=["GET"]))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.sim = state
    return app
