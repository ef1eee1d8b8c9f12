"""The NCCL probe: real worker processes on the gloo backend (the CPU path of the same code), the
candidate files and their errors, the NVLink-multicast guard, the ranking, failed candidates and
the clean-up of every worker on every way out.

Worker processes are found by a marker variable unique to each test, which they inherit: a scan
of /proc then finds any that outlived the probe. Nothing here kills a process it did not start.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from autotune.cli.probe import main
from autotune.errors import ConfigError
from autotune.nccl.candidates import (
    MULTICAST_OFF,
    load_candidates,
    name_of,
    parse_name,
    worker_env,
)
from autotune.nccl.candidates import (
    NcclCandidate as Candidate,
)
from autotune.nccl.probe import ProbeSettings, format_table, rank_rows, run_probe
from autotune.space.nccl_candidates import candidates_from_space
from autotune.space.search_space import load_space

REPO = Path(__file__).resolve().parents[3]
MARKER = "AUTOTUNE_NCCL_PROBE_TEST_MARKER"
FAST = {"tp": 2, "hidden": 32, "tokens": (1, 8, 64, 128), "iters": 5, "warmup": 1, "backend": "gloo"}


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch) -> str:
    value = uuid.uuid4().hex
    monkeypatch.setenv(MARKER, value)
    monkeypatch.delenv("AUTOTUNE_NCCL_PROBE_FAULT", raising=False)
    return value


def _workers(marker: str) -> list[int]:
    """Probe workers alive with this test's marker (read-only /proc scan)."""
    want = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if want in environ and b"autotune.nccl.worker" in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def _assert_no_workers(marker: str, *, grace_s: float = 5.0) -> None:
    deadline = time.monotonic() + grace_s
    while _workers(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _workers(marker), "probe workers outlived the probe"


# ---- real processes ------------------------------------------------------------------------------

@pytest.mark.slow  # real gloo worker processes
def test_gloo_probe_measures_ranks_and_reports(marker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The probe's own environment asks for NVLink multicast and an algorithm: the guard must turn
    # multicast off, and a candidate's null must remove the inherited NCCL_ALGO.
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    cands = [Candidate("default", {"NCCL_ALGO": None}), Candidate("NCCL_ALGO=Ring", {"NCCL_ALGO": "Ring"}),
             Candidate("NCCL_PROTO=LL", {"NCCL_PROTO": "LL", "NCCL_ALGO": None})]
    seen_rows = []
    report = run_probe(cands, ProbeSettings(**FAST), on_row=seen_rows.append)

    assert [r["name"] for r in seen_rows] == ["default", "NCCL_ALGO=Ring", "NCCL_PROTO=LL"]
    rows = {r["name"]: r for r in report["rows"]}
    for row in rows.values():
        assert row["status"] == "ok", row["reason"]
        assert [s["tokens"] for s in row["sizes"]] == [1, 8, 64, 128]
        assert [s["phase"] for s in row["sizes"]] == ["decode", "decode", "verify", "prefill"]
        for s in row["sizes"]:
            assert s["iters"] == 5 and 0 < s["p10_us"] <= s["median_us"] <= s["p90_us"]
            assert s["bytes"] == s["tokens"] * 32 * (2 if row["dtype"] == "bfloat16" else 4)
            assert len(s["rank_medians_us"]) == 2
        assert row["decode_us"] == pytest.approx((row["sizes"][0]["median_us"]
                                                  + row["sizes"][1]["median_us"]) / 2)
        assert row["verify_us"] == row["sizes"][2]["median_us"]
        seen = row["env_seen"]
        assert seen["NCCL_NVLS_ENABLE"] == "0"
        assert seen["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and seen["NVSHMEM_DISABLE_NVLS"] == "1"
    assert "NCCL_ALGO" not in rows["default"]["env_seen"]
    assert rows["NCCL_ALGO=Ring"]["env_seen"]["NCCL_ALGO"] == "Ring"
    assert rows["NCCL_PROTO=LL"]["env_seen"]["NCCL_PROTO"] == "LL"

    # Ranking: by decode latency, every candidate placed once.
    ranked = [rows[n] for n in report["ranking"]]
    assert sorted(report["ranking"]) == sorted(rows)
    assert [r["decode_us"] for r in ranked] == sorted(r["decode_us"] for r in ranked)
    assert [r["rank"] for r in ranked] == [1, 2, 3]
    spread = report["spread"]
    assert spread["default_us"] == rows["default"]["decode_us"]
    assert spread["best_us"] == ranked[0]["decode_us"]
    assert spread["default_over_best"] == pytest.approx(spread["default_us"] / spread["best_us"])
    assert report["host"]["backend"] == "gloo" and report["args"]["tokens"] == [1, 8, 64, 128]
    json.dumps(report)  # JSON-ready as it is
    table = format_table(report)
    assert table.splitlines()[2].split()[1] == report["ranking"][0]
    _assert_no_workers(marker)


@pytest.mark.slow  # real gloo worker processes
def test_crashed_and_hung_candidates_are_failed_rows(marker: str) -> None:
    cands = [Candidate("exits", {"AUTOTUNE_NCCL_PROBE_FAULT": "exit:1"}),
             Candidate("hangs", {"AUTOTUNE_NCCL_PROBE_FAULT": "hang"}),
             Candidate("default", {})]
    settings = ProbeSettings(**{**FAST, "tokens": (1, 8)}, timeout_s=3.0)
    report = run_probe(cands, settings)
    rows = {r["name"]: r for r in report["rows"]}
    assert rows["exits"]["status"] == "failed"
    assert "rank 1 exited with code 3" in rows["exits"]["reason"]
    assert "exits on purpose" in rows["exits"]["reason"]  # the worker's own last words
    assert rows["hangs"]["status"] == "failed" and "timed out" in rows["hangs"]["reason"]
    for name in ("exits", "hangs"):
        assert rows[name]["sizes"] == [] and rows[name]["rank"] is None
        assert rows[name]["decode_us"] is None  # unknown, never 0
    assert rows["default"]["status"] == "ok" and report["ranking"] == ["default"]
    assert report["failed"] == ["exits", "hangs"]
    assert "exits failed: rank 1 exited" in format_table(report)
    _assert_no_workers(marker)


@pytest.mark.slow  # real gloo worker processes
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_no_worker_outlives_an_interrupted_or_killed_probe(tmp_path: Path, marker: str,
                                                           sig: signal.Signals) -> None:
    cands = tmp_path / "cands.yaml"
    cands.write_text("- {AUTOTUNE_NCCL_PROBE_FAULT: hang}\n- default\n- NCCL_ALGO=Ring\n")
    work = tmp_path / "work"
    # Started with SIGINT ignored, as a shell script's background job is (and as this suite's
    # process once left it): an explicit SIGINT must still interrupt the probe. It did not, and the
    # probe ran on to its end (exit 0 after the hung candidate's 60 s timeout).
    proc = subprocess.Popen([sys.executable, "-m", "autotune.nccl_probe", "--tp", "2", "--hidden", "8",
                             "--candidates", str(cands), "--backend", "gloo", "--timeout", "60",
                             "--workdir", str(work)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))

    def ready() -> int:
        return sum(1 for f in work.glob("cand*/rank*.json") if '"ready"' in f.read_text())

    try:
        deadline = time.monotonic() + 60
        # The hung candidate's two workers, and the next candidate's, started ahead, all set up
        # and waiting (the hung ones got their go and sleep).
        while ready() < 4 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        assert ready() >= 4 and len(_workers(marker)) == 4, "the workers never got ready"
        proc.send_signal(sig)
        proc.wait(timeout=30)
        if sig == signal.SIGINT:
            assert proc.returncode == 130
            assert "interrupted" in proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _assert_no_workers(marker, grace_s=10.0)


# ---- candidates ----------------------------------------------------------------------------------

def test_candidate_files_in_every_form(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("candidates:\n  - default\n  - NCCL_ALGO=Ring,NCCL_PROTO=LL\n"
                    "  - {NCCL_MIN_NCHANNELS: 4, NCCL_MAX_NCHANNELS: 4}\n"
                    "  - {name: no-algo, env: {NCCL_ALGO: null}}\n")
    cands = load_candidates(path)
    assert [c.name for c in cands] == ["default", "NCCL_ALGO=Ring,NCCL_PROTO=LL",
                                       "NCCL_MIN_NCHANNELS=4,NCCL_MAX_NCHANNELS=4", "no-algo"]
    assert cands[1].env == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    assert cands[2].env == {"NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "4"}
    assert cands[3].env == {"NCCL_ALGO": None}
    as_json = tmp_path / "c.json"
    as_json.write_text(json.dumps(["default", {"NCCL_ALGO": "Tree"}]))
    assert [c.name for c in load_candidates(as_json)] == ["default", "NCCL_ALGO=Tree"]
    assert parse_name(name_of({"NCCL_ALGO": "Ring", "NCCL_PROTO": None, "X_Y": 2.0})) == \
        {"NCCL_ALGO": "Ring", "X_Y": "2"}


@pytest.mark.parametrize("text, line, field, words", [
    ("candidates:\n  - default\n  - 42\n", 3, "candidates[1]", "name string or a mapping"),
    ("candidates:\n  - default\n  - {nccl_algo: Ring}\n", 3, "candidates[1].nccl_algo",
     "UPPER_CASE"),
    ("candidates:\n  - default\n  - {NCCL_ALGO: true}\n", 3, "candidates[1].NCCL_ALGO",
     "'1' or '0'"),
    ("candidates:\n  - NCCL_ALGO=Ring\n  - {NCCL_ALGO: Ring}\n", 3, "candidates[1]", "duplicate"),
    ("candidates:\n  - NCCL_ALGO\n", 2, "candidates[0]", "NAME=value"),
    ("candidates: []\n", None, "candidates", "non-empty"),
    ("candidate:\n  - default\n", None, "candidate", "unknown key"),
    ("- {name: x, env: {NCCL_ALGO: Ring}, extra: 1}\n", 1, "candidates[0]", "only 'name' and 'env'"),
])
def test_bad_candidate_files_say_where_and_what(tmp_path: Path, text: str, line: int | None,
                                                field: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_candidates(path)
    err = info.value
    assert err.file == str(path) and err.field == field and err.line == line
    assert words in str(err)


def test_candidates_from_a_space_cross_its_nccl_parameters() -> None:
    space = load_space(REPO / "search_spaces" / "kimi-k2.5-eagle3-tp8.yaml")
    cands = candidates_from_space(space)
    assert len(cands) == 3 * 4 * 3 * 4  # ALGO x PROTO x MIN x MAX, nulls included
    names = [c.name for c in cands]
    assert names[0] == "default" and len(set(names)) == len(names)
    assert "NCCL_ALGO=Ring,NCCL_PROTO=LL,NCCL_MIN_NCHANNELS=4,NCCL_MAX_NCHANNELS=16" in names
    # fixed_env is common to all, so it is in the environment but not in the names.
    assert all(c.full_env()["NCCL_NVLS_ENABLE"] == "0" for c in cands)
    assert not any("NVLS" in n for n in names)


# ---- the NVLink multicast guard ------------------------------------------------------------------

def test_nvls_is_forbidden_without_a_space_unless_allowed() -> None:
    nvls = [Candidate("default", {}), Candidate("NCCL_NVLS_ENABLE=1", {"NCCL_NVLS_ENABLE": "1"})]
    settings = ProbeSettings(tp=2, hidden=4096, tokens=(1,), backend="sim",
                             profile="llama-3.1-8b-eagle3-h100")
    with pytest.raises(ConfigError, match="--allow-nvls"):
        run_probe(nvls, settings)
    report = run_probe(nvls, settings, allow_nvls=True)  # the sim backend starts nothing
    assert {r["name"] for r in report["rows"]} == {"default", "NCCL_NVLS_ENABLE=1"}
    # A space that forbids it wins over allow_nvls.
    with pytest.raises(ConfigError, match="forbidden"):
        run_probe(nvls, settings, forbidden_env={"NCCL_NVLS_ENABLE": ("1",)}, allow_nvls=True)


def test_worker_env_keeps_multicast_off_unless_a_candidate_turns_it_on() -> None:
    assert worker_env(Candidate("default", {})) == MULTICAST_OFF
    ring = worker_env(Candidate("r", {"NCCL_ALGO": "Ring", "NCCL_PROTO": None}))
    assert ring == {**MULTICAST_OFF, "NCCL_ALGO": "Ring", "NCCL_PROTO": None}
    assert worker_env(Candidate("off", {"NCCL_NVLS_ENABLE": "0"})) == MULTICAST_OFF
    on = worker_env(Candidate("on", {"NCCL_NVLS_ENABLE": "1"}))
    assert on == {"NCCL_NVLS_ENABLE": "1"}


# ---- ranking -------------------------------------------------------------------------------------

def _row(name: str, medians: dict[int, float] | None, env: dict | None = None) -> dict:
    if medians is None:
        return {"name": name, "env": env or {}, "status": "failed", "reason": "x", "sizes": []}
    return {"name": name, "env": env if env is not None else {"X": name}, "status": "ok",
            "reason": None, "sizes": [{"tokens": t, "median_us": m} for t, m in medians.items()]}


def test_ranking_by_decode_then_verify_failures_last() -> None:
    s = ProbeSettings(tp=2, hidden=8, tokens=(1, 8, 32, 512))
    rows = [_row("default", {1: 40.0, 8: 50.0, 32: 60.0, 512: 90.0}, env={}),
            _row("a", {1: 30.0, 8: 30.0, 32: 70.0, 512: 50.0}),
            _row("b", {1: 20.0, 8: 40.0, 32: 65.0, 512: 99.0}),   # same decode as a, better verify
            _row("broken", None)]
    out = rank_rows(rows, s)
    assert out["rank_by"] == ["decode", "verify", "prefill"]
    assert out["ranking"] == ["b", "a", "default"]
    assert [r["rank"] for r in rows] == [3, 2, 1, None]
    assert rows[3]["decode_us"] is None and rows[0]["prefill_us"] == 90.0
    assert out["spread"] == {"phase": "decode", "best": "b", "best_us": 30.0, "default": "default",
                             "default_us": 45.0, "default_over_best": 1.5, "saving_us": 15.0,
                             "rounds": 1, "separated": None}


def test_ranking_without_decode_sizes_or_default() -> None:
    s = ProbeSettings(tp=2, hidden=8, tokens=(16, 128))
    rows = [_row("a", {16: 9.0, 128: 1.0}), _row("b", {16: 5.0, 128: 7.0})]
    out = rank_rows(rows, s)
    assert out["rank_by"] == ["verify", "prefill"] and out["ranking"] == ["b", "a"]
    assert out["default"] is None
    assert out["spread"]["default_us"] is None and out["spread"]["default_over_best"] is None


# ---- the CLI -------------------------------------------------------------------------------------

def test_cli_writes_json_and_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cands = tmp_path / "c.yaml"
    cands.write_text("- default\n- NCCL_ALGO=Ring\n- NCCL_ALGO=Tree\n- NCCL_PROTO=LL\n")
    out = tmp_path / "probe.json"
    argv = ["--tp", "2", "--hidden", "4096", "--tokens", "1,4,8,64,512", "--candidates", str(cands),
            "--backend", "sim", "--profile", "llama-3.1-8b-eagle3-h100"]
    # The earlier spelling --out FILE: stdout as without it (here the JSON), the report in FILE too.
    assert main([*argv, "--out", str(out), "--json"]) == 0
    printed = capsys.readouterr()
    report = json.loads(printed.out)
    assert report == json.loads(out.read_text())
    assert report["ranking"][0] == report["spread"]["best"] != "default"
    assert report["spread"]["default_over_best"] > 1.0
    assert "NCCL probe: backend sim" not in printed.out and "default: ok" in printed.err  # progress on stderr
    # Without --json the table goes to stdout; --out still writes the JSON report.
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "NCCL probe: backend sim" in printed.out and "default/best" in printed.out
    assert json.loads(out.read_text())["ranking"]


def test_cli_bad_input_exits_2_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cands = tmp_path / "c.yaml"
    cands.write_text("- {nccl_algo: Ring}\n")
    assert main(["--tp", "2", "--hidden", "8", "--candidates", str(cands)]) == 2
    assert "UPPER_CASE" in capsys.readouterr().err
    assert main(["--tp", "1", "--hidden", "8", "--candidates", str(cands).replace("c.yaml", "x")]) == 2


def test_batch_must_be_positive_and_is_reported() -> None:
    from autotune.nccl.probe import ProbeSettings

    with pytest.raises(ValueError, match="batch must be >= 1"):
        ProbeSettings(tp=2, hidden=8, batch=0).check()
    ProbeSettings(tp=2, hidden=8, batch=1).check()


def _round_row(name: str, medians: list[float]) -> dict:
    return {"name": name, "env": {} if name == "default" else {"NCCL_PROTO": name},
            "status": "ok", "reason": None, "wall_s": 1.0,
            "sizes": [{"tokens": 1, "bytes": 2, "median_us": m, "p10_us": m - 1, "p90_us": m + 1,
                       "iters": 10} for m in medians]}


def test_rounds_merge_to_median_and_tell_a_real_gap_from_noise() -> None:
    from autotune.nccl.probe import ProbeSettings, merge_rounds, rank_rows

    settings = ProbeSettings(tp=2, hidden=8, tokens=(1,), rounds=3)
    # LL is ahead of the default in every round: a real gap.
    passes = [[_round_row("default", [50.0]), _round_row("LL", [30.0])],
              [_round_row("LL", [35.0]), _round_row("default", [45.0])],
              [_round_row("default", [48.0]), _round_row("LL", [31.0])]]
    rows = merge_rounds(["default", "LL"], passes)
    assert [r["sizes"][0]["median_us"] for r in rows] == [48.0, 31.0]
    assert rows[1]["sizes"][0]["round_medians_us"] == [30.0, 35.0, 31.0]
    assert rows[0]["sizes"][0]["iters"] == 30 and rows[0]["sizes"][0]["p90_us"] == 51.0
    ranking = rank_rows(rows, settings)
    assert ranking["best"] == "LL" and ranking["spread"]["separated"] is True
    # One round where LL is slower than the default's fastest: noise, not a gap.
    passes[1] = [_round_row("LL", [46.0]), _round_row("default", [45.0])]
    rows = merge_rounds(["default", "LL"], passes)
    ranking = rank_rows(rows, settings)
    assert ranking["best"] == "LL" and ranking["spread"]["separated"] is False


def test_a_candidate_failing_in_any_round_is_failed() -> None:
    from autotune.nccl.probe import merge_rounds

    bad = dict(_round_row("LL", [30.0]), status="failed", reason="boom", sizes=[])
    rows = merge_rounds(["default", "LL"], [[_round_row("default", [40.0]), _round_row("LL", [30.0])],
                                            [_round_row("default", [41.0]), bad]])
    assert rows[1]["status"] == "failed" and rows[1]["reason"] == "round 2: boom"
    assert rows[0]["status"] == "ok" and rows[0]["rounds"] == 2


@pytest.mark.slow  # real gloo worker processes
def test_gloo_probe_over_two_rounds(tmp_path) -> None:
    from autotune.nccl.candidates import NcclCandidate as Candidate
    from autotune.nccl.probe import ProbeSettings, run_probe

    cands = [Candidate("default", {}), Candidate("NCCL_PROTO=LL", {"NCCL_PROTO": "LL"})]
    report = run_probe(cands, ProbeSettings(tp=2, hidden=64, tokens=(1, 16), iters=3, warmup=1,
                                            batch=2, rounds=2, backend="gloo"),
                       workdir=str(tmp_path))
    assert report["failed"] == [] and report["args"]["rounds"] == 2
    for row in report["rows"]:
        assert row["rounds"] == 2 and len(row["decode_us_rounds"]) == 2
        assert all(len(s["round_medians_us"]) == 2 for s in row["sizes"])
    assert report["spread"]["separated"] in (True, False)
    assert (tmp_path / "round1").is_dir() and (tmp_path / "round2").is_dir()


@pytest.mark.slow  # real gloo worker processes
def test_a_kept_workdir_can_be_probed_again_with_fresh_results(tmp_path: Path, marker: str) -> None:
    cands = [Candidate("default", {})]
    first = run_probe(cands, ProbeSettings(**{**FAST, "tokens": (1,)}), workdir=str(tmp_path))
    second = run_probe(cands, ProbeSettings(**{**FAST, "tokens": (4,)}), workdir=str(tmp_path))
    assert first["failed"] == [] and second["failed"] == []
    # Its own sizes, not the status files the first run left in the same folder.
    assert [s["tokens"] for s in second["rows"][0]["sizes"]] == [4]
    _assert_no_workers(marker)


def test_sim_backend_reports_one_round_whatever_was_asked() -> None:
    cands = [Candidate("default", {}), Candidate("NCCL_ALGO=Ring", {"NCCL_ALGO": "Ring"})]
    report = run_probe(cands, ProbeSettings(tp=2, hidden=4096, tokens=(1,), backend="sim",
                                            profile="llama-3.1-8b-eagle3-h100", rounds=3))
    assert report["args"]["rounds"] == 1 and report["spread"]["rounds"] == 1
    assert report["spread"]["separated"] is None


def test_cli_refuses_an_out_file_it_cannot_write_before_measuring(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cands = tmp_path / "c.yaml"
    cands.write_text("- default\n- NCCL_ALGO=Ring\n")
    with pytest.raises(SystemExit) as stop:
        main(["--tp", "2", "--hidden", "4096", "--tokens", "1", "--candidates", str(cands),
              "--backend", "sim", "--profile", "llama-3.1-8b-eagle3-h100",
              "--out", str(tmp_path / "missing-dir" / "probe.json")])
    assert stop.value.code == 2
    printed = capsys.readouterr()
    assert "argument --out: cannot write" in printed.err and "missing-dir does not exist" in printed.err
    assert printed.out == "" and "NCCL_ALGO=Ring: ok" not in printed.err  # nothing was measured
