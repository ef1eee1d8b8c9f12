"""The trial machinery against real emulator subprocesses on 127.0.0.1.

Nothing is mocked: every test starts ``python -m autotune.sim.server`` (start-up shortened with
``AUTOTUNE_SIM_STARTUP_S=0.2``), talks real HTTP, and checks what the bench client, the phase
profile and :mod:`autotune.trial.measure` make of it, including the failure paths (a hung stream, a crash
mid-measurement, an out-of-memory start-up) and that no process or port outlives a trial.

Server pids and ports are learnt through a wrapper interpreter (``MeasureSettings.python``) that
appends ``<pid> <argv>`` to a file and then ``exec``s the real Python, so the pid it writes is the
server's own.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from autotune.bench.client import run_benchmark
from autotune.bench.records import BenchResult
from autotune.launch.spec import LaunchSpec
from autotune.profile.phases import PhaseProfile
from autotune.profile.snapshot import scrape
from autotune.server.process import ServerProcess
from autotune.space.prompts import Prompt
from autotune.space.search_space import SearchSpace
from autotune.space.workload import Workload
from autotune.trial.baselines import FileBaselineStore, group_key
from autotune.trial.measure import evaluate, measure
from autotune.trial.measure_settings import MeasureSettings
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.verdict import judge
from tests.e2e.reliability.procs import pid_alive, wait_until

# slow: real emulator servers, one or more per test
pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
LLAMA = "llama-3.1-8b-eagle3-h100"
KIMI = "kimi-k2.5-eagle3-tp8"
SMALL_WORKLOAD = {"source": "builtin", "num_prompts": 3, "warmup_prompts": 1, "output_len": 24,
                  "concurrency": 1, "seed": 0}


# ----- helpers ------------------------------------------------------------------------------------
def sim_space(profile: str = LLAMA, *, workload: dict[str, Any] | None = None,
              tp_choices: tuple[int, ...] = (1,), repeats: int = 1) -> SearchSpace:
    """A small sim space: tp, steps, topk and draft tokens searched, EAGLE-3 fixed."""
    model = "sim/Kimi-K2.5" if profile == KIMI else "sim/Llama-3.1-8B-Instruct"
    return SearchSpace.from_dict({
        "name": "integration", "backend": "sim", "profile": profile, "model_path": model,
        "draft_model_path": model + "-EAGLE3",
        "fixed_args": {"speculative_algorithm": "EAGLE3", "mem_fraction_static": 0.85},
        "parameters": {
            "tp_size": {"type": "categorical", "choices": list(tp_choices)},
            "speculative_num_steps": {"type": "int", "low": 1, "high": 6},
            "speculative_eagle_topk": {"type": "categorical", "choices": [1, 2]},
            "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 8}},
        "workload": workload or SMALL_WORKLOAD,
        "measure": {"repeats": repeats, "startup_timeout_s": 60}})


def chain(steps: int, tp: int = 1) -> dict[str, Any]:
    return {"tp_size": tp, "speculative_num_steps": steps, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": steps + 1}


def baseline(tp: int = 1) -> dict[str, Any]:
    return {"tp_size": tp, "speculative_algorithm": None}


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def live_children() -> list[int]:
    """Pids of this process's children that are still running (not zombies)."""
    me = str(os.getpid())
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            out.append(int(entry.name))
    return out


class Launches:
    """Reads the wrapper's record: one ``(pid, argv)`` per server launched."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[tuple[int, list[str]]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            pid, _, args = line.partition(" ")
            out.append((int(pid), args.split()))
        return out

    @staticmethod
    def port(argv: list[str]) -> int:
        return int(argv[argv.index("--port") + 1])


def make_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
                 unset: tuple[str, ...] = ()) -> tuple[str, Launches]:
    """An interpreter stand-in that records each server's pid and argv, then execs Python."""
    record = tmp_path / "launches.txt"
    script = tmp_path / "python-wrapper"
    unsets = "".join(f"unset {name}\n" for name in unset)
    script.write_text(f'#!/bin/sh\n{unsets}echo "$$ $*" >> "$AUTOTUNE_TEST_LAUNCHES"\n'
                      f'exec {sys.executable} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("AUTOTUNE_TEST_LAUNCHES", str(record))
    return str(script), Launches(record)


def settings(tmp_path: Path, python: str = sys.executable, **kw: Any) -> MeasureSettings:
    return MeasureSettings(**{"repeats": 1, "startup_timeout_s": 60, "grace_s": 2.0,
                              "workdir": str(tmp_path / "work"), "python": python,
                              "validate": False, "sim_seed": 1, **kw})


@pytest.fixture
def server(sim_env: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """One emulator: Llama profile, EAGLE-3 chain of 5, metrics and device timer on (extra server
    args and env by indirect parametrisation)."""
    extra_args, extra_env = getattr(request, "param", ({}, {}))
    args = {"tp_size": 1, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 5,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 6,
            "enable_metrics": True, **extra_args}
    env = {"AUTOTUNE_SIM_PROFILE": LLAMA, "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1", **extra_env}
    spec = LaunchSpec(model_path="sim/Llama", draft_model_path="sim/Llama-EAGLE3",
                      server_args=args, env=env, backend="sim")
    with ServerProcess(lambda port: spec.argv(port=port), env=spec.env, startup_timeout_s=60,
                       grace_s=2.0, log_path=tmp_path / "server.log") as proc:
        yield proc
    assert proc.pid is not None and not pid_alive(proc.pid)


def prompts(*lengths: int, chat: bool = False) -> list[Prompt]:
    return [Prompt(id=f"p{i}", max_tokens=n, ignore_eos=True,
                   **({"messages": (("user", f"Tell me story {i}."),)} if chat
                      else {"text": f"Tell me story number {i}, please."}))
            for i, n in enumerate(lengths)]


def data_events(raw: list[tuple[float, bytes]]) -> list[dict[str, Any]]:
    """The JSON objects of an SSE byte stream, parsed here independently of the client."""
    text = b"".join(chunk for _, chunk in raw).decode()
    out = []
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


# ----- stream parsing against the real server ---------------------------------------------------
@pytest.mark.parametrize("api", ["generate", "chat"])
def test_multi_token_chunks_add_up_to_server_counts(server: ServerProcess, api: str) -> None:
    wanted = [40, 57, 64]
    bench = asyncio.run(run_benchmark(server.url, prompts(*wanted, chat=api == "chat"), api=api,
                                      concurrency=1, keep_raw=True, request_timeout_s=30))
    assert bench.completed == 3 and bench.failed == 0
    multi = 0
    for rec, n in zip(bench.records, wanted, strict=True):
        assert rec.ok and rec.completion_tokens == n
        counts = rec.chunk_tokens
        assert counts and counts[-1] == n and all(b > a for a, b in itertools.pairwise(counts))
        steps = [b - a for a, b in itertools.pairwise(counts)]
        multi += sum(k > 1 for k in steps)
        # ITL samples weigh every token after the first chunk exactly once.
        assert sum(k for _, k in rec.itl_samples()) == n - counts[0]
        # At batch 1 every speculative cycle streams one chunk after the prefill's.
        assert rec.spec["spec_verify_ct"] == len(counts) - 1
        events = data_events(rec.raw or [])
        if api == "generate":
            # Cumulative stream: each chunk's output_ids is the whole output so far.
            assert all(len(e["output_ids"]) == e["meta_info"]["completion_tokens"] for e in events)
            assert len(events[-1]["output_ids"]) == n
        else:
            content = [e for e in events if e.get("choices") and e["choices"][0]["delta"].get("content")]
            assert [e["usage"]["completion_tokens"] for e in content] == counts
            assert events[-1]["usage"]["completion_tokens"] == n
    assert multi > 0, "an EAGLE chain at batch 1 should stream multi-token chunks"
    assert bench.total_completion_tokens == sum(wanted)
    assert bench.accept_length == pytest.approx(
        sum(wanted) / sum(r.spec["spec_verify_ct"] for r in bench.records))


@pytest.mark.parametrize("server", [({"incremental_streaming_output": True}, {})], indirect=True)
def test_incremental_generate_stream_deltas_sum_to_completion_tokens(server: ServerProcess) -> None:
    bench = asyncio.run(run_benchmark(server.url, prompts(33, 50), api="generate", concurrency=2,
                                      keep_raw=True, request_timeout_s=30))
    assert bench.completed == 2
    for rec in bench.records:
        events = data_events(rec.raw or [])
        deltas = [len(e["output_ids"]) for e in events]
        assert sum(deltas) == rec.completion_tokens == rec.chunk_tokens[-1]
        assert max(deltas) > 1


# ----- failed requests are failed and not counted -----------------------------------------------
@pytest.mark.parametrize("server", [({}, {"AUTOTUNE_SIM_FAULT": "hang_mid_stream:20"})],
                         indirect=True)
def test_hung_stream_is_failed_and_not_counted(server: ServerProcess) -> None:
    t0 = time.monotonic()
    bench = asyncio.run(run_benchmark(server.url, prompts(8, 60, 12), api="generate",
                                      concurrency=3, request_timeout_s=1.5))
    assert time.monotonic() - t0 < 10
    hung = bench.records[1]
    assert not hung.ok and "request_timeout_s" in (hung.error or "")
    assert hung.ttft_s is None and hung.e2e_s is None and hung.decode_tok_s is None
    assert hung.chunk_tokens and hung.chunk_tokens[-1] >= 20  # it did stream, then stalled
    assert bench.completed == 2 and bench.failed == 1
    assert bench.total_completion_tokens == 8 + 12
    assert bench.output_tok_s == pytest.approx(20 / bench.duration_s)
    assert sum(bench.errors.values()) == 1


@pytest.mark.parametrize("server", [({}, {"AUTOTUNE_SIM_FAULT": "crash_after_requests:2"})],
                         indirect=True)
def test_requests_cut_by_a_crash_are_failed_and_not_counted(server: ServerProcess) -> None:
    bench = asyncio.run(run_benchmark(server.url, prompts(10, 11, 30, 13), api="chat",
                                      concurrency=1, request_timeout_s=10))
    assert [r.ok for r in bench.records] == [True, True, False, False]
    assert bench.completed == 2 and bench.total_completion_tokens == 21
    assert bench.records[2].chunk_tokens  # the crash came mid-stream, after the first chunk
    assert all(r.completion_tokens is None or not r.ok for r in bench.records[2:])
    # The client sees the stream cut as the emulator goes down, which is before it has exited.
    assert wait_until(lambda: not server.alive(), timeout_s=10), "the crashed server is still running"


# ----- whole trials -------------------------------------------------------------------------------
def test_crash_during_measurement_fails_the_trial_and_leaks_nothing(
        sim_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The warm-up request and two measured ones are served; the third measured one kills it.
    monkeypatch.setenv("AUTOTUNE_SIM_FAULT", "crash_after_requests:3")
    python, launches = make_wrapper(tmp_path, monkeypatch)
    space = sim_space(workload={**SMALL_WORKLOAD, "num_prompts": 5})
    before = set(live_children())
    result = measure(space.trial_config(chain(3)), Workload.from_spec(space.workload),
                     settings(tmp_path, python))
    assert result.status == Status.FAILED and not result.ok and result.feasible is False
    assert "crashed during measurement" in (result.reason or "")
    assert result.failure == "crash_during_measurement"
    assert "crash_after_requests:3" in (result.log_tail or "")
    assert result.output_tok_s is None
    [(pid, argv)] = launches.all()
    assert wait_until(lambda: not pid_alive(pid), timeout_s=10)
    assert port_free(Launches.port(argv))
    assert set(live_children()) <= before, "a server or watchdog outlived the trial"


def test_stream_hung_mid_request_ends_the_trial_at_its_timeout(
        sim_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_SIM_FAULT", "hang_mid_stream:10")
    python, launches = make_wrapper(tmp_path, monkeypatch)
    space = sim_space()
    t0 = time.monotonic()
    result = measure(space.trial_config(chain(2)), Workload.from_spec(space.workload),
                     settings(tmp_path, python, trial_timeout_s=8.0))
    assert time.monotonic() - t0 < 8.0 + 10  # the timeout, plus stopping the server
    assert result.status == Status.FAILED and "trial timeout" in (result.reason or "")
    assert result.output_tok_s is None and result.log_tail
    [(pid, argv)] = launches.all()
    assert wait_until(lambda: not pid_alive(pid), timeout_s=10) and port_free(Launches.port(argv))


def test_file_baseline_store_measures_each_group_once(
        sim_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python, launches = make_wrapper(tmp_path, monkeypatch)
    space = sim_space()
    wl = Workload.from_spec(space.workload)
    st = settings(tmp_path, python)
    store_dir = tmp_path / "baselines"
    first = evaluate(space.trial_config(chain(2)), workload=wl,
                     baseline_config=space.trial_config(baseline()), settings=st,
                     store=FileBaselineStore(store_dir))
    # A second store on the same directory, as another trial process of the search would have.
    second = evaluate(space.trial_config(chain(4)), workload=wl,
                      baseline_config=space.trial_config(baseline()), settings=st,
                      store=FileBaselineStore(store_dir))
    assert first.ok and second.ok
    started = [argv for _, argv in launches.all()]
    spec_runs = [a for a in started if "--speculative-algorithm" in a]
    base_runs = [a for a in started if "--speculative-algorithm" not in a]
    assert len(base_runs) == 1 and len(spec_runs) == 2
    assert len(list((tmp_path / "work").glob("baseline-*.log"))) == 1
    assert first.baseline_tok_s is not None and first.baseline_tok_s == second.baseline_tok_s
    assert second.speedup == pytest.approx(second.output_tok_s / second.baseline_tok_s)
    assert len(list(store_dir.glob("*.json"))) == 1


def test_concurrency_levels_measure_every_level_on_one_server_and_judge_each(
        sim_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python, launches = make_wrapper(tmp_path, monkeypatch)
    space = sim_space(workload={**SMALL_WORKLOAD, "num_prompts": 8, "concurrency": [1, 8],
                                      "primary_concurrency": 8})
    wl = Workload.from_spec(space.workload)
    result = evaluate(space.trial_config(chain(3)), workload=wl,
                      baseline_config=space.trial_config(baseline()), settings=settings(tmp_path, python),
                      store=FileBaselineStore(tmp_path / "baselines"))
    # One start-up each for the config and its baseline, whatever the number of levels.
    assert len(launches.all()) == 2
    assert [lv["concurrency"] for lv in result.levels] == [1, 8]
    at = {lv["concurrency"]: lv for lv in result.levels}
    base = FileBaselineStore(tmp_path / "baselines").get(group_key(space.trial_config(baseline())))
    base_at = {lv["concurrency"]: lv for lv in base.levels}
    for c in (1, 8):
        assert at[c]["completed"] == 8 and at[c]["output_tok_s"] > 0
        assert at[c]["baseline_tok_s"] == base_at[c]["output_tok_s"]
        assert at[c]["speedup"] == pytest.approx(at[c]["output_tok_s"] / base_at[c]["output_tok_s"])
        assert at[c]["status"] == (Status.FEASIBLE if at[c]["speedup"] > 1.0 else Status.INFEASIBLE)
    # The trial's own figures and verdict are the primary level's (8), as Optuna is told.
    assert result.output_tok_s == at[8]["output_tok_s"] and result.speedup == at[8]["speedup"]
    assert result.status == at[8]["status"]
    # Eight requests in flight decode more tokens per second than one, on both servers.
    assert at[8]["output_tok_s"] > at[1]["output_tok_s"]
    assert base_at[8]["output_tok_s"] > base_at[1]["output_tok_s"]
    assert {r["concurrency"] for r in result.records} == {1, 8}


def test_startup_oom_is_a_failed_result_with_an_oom_reason(sim_env: Path, tmp_path: Path) -> None:
    # Kimi-K2.5's ~600 GiB of weights do not fit on 4 of its 96 GiB GPUs.
    space = sim_space(KIMI, tp_choices=(4, 8))
    result = measure(space.trial_config(baseline(tp=4)), Workload.from_spec(space.workload),
                     settings(tmp_path))
    assert result.status == Status.FAILED and result.feasible is False
    assert "out of memory" in (result.reason or "") and result.failure == "oom"
    assert "OutOfMemoryError" in (result.log_tail or "")
    assert result.output_tok_s is None and result.phases is None
    assert result.launch_command and "--tp-size 4" in result.launch_command


def test_without_the_device_timer_phase_times_are_none_not_zero(
        sim_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A server build without SGLang's device timer: the wrapper drops the variable.
    python, launches = make_wrapper(tmp_path, monkeypatch,
                                    unset=("SGLANG_ENABLE_METRICS_DEVICE_TIMER",))
    space = sim_space()
    result = measure(space.trial_config(chain(3)), Workload.from_spec(space.workload),
                     settings(tmp_path, python))
    assert result.ok, result.reason
    ph = result.phases or {}
    for key in ("draft_ms", "verify_ms", "extend_ms", "decode_ms", "other_ms", "draft_pct",
                "verify_pct", "other_pct"):
        assert key in ph and ph[key] is None, (key, ph.get(key))
    assert ph["device_timer"] is False
    # What the counters still know is known.
    assert result.output_tok_s and result.output_tok_s > 0
    assert ph["cycle_ms"] and ph["cycle_ms"] > 0
    assert result.accept_length and result.accept_length > 1
    # A baseline without phases leaves the break-even step unknown, not 0.
    base = judge(TrialResult(status="ok", reason=None, params={}, is_baseline=True,
                             output_tok_s=result.output_tok_s / 2), None)
    judged = judge(result, base)
    assert judged.baseline_decode_step_ms is None and judged.break_even_accept_length is None
    assert len(launches.all()) == 1


def test_with_the_device_timer_a_baseline_profiles_decode(sim_env: Path, tmp_path: Path) -> None:
    space = sim_space()
    result = measure(space.trial_config(baseline()), Workload.from_spec(space.workload),
                     settings(tmp_path))
    assert result.ok and result.accept_length is None  # no speculation: unknown, not 0
    ph = result.phases or {}
    assert ph["device_timer"] is True and ph["decode_ms"] > 0 and ph["cycle_ms"] >= ph["decode_ms"]


def cli_space(tmp_path: Path, *, repeats: int, forced_accept: bool = False) -> Path:
    """A small sim space file for the trial CLI: steps searched, top-k 1, EAGLE-3 fixed; with
    ``forced_accept`` also SGLANG_SIMULATE_ACC_LEN in {2, 3}."""
    forced = ('\n          SGLANG_SIMULATE_ACC_LEN: {type: categorical, choices: ["2", "3"]}'
              if forced_accept else "")
    space_file = tmp_path / "space.yaml"
    space_file.write_text(textwrap.dedent(f"""\
        name: cli
        backend: sim
        profile: {LLAMA}
        model_path: sim/Llama-3.1-8B-Instruct
        draft_model_path: sim/EAGLE3-LLaMA3.1-Instruct-8B
        fixed_args: {{speculative_algorithm: EAGLE3, tp_size: 1}}
        parameters:
          speculative_num_steps: {{type: int, low: 1, high: 6}}
          speculative_eagle_topk: {{type: categorical, choices: [1]}}{forced}
        workload: {{num_prompts: 2, warmup_prompts: 1, output_len: 24, concurrency: 1}}
        measure: {{repeats: {repeats}, startup_timeout_s: 60}}
        """))
    return space_file


def test_trial_cli_json_has_the_promised_keys(sim_env: Path, tmp_path: Path) -> None:
    space_file = cli_space(tmp_path, repeats=2)
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.trial", "--space", str(space_file), "--params",
         json.dumps({"speculative_num_steps": 3, "speculative_eagle_topk": 1}), "--json",
         "--workdir", str(tmp_path / "work")],
        cwd=REPO, capture_output=True, text=True, timeout=100, env=dict(os.environ), check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("output_tok_s", "output_tok_s_spread", "baseline_tok_s", "speedup",
                "accept_length", "break_even_accept_length", "feasible", "status", "reason",
                "phases", "ttft_ms_p50", "itl_ms_p50", "launch_command"):
        assert key in out, key
    for key in ("draft_ms", "verify_ms", "extend_ms", "other_ms", "cycle_ms", "shares"):
        assert key in out["phases"], key
    assert out["output_tok_s"] > 0 and out["baseline_tok_s"] > 0
    assert out["output_tok_s_spread"] is not None and out["output_tok_s_spread"] >= 0
    assert out["speedup"] == pytest.approx(out["output_tok_s"] / out["baseline_tok_s"])
    assert out["accept_length"] > 1 and out["break_even_accept_length"] > 0
    assert out["status"] in ("feasible", "infeasible") and isinstance(out["feasible"], bool)
    assert (out["reason"] is None) == out["feasible"]
    assert out["ttft_ms_p50"] > 0 and out["itl_ms_p50"] > 0
    shares = out["phases"]["shares"]
    assert {"draft", "verify", "extend", "other"} <= set(shares)
    assert shares["verify"] > shares["draft"] > 0
    assert "--speculative-num-steps 3" in out["launch_command"]
    # One breakdown a repeat, in order, whose parts add up to its wall time.
    rows = out["repeat_breakdown"]
    assert [r["tok_s"] for r in rows] == out["output_tok_s_repeats"] and len(rows) == 2
    for r in rows:
        assert r["accept_length"] > 1 and r["cycles"] > 0 and r["ttft_ms_p50"] > 0
        assert r["prefill_s"] > 0 and r["cycle_gpu_s"] > 0
        assert r["prefill_s"] + r["cycle_gpu_s"] + r["host_s"] == pytest.approx(r["wall_s"])
    # Its phases on stderr (stdout stays the record), each stamped with the time since start, in order.
    phases = [line.split("] ", 1)[1] for line in proc.stderr.splitlines() if line.startswith("[")]
    assert phases[0] == "starting the baseline server", proc.stderr
    assert phases[1].startswith("server up after ") and phases[2].startswith("warming up")
    assert [p.split(":")[0] for p in phases if p.startswith("round ")] == [
        "round 1 of 2", "round 2 of 2", "round 1 of 2", "round 2 of 2"], proc.stderr
    assert "starting the trial server" in phases


# ----- the phase profile from a live server ------------------------------------------------------
def test_phase_profile_from_live_snapshots_matches_the_request_counts(server: ServerProcess) -> None:
    async def run() -> tuple[BenchResult, PhaseProfile]:
        async with httpx.AsyncClient(timeout=10) as client:
            before = await scrape(client, server.url)
            bench = await run_benchmark(server.url, prompts(30, 45), api="generate",
                                        concurrency=1, request_timeout_s=30)
            after = await scrape(client, server.url)
        return bench, PhaseProfile.from_snapshots(before, after, wall_s=bench.duration_s or 1.0,
                                                  max_batch=1, speculative=True,
                                                  meta_accept_length=bench.accept_length)

    bench, prof = asyncio.run(run())
    verify_ct = sum(r.spec["spec_verify_ct"] for r in bench.records)
    assert prof.delta_generation_tokens == 75 and prof.delta_requests == 2
    assert prof.delta_verify_calls == verify_ct and prof.cycles == verify_ct
    assert prof.accept_length_window == pytest.approx(bench.accept_length)
    assert prof.accept_length == pytest.approx(73 / verify_ct)
    assert prof.device_timer is True and prof.accept_consistent is True
    assert 0 < prof.draft_ms < prof.verify_ms and prof.extend_ms > 0  # type: ignore[operator]
    shares = [v for v in prof.shares.values() if v is not None]
    assert sum(shares) == pytest.approx(100.0)


def test_trial_cli_baseline_store_measures_the_baseline_once(sim_env: Path, tmp_path: Path) -> None:
    """Two CLI calls naming one --baseline-store share one baseline, also when they force
    different accept lengths: SGLANG_SIMULATE_ACC_LEN only matters to the speculative worker."""
    space_file = cli_space(tmp_path, repeats=1, forced_accept=True)
    store = tmp_path / "baselines"
    outs = []
    for steps, acc in ((2, "2"), (3, "3")):
        proc = subprocess.run(
            [sys.executable, "-m", "autotune.trial", "--space", str(space_file), "--params",
             json.dumps({"speculative_num_steps": steps, "speculative_eagle_topk": 1,
                         "SGLANG_SIMULATE_ACC_LEN": acc}),
             "--json", "--baseline-store", str(store), "--workdir", str(tmp_path / f"w{steps}")],
            cwd=REPO, capture_output=True, text=True, timeout=100, env=dict(os.environ),
            check=False)
        assert proc.returncode in (0, 1), proc.stderr
        outs.append(json.loads(proc.stdout))
    assert len(list(store.glob("*.json"))) == 1
    assert outs[0]["baseline_tok_s"] is not None
    assert outs[0]["baseline_tok_s"] == outs[1]["baseline_tok_s"]  # reused, not re-measured
    assert "SGLANG_SIMULATE_ACC_LEN=3" in outs[1]["launch_command"]
    # The second call launched one server (its own); the first launched two.
    assert len(list((tmp_path / "w2").glob("**/*.log"))) > len(list((tmp_path / "w3").glob("**/*.log")))
    # Another workload naming the same DIR is refused before it starts anything: the stored
    # baseline holds for its own workload only.
    other = tmp_path / "other"
    other.mkdir()
    longer = cli_space(other, repeats=1, forced_accept=True)
    longer.write_text(longer.read_text().replace("output_len: 24", "output_len: 40"))
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.trial", "--space", str(longer), "--params",
         json.dumps({"speculative_num_steps": 2, "speculative_eagle_topk": 1, "SGLANG_SIMULATE_ACC_LEN": "2"}),
         "--json", "--baseline-store", str(store), "--workdir", str(tmp_path / "w-other")],
        cwd=REPO, capture_output=True, text=True, timeout=100, env=dict(os.environ), check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "measured-on.txt" in proc.stderr and "another workload" in proc.stderr
    assert "name another --baseline-store" in proc.stderr
    assert not (tmp_path / "w-other").exists() and len(list(store.glob("*.json"))) == 1
