"""The shape of a workload, recorded with every search: what its figures were measured on.

The same token count reads differently with other prompts (issue 34: 16% apart at concurrency 16
between text prompts, random token ids and one prompt repeated), so a result says what it was
measured on. :func:`workload_shape` describes the requests (how many, output tokens, prompt
lengths in characters, distinct prompts, prefix sharing) and how they were sent (API, closed loop at
a concurrency or Poisson arrivals at a rate); the input tokens the server counted come with each
trial (``input_tokens_p10/p50/p90``), since only the server's tokenizer knows them.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from autotune.bench.records import percentile

if TYPE_CHECKING:
    from autotune.space.workload import Workload

#: The trial result's server-counted prompt lengths (``TrialResult.input_tokens_*``).
INPUT_TOKEN_KEYS = ("input_tokens_p10", "input_tokens_p50", "input_tokens_p90")
#: The search run's MLflow tag holding :func:`shape_line`.
TAG_WORKLOAD_SHAPE = "autotune.workload_shape"

#: Characters two prompts must share at their start to count as sharing a prefix: longer than any
#: chat template's fixed header, so only a shared system prompt or a shared document counts.
PREFIX_CHARS = 256


def send_mode(workload: Workload) -> str:
    """How the requests go out: ``closed loop, concurrency 64`` or ``poisson 2.5 req/s``."""
    spec = workload.to_dict()
    levels = spec.get("concurrency") if isinstance(spec.get("concurrency"), list) else None
    if workload.request_rate is not None or spec.get("request_rate") is not None:
        rate = spec.get("request_rate")
        cap = f", at most {workload.concurrency} in flight" if workload.concurrency else ""
        return f"poisson {rate} req/s{cap}"
    shown = levels if levels is not None else workload.concurrency
    return f"closed loop, concurrency {shown}"


def workload_shape(workload: Workload) -> dict[str, Any]:
    """The measured requests' shape and send mode (keys in ``docs/search-spaces.md``, "Workload shape")."""
    prompts = workload.measured()
    outputs = sorted({p.max_tokens for p in prompts})
    return {
        "requests": len(prompts), "api": workload.api, "send_mode": send_mode(workload),
        "source": workload.source, "sample": workload.sample,
        "output_tokens": outputs[0] if len(outputs) == 1 else f"{outputs[0]}-{outputs[-1]}" if outputs else None,
        "ignore_eos": all(p.ignore_eos for p in prompts) if prompts else None,
        **prompt_stats([shape_text(p.text, p.messages) for p in prompts]),
    }


def shape_text(text: str | None, messages: tuple[tuple[str, str], ...] | None) -> str:
    """A prompt's text as its shape counts it: a chat's turns' contents, one a line."""
    return text if text is not None else "\n".join(c for _, c in messages or ())


def prompt_stats(texts: list[str]) -> dict[str, Any]:
    """Prompt lengths in characters (p10/p50/p90), distinct prompts, and the share of prompts
    sharing their first :data:`PREFIX_CHARS` characters with another; None where ``texts`` is empty."""
    chars = [float(len(t)) for t in texts]
    heads = Counter(t[:PREFIX_CHARS] for t in texts if len(t) >= PREFIX_CHARS)
    shared = sum(n for n in heads.values() if n > 1)
    return {"prompt_chars_p10": percentile(chars, 10), "prompt_chars_p50": percentile(chars, 50),
            "prompt_chars_p90": percentile(chars, 90), "distinct_prompts": len(set(texts)),
            "shared_prefix_pct": 100.0 * shared / len(texts) if texts else None}


def shape_line(shape: dict[str, Any]) -> str:
    """One line for people: requests, tokens, prompt lengths, sharing, send mode."""
    input_tokens = tuple(shape.get(k) for k in INPUT_TOKEN_KEYS)
    def n(v: Any) -> str:
        return "?" if v is None else f"{v:.0f}" if isinstance(v, float) else str(v)

    tokens = (f"input tokens p10/p50/p90 {'/'.join(n(v) for v in input_tokens)} (server-counted); "
              if any(v is not None for v in input_tokens) else "")
    return (f"{shape['requests']} requests x {shape['output_tokens']} output tokens "
            f"({'fixed' if shape['ignore_eos'] else 'up to EOS'}), {shape['api']} API, {shape['send_mode']}; "
            f"{tokens}prompt chars p10/p50/p90 {n(shape['prompt_chars_p10'])}/{n(shape['prompt_chars_p50'])}/"
            f"{n(shape['prompt_chars_p90'])}; {shape['distinct_prompts']} distinct prompts, "
            f"{n(shape['shared_prefix_pct'])}% sharing their first {PREFIX_CHARS} characters with another")
