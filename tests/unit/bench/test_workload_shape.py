"""The workload's shape recorded with a search (autotune.bench.workload_shape)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.bench.workload_shape import PREFIX_CHARS, shape_line, workload_shape
from autotune.space.workload import Workload


def test_prefix_sharing_prompt_lengths_and_send_mode_from_a_file(tmp_path: Path) -> None:
    system = "You are a careful assistant. " * 12  # longer than PREFIX_CHARS: a shared system prompt
    assert len(system) > PREFIX_CHARS
    rows = [{"id": f"s{i}", "prompt": system + f"question {i}"} for i in range(6)]
    rows += [{"id": f"u{i}", "prompt": f"unique prompt number {i} " * (i + 1)} for i in range(4)]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wl = Workload.from_spec({"source": "jsonl", "path": str(path), "num_prompts": 10, "warmup_prompts": 0,
                             "output_len": 64, "concurrency": [4, 16], "primary_concurrency": 16, "seed": 0})
    shape = workload_shape(wl)
    assert shape["requests"] == 10 and shape["distinct_prompts"] == 10
    assert shape["shared_prefix_pct"] == pytest.approx(60.0)  # the six behind one system prompt
    assert shape["send_mode"] == "closed loop, concurrency [4, 16]" and shape["output_tokens"] == 64
    lengths = sorted(len(r["prompt"]) for r in rows)
    assert lengths[0] <= shape["prompt_chars_p10"] <= shape["prompt_chars_p50"] <= shape["prompt_chars_p90"]
    line = shape_line({**shape, "input_tokens_p10": 30.0, "input_tokens_p50": 80.0, "input_tokens_p90": 95.0})
    assert "input tokens p10/p50/p90 30/80/95 (server-counted)" in line
    assert "60% sharing their first 256 characters" in line
    # Without the server's counts, the line does not make them up.
    assert "input tokens" not in shape_line(shape)


def test_an_open_loop_is_said_to_be_one() -> None:
    wl = Workload.from_spec({"source": "builtin", "num_prompts": 4, "request_rate": 2.5, "output_len": 16})
    assert workload_shape(wl)["send_mode"] == "poisson 2.5 req/s"
