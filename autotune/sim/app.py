"""The emulator's HTTP API: SGLang 0.5.23's endpoints and response shapes over ``SimEngine``.

Endpoints (field names as in ``sglang/srt/entrypoints/http_server.py`` and ``openai/*.py``):
``/health``, ``/health_generate``, ``/ready``, ``/model_info``, ``/get_model_info``, ``/server_info``,
``/get_server_info``, ``/flush_cache``, ``/generate``, ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions`` and, only with ``--enable-metrics``, ``/metrics``.

``/generate`` streams like SGLang: without ``--incremental-streaming-output`` every SSE event carries
the *cumulative* ``text`` and ``output_ids``; with it, only the new part. ``meta_info`` counts are
always cumulative. The OpenAI endpoints stream deltas. Not emulated (answered 400): batches of
prompts in one streaming request, ``n > 1``, logprobs. This module holds ``/generate``, health,
info, cache and metrics and builds the app; the OpenAI endpoints are in
:mod:`autotune.sim.openai_api`, what all endpoints share in :mod:`autotune.sim.api_common`.
"""


from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from autotune.sim import tokens
from autotune.sim.api_common import (
    JSON,
    BadRequest,
    GenRequest,
    SimState,
    check_length,
    check_sampling,
    drive,
    dumps,
    int_field,
    json_body,
    logger,
    meta_info,
    not_ready,
    sglang_error,
)
from autotune.sim.metrics_text import CONTENT_TYPE, MetricsContext, render_metrics
from autotune.sim.openai_api import chat_completions, completions

_HEALTH_TIMEOUT_S = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
_TRUE = ("true", "1", "yes", "y")


# ----- /generate -----------------------------------------------------------------------------------
def _parse_generate(state: SimState, body: dict[str, Any]) -> tuple[list[GenRequest], bool, bool]:
    """Returns (requests, is_batch, stream)."""
    text, input_ids = body.get("text"), body.get("input_ids")
    if text is None and input_ids is None:
        raise sglang_error("Either text, input_ids or input_embeds should be provided.")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(JSON({"error": f"stream: expected a boolean, got {stream!r}"}, status_code=400))
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise BadRequest(JSON({"error": "sampling_params: expected an object (a batch of sampling "
                                          "params is not emulated)"}, status_code=400))
    max_new = int_field(params, "max_new_tokens", 128, where="sampling_params.",
                         error=sglang_error, minimum=0)
    check_sampling(params, sglang_error)
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
            raise BadRequest(JSON({"error": "text: expected a string or a non-empty list of strings"},
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
            raise BadRequest(JSON({"error": "input_ids: expected a non-empty list of token ids or "
                                              "a list of such lists"}, status_code=400))
    if is_batch and stream:
        raise sglang_error("autotune sim: streaming a batch of prompts in one request is not emulated")
    rid = body.get("rid") if isinstance(body.get("rid"), str) and not is_batch else None
    reqs = []
    for prompt, n in prompts:
        req = GenRequest(prompt=prompt, prompt_tokens=n, max_new_tokens=max_new or 0,
                         ignore_eos=ignore_eos, streaming=stream)
        if rid:
            req.rid = rid
        try:
            check_length(state, req)
        except ValueError as exc:
            raise sglang_error(str(exc)) from None
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
    return {"text": tokens.detokenize(ids), "output_ids": ids, "meta_info": meta_info(state, req, last)}


async def _generate_stream(state: SimState, req: GenRequest) -> AsyncIterator[bytes]:
    incremental = bool(state.args.get("incremental_streaming_output"))
    ids: list[int] = []
    text = ""
    detok = tokens.detokenize
    async for chunk in drive(state, req):
        new_ids = chunk.token_ids
        piece = detok(new_ids)
        if incremental:
            out = {"text": piece, "output_ids": new_ids, "meta_info": meta_info(state, req, chunk)}
        else:
            ids.extend(new_ids)
            text += piece
            out = {"text": text, "output_ids": ids, "meta_info": meta_info(state, req, chunk)}
        yield b"data: " + dumps(out) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def generate(request: Request) -> Response:
    state: SimState = request.app.state.sim
    try:
        body = await json_body(request, require_json_type=False)
        if not state.ready:
            return not_ready()
        reqs, is_batch, stream = _parse_generate(state, body)
    except BadRequest as exc:
        return exc.response
    if stream:
        return StreamingResponse(_generate_stream(state, reqs[0]), media_type="text/event-stream")
    if is_batch:
        return JSON(list(await asyncio.gather(*(_generate_one(state, r) for r in reqs))))
    return JSON(await _generate_one(state, reqs[0]))


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
    return JSON({
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
    return JSON(info)


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
    return JSON({"object": "list", "data": [
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
