"""benchmarks.agreement on the emulator: autotune's client and SGLang's own bench_serving send the same
requests (SGLang's ShareGPT loader on one file) and both count every token; figures, not timing."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SGLANG_PY = REPO / ".venv-sglang-data" / "bin" / "python"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(not SGLANG_PY.exists(), reason="no .venv-sglang-data (SGLang's bench_serving)")]


def test_both_tools_send_the_same_requests_and_the_ratio_is_of_their_medians(tmp_path: Path) -> None:
    out = tmp_path / "agreement.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    env["AUTOTUNE_SIM_STARTUP_S"] = "0.2"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.agreement", "--space", "scripts/gpu/sim-llama-8b-batch.yaml",
         "--params", '{"speculative_num_steps": 3, "speculative_num_draft_tokens": 4}', "--concurrency", "1", "3",
         "--rounds", "2", "--min-prompts", "2", "--output-len", "8", "--sglang-python", str(SGLANG_PY),
         "--json", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=880, check=False)
    # 0: every level within 2%; 1: some level not (timing on a busy box); 2: an error.
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["requests"] == {"1": 2, "3": 6}
    for level in data["levels"]:
        n = level["requests"]
        # Identical requests: every run of either tool completed n requests of 8 tokens.
        assert [r["tokens"] for r in level["autotune"]] == [n * 8] * 2
        assert [r["tokens"] for r in level["bench_serving"]] == [n * 8] * 2
        a = [r["tok_s"] for r in level["autotune"]]
        b = [r["tok_s"] for r in level["bench_serving"]]
        assert level["ratio"] == pytest.approx(statistics.median(a) / statistics.median(b))
        assert level["round_ratios"] == pytest.approx([x / y for x, y in zip(a, b, strict=True)])
        assert level["ok"] == (abs(level["ratio"] - 1) * 100 <= 2.0)
        # What the next H200 run needs to tell a client's lag from the server's: each tool's Little's-law
        # mean in flight, and autotune's dispatch gaps, event-loop lag and CPU per chunk.
        c = level["concurrency"]
        for run in level["autotune"] + level["bench_serving"]:
            assert 0 < run["mean_in_flight"] <= c + 1e-9
        for run in level["autotune"]:
            assert run["chunks"] >= n and run["cpu_s"] > 0 and run["loop_lag_ms_p99"] >= 0
            assert (run["gap_p50_s"] is None) == (n <= c)
    assert data["pinned"] is None
    assert "within 2%" in proc.stdout
