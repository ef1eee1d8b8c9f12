"""What every endpoint of the emulator's HTTP API shares: its state, requests, errors and driver.

:class:`SimState` (the engine, model, faults and counters of one emulated server) and
:class:`GenRequest` (one generation) are passed to every handler; the JSON response class and the
error shapes of SGLang's native and OpenAI APIs, the body and sampling-parameter checks, and
:func:`drive` (one request through the engine, with faults applied and counted in ``/metrics``)
are used by both :mod:`autotune.sim.app` (``/generate``, health, info) and
:mod:`autotune.sim.openai_api` (``/v1/completions``, ``/v1/chat/completions``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, NoReturn

from starlette.requests import Request
from starlette.responses import Response

from autotune.sim import tokens
from autotune.sim.faults import FaultPlan
from autotune.sim.metrics_text import RequestCounters

try:
    import orjson

    dumps: Callable[[Any], bytes] = orjson.dumps
    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - orjson comes with the sglang parser deps
    import json

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads

logger = logging.getLogger("autotune.sim")

DEFAULT_CONTEXT_LEN = 262144


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
    startup: Callable[[SimState], Coroutine[Any, Any, None]] | None = None
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


class BadRequest(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


def sglang_error(message: str, status: int = 400) -> BadRequest:
    """The native API's error shape (``_create_error_response``)."""
    return BadRequest(JSON({"error": {"message": message}}, status_code=status))


def openai_error(message: str, status: int = 400, err_type: str = "BadRequestError") -> BadRequest:
    """The OpenAI API's ``ErrorResponse`` shape."""
    return BadRequest(JSON({"object": "error", "message": message, "type": err_type,
                              "param": None, "code": status}, status_code=status))


def validation_error(message: str) -> BadRequest:
    """FastAPI's request-validation failure, which SGLang turns into a 400 ``ErrorResponse``."""
    return BadRequest(JSON({"object": "error", "message": message, "type": "Bad Request",
                              "param": None, "code": 400}, status_code=400))


async def json_body(request: Request, *, require_json_type: bool) -> dict[str, Any]:
    if require_json_type:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise validation_error("[{'loc': ['header', 'content-type'], 'msg': 'Unsupported Media "
                                    "Type: Only 'application/json' is allowed', 'type': 'value_error'}]")
    raw = await request.body()
    try:
        body = _loads(raw) if raw else None
    except ValueError as exc:
        raise validation_error(f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        raise validation_error("the request body must be a JSON object")
    return body


def int_field(obj: dict[str, Any], key: str, default: int | None, *, where: str,
               error: Callable[[str], BadRequest], minimum: int = 0) -> int | None:
    value = obj.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{where}{key} must be an integer, got {value!r}")
    if value < minimum:
        raise error(f"{key} must be at least {minimum}, got {value}.")
    return value


def check_sampling(params: dict[str, Any], error: Callable[[str], BadRequest]) -> None:
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


def check_length(state: SimState, req: GenRequest) -> None:
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


def not_ready() -> Response:
    return JSON({"error": {"message": "The server is not ready: it is still starting up."}},
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


def meta_info(state: SimState, req: GenRequest, chunk: Any) -> dict[str, Any]:
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
