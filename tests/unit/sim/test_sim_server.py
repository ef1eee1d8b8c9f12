"""``python -m autotune.sim.server`` as real subprocesses on 127.0.0.1, talked to over real HTTP.

Every server runs in its own process group; the ``launch`` fixture kills each group on teardown and
checks by pid that nothing is left. Start-up is shortened with ``AUTOTUNE_SIM_STARTUP_S=0.2``.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotune.sglang.args import parse_server_args

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[3]
LLAMA = "llama-3.1-8b-eagle3-h100"
KIMI = "kimi-k2.5-eagle3-tp8"
LLAMA_ARGS = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct"]
KIMI_ARGS = ["--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8"]
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "draft/eagle3"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Sim:
    """One emulator subprocess, in its own session (so its pid is its process group id)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log
        with open(log, "wb") as f:
            self.proc = subprocess.Popen([sys.executable, "-m", "autotune.sim.server", *argv], env=env,
                                         cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> int | None:
        try:
            return httpx.get(self.url + "/health", timeout=5).status_code
        except httpx.TransportError:
            return None

    def wait_healthy(self, timeout_s: float = 40.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log}")
            if self.health() == 200:
                return
            time.sleep(0.05)
        raise AssertionError(f"server not healthy after {timeout_s}s:\n{self.log}")

    def wait_exit(self, timeout_s: float = 40.0) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"server still running after {timeout_s}s:\n{self.log}") from None

    def kill(self) -> None:
        if group_alive(self.proc.pid):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    """Start emulators; every one is killed (by process group) and checked gone afterwards."""
    started: list[Sim] = []

    def start(*argv: str, profile: str = LLAMA, healthy: bool = True, **env: str) -> Sim:
        port = free_port()
        full_env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("AUTOTUNE_SIM_", "SGLANG_", "CUDA_VISIBLE"))}
        full_env.update({"AUTOTUNE_SIM_PROFILE": profile, "AUTOTUNE_SIM_STARTUP_S": "0.2",
                         "PYTHONUNBUFFERED": "1"})
        full_env.update(env)
        sim = Sim([*argv, "--port", str(port)], full_env, tmp_path / f"sim{len(started)}.log", port)
        started.append(sim)
        if healthy:
            sim.wait_healthy()
        return sim

    yield start
    for sim in started:
        sim.kill()
    for sim in started:
        assert not group_alive(sim.proc.pid), f"process group {sim.proc.pid} survived"


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """Llama + EAGLE-3 with auto-picked spec values, metrics and the device timer on."""
    tmp = tmp_path_factory.mktemp("spec")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AUTOTUNE_SIM_", "SGLANG_", "CUDA_VISIBLE"))}
    env.update({"AUTOTUNE_SIM_PROFILE": LLAMA, "AUTOTUNE_SIM_STARTUP_S": "0.2",
                "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1", "AUTOTUNE_SIM_SEED": "1234"})
    port = free_port()
    sim = Sim([*LLAMA_ARGS, *EAGLE3, "--enable-metrics", "--port", str(port)], env, tmp / "spec.log", port)
    try:
        sim.wait_healthy()
        yield sim
    finally:
        sim.kill()
        assert not group_alive(sim.proc.pid)


def sse_events(response: httpx.Response) -> list[Any]:
    """The JSON payloads of an SSE stream, checking it ends with ``data: [DONE]``."""
    events: list[Any] = []
    done = False
    for line in response.iter_lines():
        if not line:
            continue
        assert line.startswith("data: "), line
        assert not done, "data after [DONE]"
        if line == "data: [DONE]":
            done = True
        else:
            events.append(json.loads(line[len("data: "):]))
    assert done, "stream did not end with data: [DONE]"
    return events


def metric_samples(text: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


# ----- endpoints on a speculative server ----------------------------------------------------------
def test_info_endpoints(spec_server: Sim) -> None:
    url = spec_server.url
    assert httpx.get(url + "/ready").status_code == 200
    assert httpx.get(url + "/health_generate").status_code == 200
    models = httpx.get(url + "/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert models["data"][0]["owned_by"] == "sglang"
    info = httpx.get(url + "/model_info").json()
    assert info["is_generation"] is True and info["model_path"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_server_info_shows_resolved_auto_picked_spec_values(spec_server: Sim) -> None:
    argv = [*LLAMA_ARGS, *EAGLE3, "--enable-metrics", "--port", str(spec_server.port)]
    expected = parse_server_args(argv)
    for path in ("/server_info", "/get_server_info"):
        info = httpx.get(spec_server.url + path).json()
        for key in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
            assert expected[key] is not None
            assert info[key] == expected[key], key
        assert info["tp_size"] == expected["tp_size"]
        assert info["version"].endswith("-autotune-sim")
        assert info["autotune_sim"]["profile"] == LLAMA
        assert info["autotune_sim"]["seed"] == 1234
        assert info["autotune_sim"]["gpu_ids"] is None
        assert isinstance(info["internal_states"], list) and len(info["internal_states"]) == 1
        assert "last_gen_throughput" in info["internal_states"][0]
    assert "deprecated" in spec_server.log


def test_generate_non_streaming(spec_server: Sim) -> None:
    r = httpx.post(spec_server.url + "/generate", timeout=30, json={
        "text": "Explain speculative decoding.", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}})
    assert r.status_code == 200, r.text
    out = r.json()
    meta = out["meta_info"]
    assert meta["completion_tokens"] == 40 == len(out["output_ids"])
    assert meta["finish_reason"] == {"type": "length", "length": 40}
    assert meta["prompt_tokens"] > 0 and meta["e2e_latency"] > 0
    assert isinstance(out["text"], str) and len(out["text"]) > 0
    assert meta["spec_verify_ct"] >= 1
    assert meta["spec_accept_length"] == pytest.approx(40 / meta["spec_verify_ct"])
    assert 0 <= meta["spec_accept_rate"] <= 1
    assert meta["spec_num_proposed_drafts"] >= meta["spec_num_correct_drafts"]


def test_generate_streaming_is_cumulative(spec_server: Sim) -> None:
    body = {"text": "Write a poem about GPUs.", "stream": True,
            "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}}
    with httpx.stream("POST", spec_server.url + "/generate", json=body, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert len(events) >= 2
    prev_text, prev_ids = "", []
    for ev in events:
        assert ev["text"].startswith(prev_text)
        assert ev["output_ids"][:len(prev_ids)] == prev_ids
        assert ev["meta_info"]["completion_tokens"] == len(ev["output_ids"])
        prev_text, prev_ids = ev["text"], ev["output_ids"]
    assert all(ev["meta_info"]["finish_reason"] is None for ev in events[:-1])
    last = events[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 60}
    assert last["completion_tokens"] == 60
    assert "spec_verify_ct" in last and "e2e_latency" in last
    # Speculation: some chunks carry several tokens.
    sizes = [b["meta_info"]["completion_tokens"] - a["meta_info"]["completion_tokens"]
             for a, b in itertools.pairwise(events)]
    assert max(sizes) > 1
    # The same prompt without streaming gives the same tokens.
    whole = httpx.post(spec_server.url + "/generate", timeout=30, json={**body, "stream": False}).json()
    assert whole["output_ids"] == events[-1]["output_ids"] and whole["text"] == events[-1]["text"]


def test_completions(spec_server: Sim) -> None:
    body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 30, "ignore_eos": True}
    plain = httpx.post(spec_server.url + "/v1/completions", json=body, timeout=30).json()
    assert plain["object"] == "text_completion" and plain["model"] == "m"
    assert plain["choices"][0]["finish_reason"] == "length"
    assert plain["usage"]["completion_tokens"] == 30
    assert plain["usage"]["total_tokens"] == 30 + plain["usage"]["prompt_tokens"]
    with httpx.stream("POST", spec_server.url + "/v1/completions", timeout=30,
                      json={**body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        events = sse_events(r)
    usage_chunk = events[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 30
    text_chunks = events[:-1]
    assert all(ev["object"] == "text_completion" for ev in text_chunks)
    assert text_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(ev["choices"][0]["text"] for ev in text_chunks) == plain["choices"][0]["text"]
    with httpx.stream("POST", spec_server.url + "/v1/completions", timeout=30,
                      json={**body, "stream": True}) as r:
        assert all(ev["choices"] for ev in sse_events(r))  # no usage chunk unless asked


def test_chat_completions(spec_server: Sim) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 25,
            "ignore_eos": True}
    plain = httpx.post(spec_server.url + "/v1/chat/completions", json=body, timeout=30).json()
    assert plain["object"] == "chat.completion"
    msg = plain["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["content"]
    assert plain["usage"]["completion_tokens"] == 25
    with httpx.stream("POST", spec_server.url + "/v1/chat/completions", timeout=30,
                      json={**body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        events = sse_events(r)
    assert all(ev["object"] == "chat.completion.chunk" for ev in events)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    usage = events[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 25
    assert usage["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    content = "".join(ev["choices"][0]["delta"].get("content") or "" for ev in events[:-1])
    assert content == msg["content"]


@pytest.mark.parametrize("path,body,fragment", [
    ("/generate", {"sampling_params": {"max_new_tokens": 4}}, "Either text, input_ids"),
    ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens must be at least 0"),
    ("/generate", {"text": "x", "sampling_params": {"top_p": 2.0}}, "top_p must be in (0, 1]"),
    ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 10_000_000}}, "maximum context length"),
    ("/v1/completions", {"prompt": "", "max_tokens": 4}, "Prompt cannot be empty"),
    ("/v1/chat/completions", {"messages": []}, "Messages cannot be empty."),
    ("/v1/chat/completions", {"messages": "hello"}, "messages"),
])
def test_bad_requests_are_400(spec_server: Sim, path: str, body: dict[str, Any], fragment: str) -> None:
    r = httpx.post(spec_server.url + path, json=body, timeout=10)
    assert r.status_code == 400, r.text
    assert fragment in r.text
    err = r.json()
    assert "error" in err or err.get("object") == "error"


def test_openai_needs_json_content_type(spec_server: Sim) -> None:
    r = httpx.post(spec_server.url + "/v1/completions", content=b'{"prompt": "x"}',
                   headers={"content-type": "text/plain"})
    assert r.status_code == 400 and "application/json" in r.text
    assert httpx.post(spec_server.url + "/generate", content=b"not json").status_code == 400


def test_metrics_with_device_timer(spec_server: Sim) -> None:
    before = metric_samples(httpx.get(spec_server.url + "/metrics").text)
    r = httpx.post(spec_server.url + "/generate", timeout=30, json={
        "text": "metrics please", "sampling_params": {"max_new_tokens": 50, "ignore_eos": True}})
    meta = r.json()["meta_info"]
    resp = httpx.get(spec_server.url + "/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    after = metric_samples(resp.text)

    def total(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
        return sum(s.value for s in samples.get(name, [])
                   if all(s.labels.get(k) == v for k, v in labels.items()))

    assert "# TYPE sglang:generation_tokens_total counter" in resp.text
    assert total(after, "sglang:generation_tokens_total", is_streaming="false") - total(
        before, "sglang:generation_tokens_total", is_streaming="false") == 50
    assert total(after, "sglang:num_requests_total") - total(before, "sglang:num_requests_total") == 1
    assert total(after, "sglang:spec_verify_calls_total") - total(
        before, "sglang:spec_verify_calls_total") == meta["spec_verify_ct"]
    fwd = {s.labels["category"]: s for s in after["sglang:forward_execution_seconds_total"]}
    assert {"eagle_draft", "target_verify", "eagle_draft_extend"} <= set(fwd)
    sample = fwd["target_verify"]
    assert sample.value > 0
    assert {"model_name", "tp_rank", "category"} <= set(sample.labels) and sample.labels["tp_rank"] == "0"
    for name in ("sglang:spec_num_steps", "sglang:spec_num_draft_tokens", "sglang:num_running_reqs",
                 "sglang:num_queue_reqs"):
        assert name in after, name
    info = httpx.get(spec_server.url + "/server_info").json()
    assert after["sglang:spec_num_steps"][0].value == info["speculative_num_steps"]
    assert after["sglang:spec_num_draft_tokens"][0].value == info["speculative_num_draft_tokens"]


def test_flush_cache_busy_then_idle(spec_server: Sim) -> None:
    body = {"text": "a long answer", "stream": True, "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
    with httpx.stream("POST", spec_server.url + "/generate", json=body, timeout=30) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        busy = httpx.post(spec_server.url + "/flush_cache")
        assert busy.status_code == 400, busy.text
        for _ in lines:
            pass
    # More than 40 decode iterations ran, so the cumulative accept length is published...
    state = httpx.get(spec_server.url + "/server_info").json()["internal_states"][0]
    assert state["avg_spec_accept_length"] > 1
    idle = httpx.post(spec_server.url + "/flush_cache")
    assert idle.status_code == 200 and "Cache flushed" in idle.text
    # ...and an idle flush resets it.
    state = httpx.get(spec_server.url + "/server_info").json()["internal_states"][0]
    assert state.get("avg_spec_accept_length") is None


# ----- other configurations -----------------------------------------------------------------------
def test_no_metrics_without_flag_and_gpu_lock(launch: Callable[..., Sim], tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    first = launch(*LLAMA_ARGS, CUDA_VISIBLE_DEVICES="3", AUTOTUNE_SIM_GPU_LOCK_DIR=str(locks))
    assert httpx.get(first.url + "/metrics").status_code == 404
    assert "CUDA_VISIBLE_DEVICES='3'" in first.log
    assert (locks / "gpu3.lock").read_text().strip() == str(first.proc.pid)
    info = httpx.get(first.url + "/server_info").json()
    assert info["autotune_sim"]["gpu_ids"] == ["3"] and info["speculative_algorithm"] is None
    second = launch(*LLAMA_ARGS, healthy=False, CUDA_VISIBLE_DEVICES="5,3",
                    AUTOTUNE_SIM_GPU_LOCK_DIR=str(locks))
    assert second.wait_exit() == 1
    assert f"GPU 3 already in use by pid {first.proc.pid}" in second.log
    os.kill(first.proc.pid, signal.SIGTERM)
    first.wait_exit()
    lines = [json.loads(x) for x in (locks / "usage.jsonl").read_text().splitlines()]
    assert len(lines) == 1, lines
    rec = lines[0]
    assert rec["pid"] == first.proc.pid and rec["cuda_visible_devices"] == "3"
    assert rec["tp_size"] == 1 and rec["port"] == first.port and rec["start"] < rec["end"]
    # The lock went with the process: the GPU can be taken again.
    third = launch(*LLAMA_ARGS, CUDA_VISIBLE_DEVICES="3", AUTOTUNE_SIM_GPU_LOCK_DIR=str(locks))
    assert third.health() == 200


def test_metrics_without_timer_plain_decode_incremental(launch: Callable[..., Sim]) -> None:
    sim = launch(*LLAMA_ARGS, "--enable-metrics", "--incremental-streaming-output")
    body = {"text": "count to ten", "stream": True, "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}}
    with httpx.stream("POST", sim.url + "/generate", json=body, timeout=30) as r:
        events = sse_events(r)
    ids = [i for ev in events for i in ev["output_ids"]]
    assert len(ids) == 12 == events[-1]["meta_info"]["completion_tokens"]
    assert "".join(ev["text"] for ev in events) == httpx.post(
        sim.url + "/generate", json={**body, "stream": False}, timeout=30).json()["text"]
    assert "spec_verify_ct" not in events[-1]["meta_info"]
    samples = metric_samples(httpx.get(sim.url + "/metrics").text)
    assert "sglang:forward_execution_seconds_total" not in samples
    assert samples["sglang:spec_accept_length"][0].value == 0  # as SGLang reports without speculation
    assert sum(s.value for s in samples["sglang:generation_tokens_total"]) >= 24


# ----- start-up failures --------------------------------------------------------------------------
@pytest.mark.parametrize("flags,fragment", [
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--tp-size", "many"], "--tp-size"),
])
def test_bad_flag_exits_2(launch: Callable[..., Sim], flags: list[str], fragment: str) -> None:
    sim = launch(*LLAMA_ARGS, *flags, healthy=False)
    assert sim.wait_exit() == 2
    assert "error:" in sim.log and fragment in sim.log


def test_bad_profile_exits_1(launch: Callable[..., Sim]) -> None:
    sim = launch(*LLAMA_ARGS, healthy=False, profile="no-such-profile")
    assert sim.wait_exit() == 1
    assert "no-such-profile" in sim.log and "AUTOTUNE_SIM_PROFILE" in sim.log


def test_bad_fault_spec_exits_1(launch: Callable[..., Sim]) -> None:
    sim = launch(*LLAMA_ARGS, healthy=False, AUTOTUNE_SIM_FAULT="explode")
    assert sim.wait_exit() == 1
    assert "unknown fault 'explode'" in sim.log


def test_too_few_gpus(launch: Callable[..., Sim]) -> None:
    sim = launch(*KIMI_ARGS, healthy=False, profile=KIMI, CUDA_VISIBLE_DEVICES="0,1")
    assert sim.wait_exit() == 1
    assert "tp_size=8" in sim.log and "CUDA_VISIBLE_DEVICES" in sim.log
    assert "fired up" not in sim.log


def test_model_oom_message(launch: Callable[..., Sim]) -> None:
    # Kimi-K2.5 on one GPU cannot hold its weights.
    sim = launch("--model-path", "moonshotai/Kimi-K2.5", healthy=False, profile=KIMI)
    assert sim.wait_exit() == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in sim.log
    assert "Load weight begin" in sim.log and "fired up" not in sim.log


def test_fault_oom(launch: Callable[..., Sim]) -> None:
    sim = launch(*LLAMA_ARGS, healthy=False, AUTOTUNE_SIM_FAULT="oom")
    assert sim.wait_exit() == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in sim.log


def test_fault_crash_at_start(launch: Callable[..., Sim]) -> None:
    sim = launch(*LLAMA_ARGS, healthy=False, AUTOTUNE_SIM_FAULT="crash_at_start")
    assert sim.wait_exit() == 1
    assert "Traceback (most recent call last)" in sim.log and "crash_at_start" in sim.log
    assert "fired up" not in sim.log


def test_fault_never_healthy(launch: Callable[..., Sim]) -> None:
    sim = launch(*LLAMA_ARGS, healthy=False, AUTOTUNE_SIM_FAULT="never_healthy")
    deadline = time.monotonic() + 20
    while sim.health() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)  # far beyond the 0.2 s start-up
    assert sim.health() == 503
    assert httpx.get(sim.url + "/ready").status_code == 503
    assert httpx.post(sim.url + "/generate", json={"text": "x"}).status_code == 503
    assert sim.proc.poll() is None


@pytest.mark.slow  # 8 s at load ~8 (make test-fast leaves it out)
def test_fault_slow_start_then_hang_then_crash_after_requests(launch: Callable[..., Sim]) -> None:
    sim = launch(*LLAMA_ARGS, healthy=False,
                 AUTOTUNE_SIM_FAULT="slow_start:1.5,hang_mid_stream:8,crash_after_requests:2")
    t0 = time.monotonic()
    codes = []
    while time.monotonic() - t0 < 30:
        code = sim.health()
        codes.append(code)
        if code == 200:
            break
        time.sleep(0.05)
    assert codes[-1] == 200 and 503 in codes
    assert time.monotonic() - t0 > 1.0  # slow_start:1.5, not the 0.2 s of AUTOTUNE_SIM_STARTUP_S
    # Request 1 hangs after 8 tokens: the connection stays open, nothing more arrives.
    body = {"text": "hang", "stream": True, "sampling_params": {"max_new_tokens": 100, "ignore_eos": True}}
    got = []
    with pytest.raises(httpx.ReadTimeout), httpx.stream("POST", sim.url + "/generate", json=body,
                      timeout=httpx.Timeout(10.0, read=1.5)) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                got.append(json.loads(line[6:]))
    assert got and 8 <= got[-1]["meta_info"]["completion_tokens"] < 100
    assert sim.proc.poll() is None and sim.health() == 200
    # Request 2 (shorter than the hang point) completes.
    ok = httpx.post(sim.url + "/generate", timeout=10,
                    json={"text": "short", "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}})
    assert ok.status_code == 200 and ok.json()["meta_info"]["completion_tokens"] == 4
    # Request 3 kills the server mid-stream.
    crash_body = {**body, "text": "crash"}
    with pytest.raises(httpx.TransportError), httpx.stream("POST", sim.url + "/generate", json=crash_body,
                                                           timeout=10) as r:
        for _ in r.iter_lines():
            pass
    assert sim.wait_exit() == 1
    assert "crash_after_requests:2" in sim.log and "Traceback" in sim.log


def test_fault_crash_after_s(launch: Callable[..., Sim], tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    sim = launch(*LLAMA_ARGS, AUTOTUNE_SIM_FAULT="crash_after_s:0.5", CUDA_VISIBLE_DEVICES="1",
                 AUTOTUNE_SIM_GPU_LOCK_DIR=str(locks))
    ready_at = time.monotonic()
    assert sim.wait_exit() == 1
    assert time.monotonic() - ready_at < 10
    assert "crash_after_s:0.5" in sim.log
    rec = json.loads((locks / "usage.jsonl").read_text())
    assert rec["pid"] == sim.proc.pid and rec["end"] >= rec["start"]


# ----- the streaming path is lean -----------------------------------------------------------------
def test_a_zero_compute_profile_streams_every_token_at_concurrency_8(launch: Callable[..., Sim],
                                                                       tmp_path: Path) -> None:
    """With a profile that costs no time, 8 concurrent streams of 2,000 tokens each arrive whole.
    The streaming rate this gives (>= 20k tokens/s: what the benchmark client needs from the
    emulator) is a benchmark figure (``python -m benchmarks.client_ceiling`` streams from the same
    zero-compute emulator), not a test: a loaded box moves it."""
    import asyncio

    import yaml

    import autotune.sim.profile

    builtin = Path(autotune.sim.profile.__file__).parent / "profiles" / f"{LLAMA}.yaml"
    data = yaml.safe_load(builtin.read_text())
    for key, value in list(data.items()):
        if key.endswith("_ms") and isinstance(value, (int, float)):
            data[key] = 0.0
    data["name"], data["noise_cv"] = "zero-compute", 0.0
    for section in ("nccl", "custom_all_reduce"):
        for key in ("latency_us", "latency_us_per_channel"):
            if key in (data.get(section) or {}):
                data[section][key] = 0.0
    path = tmp_path / "zero.yaml"
    path.write_text(yaml.safe_dump(data))
    sim = launch(*LLAMA_ARGS, *EAGLE3, profile=str(path))

    async def one(client: httpx.AsyncClient, i: int) -> int:
        body = {"prompt": f"prompt {i}", "max_tokens": 2000, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        tokens = 0
        async with client.stream("POST", sim.url + "/v1/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    ev = json.loads(line[6:])
                    if not ev["choices"]:
                        tokens = ev["usage"]["completion_tokens"]
        return tokens

    async def run() -> list[int]:
        async with httpx.AsyncClient(timeout=120) as client:
            return list(await asyncio.gather(*(one(client, i) for i in range(8))))

    assert asyncio.run(run()) == [2000] * 8
