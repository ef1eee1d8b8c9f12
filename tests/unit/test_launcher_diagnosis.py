"""The start-up diagnosis scripts of the GPU kit, on made-up inputs: ``scripts/gpu/startup_breakdown.py``
(the stages and SGLang's own ``scheduler_e2e`` from a server log) and ``scripts/gpu/launcher_profile.py``
(the sampler's summary). The profile's run against the emulator is in ``tests/gpu_kit/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "gpu"))

from launcher_profile import summarise  # noqa: E402
from startup_breakdown import breakdown  # noqa: E402

_LOG = """\
[autotune] launch 1 on port 20952: python -m sglang.launch_server ...
[2026-12-06 04:30:34] Max running requests is reset to 48 for speculative decoding.
[2026-12-06 04:30:37] Init torch distributed begin.
[2026-12-06 04:30:47] Engine startup timings (s): load_weight=0.12, kv_cache_allocation=0.43, scheduler_e2e=11.45, \
cuda_graph={prefill=3.18}, tokenizer_e2e=11.55
[2026-12-06 04:30:47] INFO:     Uvicorn running on http://127.0.0.1:20952 (Press CTRL+C to quit)
[2026-12-06 04:30:48] INFO:     127.0.0.1:50486 - "GET /health HTTP/1.1" 200 OK
"""


def test_breakdown_reads_the_stages_and_sglangs_own_scheduler_start(tmp_path):
    # Launched at 04:30:30.000 UTC (the name's milliseconds since the epoch).
    log = tmp_path / "prefork-816-1796531430000.log"
    log.write_text(_LOG)
    out = breakdown(log)
    assert out["launcher"] == pytest.approx(4.0) and out["tokenizer+spawn"] == 3.0
    assert out["scheduler"] == 10.0 and out["warmup"] == 1.0 and out["total"] == pytest.approx(18.0)
    assert out["scheduler_e2e"] == 11.45


def test_breakdown_without_sglangs_timings_says_unknown(tmp_path):
    log = tmp_path / "fresh-816-1796531430000.log"
    log.write_text("".join(ln + "\n" for ln in _LOG.splitlines() if "Engine startup timings" not in ln))
    assert breakdown(log)["scheduler_e2e"] is None


def test_the_profile_summary_gives_each_sample_to_every_module_and_function_on_its_stack():
    a = ("/x/site-packages/sglang/srt/server_args.py", "__post_init__", 1)
    imp = ("/x/site-packages/sglang/srt/configs/model_config.py", "<module>", 1)
    torch = ("/x/site-packages/torch/_inductor/compile_fx.py", "<module>", 1)
    http = ("/x/site-packages/sglang/srt/entrypoints/http_server.py", "<module>", 1)
    samples = [(0.5, 0.5, (a, imp, torch)), (1.0, 0.5, (a, imp)), (1.2, 0.2, (http,)), (3.0, 1.8, (http,))]
    out = summarise(samples, until=1.2)
    modules = dict((k, v) for k, v in out["modules"])
    assert modules == {"sglang/srt/configs/model_config.py": 1.0, "torch/_inductor/compile_fx.py": 0.5,
                       "sglang/srt/entrypoints/http_server.py": 0.2}
    functions = dict((k, v) for k, v in out["functions"])
    assert functions["sglang/srt/server_args.py:__post_init__"] == 1.0
    # One stretch per SGLang call chain; the sample after `until` is left out.
    assert out["timeline"] == [[0.0, 1.0, "server_args.py:__post_init__ > model_config.py:<module>"],
                               [1.0, 1.2, "http_server.py:<module>"]]
