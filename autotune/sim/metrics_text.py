"""Prometheus exposition of the emulator's ``/metrics``, with SGLang 0.5.23's names and labels.

SGLang has two collectors, and the emulator keeps their split:

- Scheduler metrics (labels ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank``; only rank 0
  reports): the gauges ``sglang:num_running_reqs``, ``num_queue_reqs``, ``gen_throughput``,
  ``spec_accept_length``, ``spec_accept_rate``, ``spec_num_steps``, ``spec_num_draft_tokens``, and,
  with ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``, the counter
  ``sglang:forward_execution_seconds_total`` (one more label, ``category``).
- Tokenizer metrics (labels ``model_name, engine_type``, plus ``is_streaming`` on the token and
  request counters), counted when a request finishes: ``sglang:prompt_tokens_total``,
  ``generation_tokens_total``, ``num_requests_total`` and ``spec_verify_calls_total``. Like SGLang's
  ``log_metrics=False``, health checks are not counted; the start-up warm-up request is.

As in SGLang, a server without speculation reports the speculative gauges as 0. A value the engine
does not know yet (no decode window finished) gives no sample rather than a made-up 0. The text is
produced by ``prometheus_client`` itself, so the format is exactly what a real server emits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from autotune.sglang import metrics as sglang_metrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_SCHED_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
_TOK_LABELS = ("model_name", "engine_type")


@dataclass
class RequestCounters:
    """Per-request counters kept by the HTTP layer, as SGLang's tokenizer manager keeps them.

    Keys of the dicts are ``is_streaming``.
    """

    created: float = field(default_factory=time.time)
    prompt_tokens: dict[bool, int] = field(default_factory=dict)
    generation_tokens: dict[bool, int] = field(default_factory=dict)
    requests: dict[bool, int] = field(default_factory=dict)
    spec_verify_calls: int | None = None

    def observe(self, *, streaming: bool, prompt_tokens: int, completion_tokens: int,
                spec_verify_ct: int | None) -> None:
        """Count one finished request."""
        self.prompt_tokens[streaming] = self.prompt_tokens.get(streaming, 0) + prompt_tokens
        self.generation_tokens[streaming] = self.generation_tokens.get(streaming, 0) + completion_tokens
        self.requests[streaming] = self.requests.get(streaming, 0) + 1
        if spec_verify_ct:
            self.spec_verify_calls = (self.spec_verify_calls or 0) + int(spec_verify_ct)


@dataclass(frozen=True)
class MetricsContext:
    """What the exposition needs besides the live numbers."""

    model_name: str
    spec_enabled: bool
    spec_num_steps: int | None
    spec_num_draft_tokens: int | None
    device_timer: bool
    created: float


class _Snapshot:
    """A one-shot prometheus_client collector over the current numbers."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def _gauge(name: str, doc: str, label_values: list[str], value: float | None) -> Metric | None:
    if value is None:
        return None
    g = GaugeMetricFamily(name, doc, labels=list(_SCHED_LABELS))
    g.add_metric(label_values, float(value))
    return g


def render_metrics(stats: Any, counters: RequestCounters, ctx: MetricsContext) -> bytes:
    """The ``/metrics`` body for the engine's current ``stats`` and the request ``counters``.

    Args:
        stats: The engine's ``EngineStats`` (attributes read: ``num_running_reqs``,
            ``num_queue_reqs``, ``gen_throughput``, ``last_spec_accept_length``,
            ``spec_accept_rate``, ``forward_seconds``).
        counters: Per-request counters.
        ctx: Labels and static values.

    Returns:
        Prometheus text exposition, UTF-8.
    """
    sched = [ctx.model_name, "unified", "0", "0", "0"]
    tok = [ctx.model_name, "unified"]
    out: list[Metric | None] = [
        _gauge(sglang_metrics.NUM_RUNNING_REQS, "The number of running requests.", sched,
               getattr(stats, "num_running_reqs", None)),
        _gauge(sglang_metrics.NUM_QUEUE_REQS, "The number of requests in the waiting queue.", sched,
               getattr(stats, "num_queue_reqs", None)),
        _gauge(sglang_metrics.GEN_THROUGHPUT, "The generation throughput (token/s).", sched,
               getattr(stats, "gen_throughput", None)),
    ]
    if ctx.spec_enabled:
        accept_len = getattr(stats, "last_spec_accept_length", None)
        accept_rate = getattr(stats, "spec_accept_rate", None)
        steps, draft = ctx.spec_num_steps, ctx.spec_num_draft_tokens
    else:
        accept_len = accept_rate = 0.0
        steps = draft = 0
    out += [
        _gauge(sglang_metrics.SPEC_ACCEPT_LENGTH,
               "Mean acceptance length of speculative decoding (accepted drafts + bonus token per "
               "forward).", sched, accept_len),
        _gauge(sglang_metrics.SPEC_ACCEPT_RATE,
               "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).", sched,
               accept_rate),
        _gauge(sglang_metrics.SPEC_NUM_STEPS, "Currently active speculative_num_steps.", sched, steps),
        _gauge(sglang_metrics.SPEC_NUM_DRAFT_TOKENS,
               "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
               sched, draft),
    ]
    if ctx.device_timer:
        fwd: Mapping[str, float] = getattr(stats, "forward_seconds", None) or {}
        c = CounterMetricFamily(
            sglang_metrics.FORWARD_SECONDS,
            "Total time that GPU is busy executing model forward passes. Refer to ForwardMode for "
            "category labels.",
            labels=[*_SCHED_LABELS, "category"])
        for category in sorted(fwd):
            c.add_metric([*sched, category], float(fwd[category]), created=ctx.created)
        out.append(c)

    # One count per scheduler decode iteration (one speculative cycle): the cycle count that holds
    # at any batch size. The emulator "captures" every batch size, as SGLang's CUDA graphs do.
    passes = CounterMetricFamily(sglang_metrics.DECODE_PASSES,
                                 "Number of forward passes by CUDA graph mode.",
                                 labels=[*_SCHED_LABELS, "mode"])
    passes.add_metric([*sched, "decode_cuda_graph"],
                      float(getattr(stats, "decode_iterations", 0) or 0), created=ctx.created)
    out.append(passes)

    def by_stream(name: str, doc: str, values: dict[bool, int]) -> Metric:
        c = CounterMetricFamily(name, doc, labels=[*_TOK_LABELS, "is_streaming"])
        for streaming in sorted(values):
            c.add_metric([*tok, "true" if streaming else "false"], float(values[streaming]),
                         created=counters.created)
        return c

    out += [
        by_stream(sglang_metrics.PROMPT_TOKENS, "Number of prefill tokens processed.",
                  counters.prompt_tokens),
        by_stream(sglang_metrics.GEN_TOKENS, "Number of generation tokens processed.",
                  counters.generation_tokens),
        by_stream(sglang_metrics.NUM_REQUESTS, "Number of requests processed.", counters.requests),
    ]
    verify = CounterMetricFamily(sglang_metrics.VERIFY_CALLS,
                                 "Number of speculative decoding verification calls.",
                                 labels=list(_TOK_LABELS))
    if counters.spec_verify_calls is not None:
        verify.add_metric(tok, float(counters.spec_verify_calls), created=counters.created)
    out.append(verify)
    return generate_latest(_Snapshot([m for m in out if m is not None]))
