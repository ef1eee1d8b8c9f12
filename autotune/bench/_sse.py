"""Incremental Server-Sent Events decoder, lean enough for the hot path of the benchmark client.

It follows the WHATWG event-stream rules that matter for LLM servers: lines end in ``\\n``,
``\\r\\n`` or ``\\r`` (and a ``\\r\\n`` may be split across two network reads); lines starting with
``:`` are comments (keep-alive pings); ``data:`` lines of one event are joined with ``\\n``; a blank
line dispatches the event; an event whose data is empty is not dispatched. ``event:`` names are
kept (SGLang sends ``event: sglext_ids`` for one optional chat chunk). ``id:`` and ``retry:`` are
ignored: a benchmark never reconnects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_COLON = 58  # ord(":")


class SSEDecoder:
    """Turns a byte stream, fed in arbitrary pieces, into ``(event_name, data)`` pairs.

    ``event_name`` is None for the default ``message`` event; ``data`` is the raw bytes of the
    joined data lines (``b"[DONE]"`` included, recognising it is the caller's business).
    """

    __slots__ = ("_buf", "_data", "_event")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[tuple[str | None, bytes]]:
        """Consume one network read and return the events it completed, in order."""
        buf = self._buf + chunk if self._buf else chunk
        tail = b""
        if b"\r" in buf:
            # A trailing CR may be the first half of a CRLF whose LF is in the next read.
            if buf.endswith(b"\r"):
                buf, tail = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop() + tail
        if not lines:
            return []
        out: list[tuple[str | None, bytes]] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    payload = data[0] if len(data) == 1 else b"\n".join(data)
                    if payload:
                        out.append((self._event, payload))
                    data = self._data = []
                self._event = None
                continue
            if line[0] == _COLON:
                continue
            name, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data.append(value)
            elif name == b"event":
                self._event = value.decode("utf-8", "replace") or None
        return out

    def close(self) -> list[tuple[str | None, bytes]]:
        """End of stream: return an event left without its closing blank line.

        The SSE standard discards such an event; a benchmark would rather see a final chunk that
        a server sent without the blank line than call a finished request failed.
        """
        pending = self.feed(b"\n\n") if (self._buf or self._data) else []
        self._buf = b""
        self._data = []
        self._event = None
        return pending


# --------------------------------------------------------------------------------------------
# Protocol accumulators: one per request, fed decoded events with their arrival time.
# --------------------------------------------------------------------------------------------

try:  # orjson is several times faster on SGLang's cumulative (O(n^2) bytes) generate stream
    import orjson as _orjson

    _loads: Callable[[str | bytes], Any] = _orjson.loads
    _JSONError: tuple[type[Exception], ...] = (_orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - orjson ships with the project's environment
    import json as _json

    _loads = _json.loads
    _JSONError = (ValueError,)

DONE = b"[DONE]"

#: meta_info keys kept from the final /generate chunk (everything else, e.g. logprobs, dropped).
_META_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency",
              "reasoning_tokens")
SPEC_KEYS = ("spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
             "spec_num_proposed_drafts", "spec_correct_drafts_histogram", "spec_cap_length",
             "spec_block_accept_length", "spec_cap_lens_histogram")
#: Older names of SPEC_KEYS fields: SGLang 0.5.17 sends them beside the current ones ("backward-
#: compat aliases"), older releases instead of them. Read by name; the current name wins.
SPEC_ALIASES = {"spec_accepted_drafts": "spec_num_correct_drafts",
                "spec_proposed_drafts": "spec_num_proposed_drafts",
                "spec_accept_histogram": "spec_correct_drafts_histogram"}


def spec_fields(meta: dict) -> dict[str, object]:
    """The ``spec_*`` fields of a final meta_info (or ``spec_tokens_details``), aliases mapped to
    their current names; fields the server did not send are absent, never zero."""
    out = {k: meta[k] for k in SPEC_KEYS if k in meta}
    for old, new in SPEC_ALIASES.items():
        if new not in out and old in meta:
            out[new] = meta[old]
    return out


def _error_text(err: object) -> str:
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or err
        code = err.get("code")
        return f"server error{f' {code}' if code is not None else ''}: {msg}"
    return f"server error: {err}"


class StreamAccumulator:
    """Collects what one streamed response says, chunk by chunk.

    Attributes set while feeding: ``times`` (arrival time of each chunk that carried new tokens),
    ``counts`` (the server's cumulative completion-token count at that chunk, or None when the
    server does not report per-chunk counts), ``prompt_tokens``, ``completion_tokens``,
    ``finish_reason``, ``spec`` (final ``spec_*`` fields), ``meta`` (other final meta fields),
    ``done`` (``[DONE]`` seen) and ``error``.
    """

    __slots__ = ("times", "counts", "_last", "prompt_tokens", "completion_tokens",
                 "finish_reason", "spec", "meta", "done", "error")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.counts: list[int] | None = []
        self._last = 0
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.finish_reason: str | None = None
        self.spec: dict[str, object] = {}
        self.meta: dict[str, object] = {}
        self.done = False
        self.error: str | None = None

    def on_event(self, t: float, name: str | None, data: bytes) -> None:
        """Consume one SSE event that arrived at time ``t``."""
        if data == DONE:
            self.done = True
            return
        if self.error is not None or name is not None:
            # Named events (SGLang's optional ``sglext_ids``) carry no timing information.
            return
        try:
            obj = _loads(data)
        except _JSONError:
            self.error = f"malformed stream chunk: {data[:200]!r}"
            return
        if not isinstance(obj, dict):
            self.error = f"unexpected stream chunk: {data[:200]!r}"
            return
        err = obj.get("error")
        if err:
            self.error = _error_text(err)
            return
        self._handle(t, obj)

    def _handle(self, t: float, obj: dict) -> None:
        raise NotImplementedError

    def _tokens_at(self, t: float, count: int | None) -> None:
        if count is None:
            self.times.append(t)
            self.counts = None
        elif count > self._last:
            self._last = count
            self.times.append(t)
            if self.counts is not None:
                self.counts.append(count)


class GenerateAccumulator(StreamAccumulator):
    """SGLang native ``/generate`` stream (see :mod:`autotune.bench.client` for the wire format)."""

    __slots__ = ()

    def _handle(self, t: float, obj: dict) -> None:
        meta = obj.get("meta_info")
        if not isinstance(meta, dict):
            return
        self._tokens_at(t, meta.get("completion_tokens"))
        fr = meta.get("finish_reason")
        if fr is None:
            return
        kind = fr.get("type") if isinstance(fr, dict) else str(fr)
        if kind == "abort":
            msg = fr.get("message") if isinstance(fr, dict) else None
            self.error = f"request aborted by server: {msg or fr}"
            return
        self.finish_reason = kind
        self.prompt_tokens = meta.get("prompt_tokens")
        self.completion_tokens = meta.get("completion_tokens")
        self.meta = {k: meta[k] for k in _META_KEYS if k in meta}
        self.spec = spec_fields(meta)


class ChatAccumulator(StreamAccumulator):
    """OpenAI-style ``/v1/chat/completions`` stream (see :mod:`autotune.bench.client`)."""

    __slots__ = ()

    def _handle(self, t: float, obj: dict) -> None:
        usage = obj.get("usage")
        has_tokens = False
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                has_tokens = True
            fr = choice.get("finish_reason")
            if fr:
                if fr == "abort":
                    self.error = "request aborted by server"
                    return
                self.finish_reason = fr
        if has_tokens:
            # Per-chunk counts come from ``continuous_usage_stats``; without them only the final
            # usage chunk has a count and per-token ITL cannot be known for this request.
            self._tokens_at(t, usage.get("completion_tokens") if usage else None)
        if usage:
            if usage.get("prompt_tokens") is not None:
                self.prompt_tokens = usage["prompt_tokens"]
            if usage.get("completion_tokens") is not None:
                self.completion_tokens = usage["completion_tokens"]
        ext = obj.get("sglext")
        if isinstance(ext, dict):
            details = ext.get("spec_tokens_details")
            if isinstance(details, list):  # one entry per choice; we send n=1
                details = details[0] if details else None
            if isinstance(details, dict) and details.get("spec_verify_ct"):
                self.spec = spec_fields(details)
