"""The real-GPU batch's own scripts (scripts/gpu/lane.py, collect.py), rehearsed on the emulator.

On the remote GPU host they drive real SGLang; here the same scripts run against emulator servers
through the same ``python -m autotune.trial`` calls, so a broken script is caught before GPU time is spent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]

SPACE = """\
name: gpu-rehearsal-{kind}
backend: sim
profile: llama-3.1-8b-eagle3-h100
model_path: sim/Llama-3.1-8B-Instruct
draft_model_path: sim/EAGLE3-LLaMA3.1-Instruct-8B
fixed_args: {{tp_size: 1}}
parameters:
  speculative_algorithm: {{type: categorical, choices: [null, EAGLE3]}}
  speculative_num_steps: {{type: int, low: 1, high: 6}}
  speculative_eagle_topk: {{type: categorical, choices: [1, 2, 4]}}
  speculative_num_draft_tokens: {{type: int, low: 2, high: 12}}
  SGLANG_SIMULATE_ACC_LEN: {{type: categorical, choices: ["1.8", "2.5", "3", "3.5"]}}
workload: {{num_prompts: 2, warmup_prompts: 1, output_len: 32, concurrency: 1, seed: 0}}
measure: {{repeats: 1, startup_timeout_s: 60{extra}}}
"""


@pytest.mark.slow  # 20 s at load ~8 (make test-fast leaves it out)
def test_lane_and_collect_on_the_emulator(tmp_path: Path, installed_flag_table: Path) -> None:
    fast, full = tmp_path / "fast.yaml", tmp_path / "full.yaml"
    fast.write_text(SPACE.format(kind="fast", extra=", fast_start: true"))
    full.write_text(SPACE.format(kind="full", extra=""))
    lane_dir = tmp_path / "run" / "lanes" / "gpu0"
    # The installed SGLang's flags from a table, so no trial process imports SGLang's parser.
    env = dict(os.environ, AUTOTUNE_SIM_STARTUP_S="0.2", AUTOTUNE_SGLANG_FLAG_TABLE=str(installed_flag_table))
    proc = subprocess.run(
        [sys.executable, "scripts/gpu/lane.py", "--fast", str(fast), "--full", str(full),
         str(lane_dir), "plain", "2-1-3@2.5", "full:plain"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=150, check=False)
    assert proc.returncode == 0, proc.stderr
    lane = json.loads((lane_dir / "lane.json").read_text())
    assert [e["name"] for e in lane] == ["fast-plain", "fast-2-1-3-acc2.5", "full-plain"]
    assert all(e["rc"] == 0 and e["wall_s"] > 0 for e in lane)
    plain, spec, full_plain = (json.loads((lane_dir / f"{e['name']}.json").read_text()) for e in lane)
    # The speculative config is judged against the lane's own plain baseline, measured once.
    assert spec["baseline_tok_s"] == pytest.approx(plain["output_tok_s"])
    assert "SGLANG_SIMULATE_ACC_LEN=2.5" in spec["launch_command"]
    assert spec["accept_length"] == pytest.approx(2.5, abs=0.35)
    assert "--disable-prefill-cuda-graph" in plain["launch_command"]
    assert "--disable-prefill-cuda-graph" not in full_plain["launch_command"]

    out = tmp_path / "bundle.json"
    proc = subprocess.run([sys.executable, "scripts/gpu/collect.py", str(tmp_path / "run"),
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| gpu0 |")]
    assert len(rows) == 3 and "fast-2-1-3-acc2.5" in rows[1]
    bundle = json.loads(out.read_text())
    assert [r["config"] for r in bundle["rows"]] == [e["name"] for e in lane]
    spec_row = bundle["rows"][1]
    assert spec_row["speedup"] == pytest.approx(spec["speedup"])
    assert spec_row["verify_ms"] > 0 and spec_row["accept"] == spec["accept_length"]
    assert bundle["rows"][0]["accept"] is None  # plain decode: no accept length, not 0


@pytest.mark.slow  # 9 s at load ~8 (make test-fast leaves it out)
def test_spread_probe_on_the_emulator(tmp_path: Path, installed_flag_table: Path) -> None:
    space = tmp_path / "probe.yaml"
    space.write_text(SPACE.format(kind="probe", extra=", fast_start: true"))
    env = dict(os.environ, AUTOTUNE_SIM_STARTUP_S="0.2", AUTOTUNE_SGLANG_FLAG_TABLE=str(installed_flag_table))
    params = json.dumps({"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
                         "SGLANG_SIMULATE_ACC_LEN": "2.5"})
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "scripts/gpu/spread_probe.py", "--space", str(space), "--params", params,
         "--variants", "2x32,1x64", "--rounds", "2", "--warm-rounds", "1", "--full-graphs",
         "--json", str(out), "--log", str(tmp_path / "server.log")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=150, check=False)
    assert proc.returncode == 0, proc.stderr
    saved = json.loads(out.read_text())
    # --full-graphs overrides the space's fast_start: the server ran with prefill graphs.
    assert saved["full_graphs"] and "--disable-prefill-cuda-graph" not in saved["launch"]
    rows = saved["rows"]
    assert [(r["variant"], r["round"]) for r in rows] == [
        ("2x32", -1), ("1x64", -1), ("1x64", 0), ("2x32", 0), ("2x32", 1), ("1x64", 1)]
    for r in rows:  # each run's parts add up to its wall, and its accept length is the forced one
        assert r["prefill_s"] + r["cycle_gpu_s"] + r["host_s"] == pytest.approx(r["wall_s"])
        assert r["accept_length"] == pytest.approx(2.5, abs=0.5)
    assert saved["summary"]["2x32"]["runs"] == 2 and saved["summary"]["1x64"]["runs"] == 2
    again = subprocess.run([sys.executable, "scripts/gpu/spread_probe.py", "--from-json", str(out)],
                           cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0, again.stderr
    assert "2x32: 2 runs" in again.stdout and "1x64: 2 runs" in again.stdout
    assert (tmp_path / "server.log").stat().st_size > 0


def test_collect_search_reprints_the_committed_h200_figures(tmp_path: Path) -> None:
    """The eighth GPU run's figures (docs/measurements/real-search-h200-8.json) come back from its
    committed raw archive: each shape's search winner is the best of every config of its space, and
    the per-cycle range divides the synthetic acceptance draws out. The archive holds the seventh's
    8B search too (restored and carried on), whose figures are unchanged."""
    raw = REPO / "docs/measurements/raw/real-search-h200-8/call3-results.tar.xz"
    subprocess.run(["tar", "-xJf", str(raw), "-C", str(tmp_path)], check=True)
    out = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, "scripts/gpu/collect_search.py", str(tmp_path), "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    spaces = json.loads(out.read_text())["spaces"]
    committed = json.loads((REPO / "docs/measurements/real-search-h200-8.json").read_text())["spaces"]
    seventh = json.loads((REPO / "docs/measurements/real-search-h200-7.json").read_text())["spaces"]
    for name in ("h200-llama-8b", "h200-qwen3-30b-a3b"):
        assert spaces[name]["figures"] == committed[name]["figures"]
    assert spaces["h200-llama-8b"]["figures"] == seventh["h200-llama-8b"]["figures"]
    got = spaces["h200-llama-8b"]
    assert got["figures"]["configs_measured"] == 11  # every config of the space: search + sweep
    assert got["figures"]["winner"]["config"] == got["figures"]["best"]["config"] == "3-4-8"
    assert got["figures"]["trials"]["failed"] == 0 and not any(got["figures"]["orphans"])
    rows = {r["config"]: r for r in got["rows"]}
    assert rows["plain"]["cycle_range_pct"] is None  # no accept length: unknown, not 1
    # 3-4-8's repeats moved 2.65% with their draws (accept 3.475-3.543); per cycle far less.
    assert rows["3-4-8"]["range_pct"] > 2 > rows["3-4-8"]["cycle_range_pct"]
    moe = spaces["h200-qwen3-30b-a3b"]["figures"]
    # The search itself measured all 9 configs (plain and 8 EAGLE3), so nothing was left to sweep.
    assert moe["configs_measured"] == 9 and moe["winner"]["config"] == moe["best"]["config"] == "5-1-6"
    assert moe["winner_over_best"] == 1.0 and moe["configs_over_2pct_range"] == []
    assert moe["trials"] == {"total": 8, "feasible": 8, "infeasible": 0, "failed": 0}
    assert not any(moe["orphans"]) and moe["mlflow_runs"]["search/FINISHED"] == 1


def test_state_restores_from_the_committed_xz_archives(tmp_path: Path) -> None:
    """A GPU run carries the committed xz snapshot as is (a third of the gzip size the 64 MiB a
    call carries cannot spare): restore reads it like a call's gzip files."""
    state = REPO / "docs/measurements/raw/real-search-h200-8"
    carried = tmp_path / "state"
    carried.mkdir()
    for part in ("results", "mlruns"):
        (carried / f"{part}.tar.xz").symlink_to(state / f"call3-{part}.tar.xz")
    res = tmp_path / "res"
    proc = subprocess.run(["bash", str(REPO / "scripts/gpu/state.sh"), "restore", str(res), str(carried)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "restore 3" in proc.stdout, proc.stdout + proc.stderr
    assert (tmp_path / "mlruns" / "mlflow.db").stat().st_size > 0
    assert sorted(p.name for p in (tmp_path / "mlruns" / "ray").iterdir()) == [
        "h200-llama-8b", "h200-qwen3-30b-a3b"]
    assert not (res / "started").exists() and (res / "plan.before-2.log").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    none = subprocess.run(["bash", str(REPO / "scripts/gpu/state.sh"), "restore", str(tmp_path / "r2"), str(empty)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert none.returncode == 2 and "has no results.tar.gz" in none.stderr


@pytest.fixture(scope="module")
def fresh_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Ray state this checkout wrote: a 3-trial phase-model search on the emulator (the committed
    GPU states were pickled by older code, which is what ``check_state`` is there to catch)."""
    root = tmp_path_factory.mktemp("fresh-state")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_") and k != "RAY_ADDRESS"}
    env.update(AUTOTUNE_SIM_STARTUP_S="0.2", AUTOTUNE_SIM_GPU_LOCK_DIR=str(root / "locks"), PYTHONPATH=str(REPO))
    # The search keeps its state under the working directory's mlruns/.
    space = REPO / "tests/spaces/stop-rule.yaml"
    proc = subprocess.run([sys.executable, "-m", "autotune.search", "--space", str(space), "--trials", "3"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root


@pytest.mark.slow
def test_check_state_tells_a_restorable_ray_state_from_a_stale_one(tmp_path: Path, fresh_state: Path) -> None:
    """A state this checkout wrote loads; the eighth GPU run's (pickled before the space's ``Measure``
    moved to its own module) does not, and says which class it misses; the third run's, pickled
    before the package re-layout, names the module (the fourth run found that out on the remote
    host)."""
    check = [sys.executable, "scripts/gpu/check_state.py"]
    ok = subprocess.run([*check, str(fresh_state)], cwd=REPO, capture_output=True, text=True, timeout=120,
                        check=False)
    assert ok.returncode == 0, ok.stderr
    assert "test-stop-rule/run-" in ok.stdout and "restorable by this checkout" in ok.stdout
    moved = subprocess.run([*check, "docs/measurements/raw/real-search-h200-8"], cwd=REPO,
                           capture_output=True, text=True, timeout=120, check=False)
    assert moved.returncode == 1
    assert "h200-llama-8b/run-20261202-045734: cannot be resumed" in moved.stderr
    assert "Can't get attribute 'Measure'" in moved.stderr
    subprocess.run(["tar", "-xJf", str(REPO / "docs/measurements/raw/real-search-h200-3/"
                                     "call3-machine-c-mlruns-moe-ray.tar.xz"), "-C", str(tmp_path)], check=True)
    stale = subprocess.run([*check, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                           timeout=120, check=False)
    assert stale.returncode == 1
    assert "No module named 'autotune.searcher'" in stale.stderr
    empty = subprocess.run([*check, str(tmp_path / "mlruns" / "ray" / "h200-qwen3-30b-a3b")], cwd=REPO,
                           capture_output=True, text=True, timeout=60, check=False)
    assert empty.returncode == 2 and "no mlruns/ray folder" in empty.stderr


@pytest.mark.slow
def test_check_state_names_a_sampler_attribute_the_pickle_lacks(fresh_state: Path) -> None:
    """A sampler pickled before its class gained an attribute loads, then fails at its first
    proposal: check_state compares it with the sampler this checkout makes for the same space."""
    import importlib.util

    import ray.cloudpickle as cloudpickle

    from autotune.space.search_space import load_space

    spec = importlib.util.spec_from_file_location("check_state", REPO / "scripts/gpu/check_state.py")
    check_state = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(check_state)  # type: ignore[union-attr]
    pickled = next((fresh_state / "mlruns/ray/test-stop-rule").glob("run-*/searcher-state-*.pkl"))
    with open(pickled, "rb") as fh:
        state = cloudpickle.load(fh)
    space = load_space(str(REPO / "tests/spaces/stop-rule.yaml"))
    assert check_state._sampler_problems("s.pkl", state, space) == []
    gone = sorted(vars(state["_sampler"]))[0]
    delattr(state["_sampler"], gone)
    assert check_state._sampler_problems("s.pkl", state, space) == [
        f"s.pkl: its PhaseModelSampler lacks {gone}, which this checkout's sets"]


def test_repick_proof_report_rederives_the_committed_h200_proof(tmp_path: Path) -> None:
    """The eleventh session's H200 proof of the cost surface (docs/measurements/README.md) comes back
    from its committed trial records through the product's surface and prediction: same predictions,
    same errors, same pick. A change to either that moved the published figure fails here."""
    raw = REPO / "docs/measurements/raw/h200-2026-12-03c"
    subprocess.run(["tar", "-xJf", str(raw / "repick.tar.xz"), "-C", str(tmp_path)], check=True)
    (tmp_path / "repick" / "proof.json").unlink()
    proc = subprocess.run([sys.executable, "scripts/gpu/repick_proof.py", "--space",
                           "scripts/gpu/h200-llama-8b-repick.yaml", "--rates-b", "[0.60, 0.50, 0.42, 0.35, 0.30]",
                           "--out", str(tmp_path / "repick"), "--report"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    got = json.loads((tmp_path / "repick" / "proof.json").read_text())
    committed = json.loads((raw / "repick-proof.json").read_text())
    assert got["compared"] == committed["compared"] == 3
    assert got["max_abs_error_pct"] == pytest.approx(committed["max_abs_error_pct"], abs=1e-9)
    assert got["max_abs_error_pct"] < 3 and got["pick_share"] >= 0.98
    assert got["pick"]["params"] == committed["pick"]["params"]
    assert "max |error| 1.39% over 3 configs" in proc.stdout


def test_prefill_capture_reads_the_committed_h200_server_logs(tmp_path: Path) -> None:
    """scripts/gpu/prefill_capture.py on the committed start-up A/B logs (real SGLang 0.5.17 on an
    H200): the share of the prefill capture the lean start's cap of 1536 tokens leaves out."""
    import tarfile

    with tarfile.open(REPO / "docs/measurements/raw/cost-per-answer-h200-2026-12-03/startup-ab.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    logs = sorted(tmp_path.glob("startup-ab/*-logs/*.log"))
    assert len(logs) == 2
    out = tmp_path / "capture.json"
    proc = subprocess.run([sys.executable, "scripts/gpu/prefill_capture.py", "--cap", "1536", *map(str, logs),
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["captures"]
    assert [(r["who"], r["sizes"], r["above"]) for r in rows] == [("target", 58, 18)] * 2
    assert sorted(r["elapsed_s"] for r in rows) == [9.08, 9.13]  # "Capture target prefill ... elapsed=" lines
    assert all(r["above_done_s"] == 5 for r in rows)  # the bar's whole seconds at 18 of 58 done
    assert "target: 2 captures, median 9.11 s" in proc.stdout
