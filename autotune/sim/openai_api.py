"""The emulator's OpenAI-compatible endpoints: ``/v1/completions`` and ``/v1/chat/completions``.

Request checks, response objects and streamed deltas follow SGLang 0.5.23's ``openai/*.py``
(``usage`` chunks, ``sglext`` extras, ``ErrorResponse`` errors); generation goes through the same
:func:`~autotune.sim.api_common.drive` as ``/generate``. Not emulated (answered 400): ``n > 1``
and logprobs.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

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
    not_ready,
    openai_error,
    validation_error,
)

DEFAULT_CHAT_MAX_TOKENS = 4096  # stands in for "until EOS or the context is full"


def _stream_options(body: dict[str, Any]) -> tuple[bool, bool]:
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise validation_error("stream_options: expected an object")
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
        raise openai_error("autotune sim: n > 1 is not emulated")
    if body.get("logprobs") not in (None, False):
        raise openai_error("autotune sim: logprobs are not emulated")
    check_sampling(body, openai_error)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise validation_error(f"stream: Input should be a valid boolean, got {stream!r}")
    req = GenRequest(prompt=prompt, prompt_tokens=prompt_tokens,
                     max_new_tokens=DEFAULT_CHAT_MAX_TOKENS if max_tokens is None else max_tokens,
                     ignore_eos=bool(body.get("ignore_eos", False)), streaming=stream)
    if max_tokens is None:
        req.max_new_tokens = max(0, min(req.max_new_tokens, state.context_len - prompt_tokens))
    try:
        check_length(state, req)
    except ValueError as exc:
        raise openai_error(str(exc)) from None
    return req


def _finish_type(chunk: Any) -> tuple[str | None, int | None]:
    if not chunk.finished:
        return None, None
    if chunk.finish_reason == "stop":
        return "stop", tokens.EOS_TOKEN_ID
    return "length", None


async def _collect(state: SimState, req: GenRequest) -> tuple[list[int], str | None, int | None]:
    """A non-streamed request run to its end: its token ids, finish reason and matched stop."""
    ids: list[int] = []
    last = None
    async for chunk in drive(state, req):
        ids.extend(chunk.token_ids)
        last = chunk
    finish, matched = _finish_type(last) if last is not None else ("length", None)
    return ids, finish, matched


async def completions(request: Request) -> Response:
    state: SimState = request.app.state.sim
    try:
        body = await json_body(request, require_json_type=True)
        if not state.ready:
            return not_ready()
        prompt = body.get("prompt")
        if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
            raise openai_error("Prompt cannot be empty")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            text, n = prompt, tokens.count_tokens(prompt)
        elif isinstance(prompt, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            text, n = tokens.prompt_text_from_ids(prompt), len(prompt)
        else:
            raise openai_error("autotune sim: a batch of prompts in one request is not emulated")
        max_tokens = int_field(body, "max_tokens", 16, where="", error=openai_error)
        req = _openai_common(state, body, text, n, max_tokens)
        include_usage, continuous = _stream_options(body)
    except BadRequest as exc:
        return exc.response
    model = body.get("model") or "default"
    created = int(time.time())
    if req.streaming:
        return StreamingResponse(_completion_stream(state, req, model, created, include_usage, continuous),
                                 media_type="text/event-stream")
    ids, finish, matched = await _collect(state, req)
    return JSON({
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
        yield b"data: " + dumps(out) + b"\n\n"
    if include_usage:
        yield b"data: " + dumps({"id": req.rid, "object": "text_completion", "created": created,
                                  "model": model, "choices": [],
                                  "usage": _usage(req.prompt_tokens, completion_tokens, compact=True)}
                                 ) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def chat_completions(request: Request) -> Response:
    state: SimState = request.app.state.sim
    try:
        body = await json_body(request, require_json_type=True)
        if not state.ready:
            return not_ready()
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise validation_error("messages: Field required (a list of messages)")
        if not messages:
            raise openai_error("Messages cannot be empty.")
        try:
            prompt = tokens.apply_chat_template(messages)
        except ValueError as exc:
            raise validation_error(str(exc)) from None
        max_tokens = int_field(body, "max_completion_tokens", None, where="", error=openai_error)
        if max_tokens is None:
            max_tokens = int_field(body, "max_tokens", None, where="", error=openai_error)
        req = _openai_common(state, body, prompt, tokens.count_tokens(prompt), max_tokens)
        include_usage, continuous = _stream_options(body)
    except BadRequest as exc:
        return exc.response
    model = body.get("model") or "default"
    created = int(time.time())
    if req.streaming:
        spec_details = bool(body.get("return_spec_tokens_details"))
        return StreamingResponse(_chat_stream(state, req, model, created, include_usage, continuous,
                                              spec_details=spec_details),
                                 media_type="text/event-stream")
    ids, finish, matched = await _collect(state, req)
    return JSON({
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
        return b"data: " + dumps(out) + b"\n\n"

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
        yield b"data: " + dumps({**head, "choices": [], "sglext": {
            "spec_tokens_details": [details]}}) + b"\n\n"
    if include_usage:
        yield b"data: " + dumps({**head, "choices": [],
                                  "usage": _usage(req.prompt_tokens, completion_tokens)}) + b"\n\n"
    yield b"data: [DONE]\n\n"
