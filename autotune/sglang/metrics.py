"""The Prometheus metric names SGLang 0.5.23's ``/metrics`` exposes, as autotune reads and emits them.

Two sides must agree on these wire names: the phase profiler (:mod:`autotune.profile.phases`)
reads them from a real server or the emulator, and the emulator (:mod:`autotune.sim.metrics_text`)
writes them. Both take them from here, so a rename in a later SGLang release is one edit. Counter
names carry the ``_total`` suffix of the exposition (``prometheus_client`` strips and re-adds it).
"""

from __future__ import annotations

# Scheduler gauges (labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank).
NUM_RUNNING_REQS = "sglang:num_running_reqs"
NUM_QUEUE_REQS = "sglang:num_queue_reqs"
GEN_THROUGHPUT = "sglang:gen_throughput"
DEVICE_TIMER_ENV = "SGLANG_ENABLE_METRICS_DEVICE_TIMER"
"""Turns on the CUDA-event device timer behind :data:`FORWARD_SECONDS` (``=1``)."""

SPEC_ACCEPT_LENGTH = "sglang:spec_accept_length"
SPEC_ACCEPT_RATE = "sglang:spec_accept_rate"
SPEC_NUM_STEPS = "sglang:spec_num_steps"
SPEC_NUM_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"

# Scheduler counters.
FORWARD_SECONDS = "sglang:forward_execution_seconds_total"
"""GPU seconds per forward ``category``; only with ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``."""
DECODE_PASSES = "sglang:cuda_graph_passes_total"
"""Forward passes by CUDA-graph ``mode`` (one per decode iteration, a speculative cycle)."""

# Tokenizer counters (labels model_name, engine_type; is_streaming on tokens and requests),
# counted when a request finishes.
PROMPT_TOKENS = "sglang:prompt_tokens_total"
GEN_TOKENS = "sglang:generation_tokens_total"
NUM_REQUESTS = "sglang:num_requests_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
