"""scripts/gpu/standby_ab.py rehearsed on the emulator: the A/B of measure.standby the next GPU call runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_standby_ab_dry_run_on_the_emulator(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    env.update(AUTOTUNE_SIM_STARTUP_S="3")  # long enough for the standby's imports beside it
    proc = subprocess.run([sys.executable, "scripts/gpu/standby_ab.py", "--backend", "sim", "--cycles", "1",
                           "--budget-s", "240", "--out", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "standby-ab.json").read_text())
    rows = {r["kind"]: r for r in data["rows"]}
    assert set(rows) == {"off", "fresh", "standby"}
    assert all(r["ok"] and len(r["repeats"]) == 3 and r["startup_s"] > 0 for r in rows.values()), rows
    assert rows["off"]["standby"] is None  # measured with no standby anywhere
    assert rows["fresh"]["used"] is False or rows["fresh"]["used"] is None
    assert rows["standby"]["used"] is True, rows["standby"]
    for kind in ("fresh", "standby"):  # each measured while the next standby waited: no CPU taken
        assert rows[kind]["standby_cpu_s"] is not None and rows[kind]["standby_cpu_s"] <= 0.05, rows[kind]
    assert "| standby | 1 |" in proc.stdout
    assert not list((REPO / "scripts" / "gpu").glob(".startup-ab-*.yaml"))  # its space copy is gone



def test_prefork_ab_dry_run_on_the_emulator(tmp_path):
    """``--prefork``: a fresh server, then standby and prefork launches alternating, each prefork run
    launched by a standby that was asked for a fork server. The emulator starts no child processes
    (the backend names no modules for a fork server), so the A/B stops at the first prefork run, as
    it does on a GPU where the fork server was not used, and the verdict says why."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    env.update(AUTOTUNE_SIM_STARTUP_S="3")
    proc = subprocess.run([sys.executable, "scripts/gpu/standby_ab.py", "--backend", "sim", "--cycles", "2",
                           "--prefork", "--budget-s", "240", "--out", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "standby-ab.json").read_text())["rows"]
    assert [r["kind"] for r in rows] == ["fresh", "standby", "prefork"], proc.stdout
    assert rows[2]["used"] is True and rows[2]["prefork_ok"] is None and rows[2]["forked"] is None
    assert "stopping: the fork server was not used" in proc.stdout
    verdict = subprocess.run([sys.executable, "scripts/gpu/prefork_verdict.py", str(tmp_path / "standby-ab.json")],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert verdict.returncode == 1 and "its fork server was not ready" in verdict.stdout, verdict.stdout


def _cost_plan(tmp_path, *, ab_s: str, cycles: str = "1", before=None):
    """scripts/gpu/plan_cost.sh with AUTOTUNE_STANDBY_AB_S on the emulator twin of the shipped 8B
    space: (completed process, results folder, the twin's path, its standby copy's path)."""
    from tests.gpu_kit.test_gpu_plan import sim_twin

    space_path = sim_twin("scripts/gpu/h200-llama-8b.yaml", tmp_path, trials=3)
    res, work = tmp_path / "res", tmp_path / "repo"
    work.mkdir()
    if before is not None:
        before(res / "standby-ab")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    env.update(AUTOTUNE_SIM_STARTUP_S="3", PYTHON=sys.executable, AUTOTUNE_GPU_SPACES=str(space_path),
               AUTOTUNE_STANDBY_AB_S=ab_s, AUTOTUNE_STANDBY_AB_CYCLES=cycles, AUTOTUNE_GPU_TRIAL_S="20")
    proc = subprocess.run(["bash", str(REPO / "scripts/gpu/plan_cost.sh"), str(res), "400"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = res / f"rs-{space_path.stem}"  # named for the shipped space, with a standby or not
    steps = json.loads((out / "plan.json").read_text())
    search = next(s for s in steps if s.get("step") == "search")
    assert search["rc"] == 0 and search["orphans"] == 0, steps
    return proc, res, space_path, tmp_path / f".{space_path.stem}-standby.yaml"


def _standby_used(res):
    records = [json.loads(p.read_text()) for p in sorted(res.glob("rs-*/*/search/s*.json"))]
    assert len(records) >= 2
    return [bool((r.get("standby") or {}).get("used")) for r in records]


def test_cost_plan_searches_without_a_standby_when_the_ab_fails(tmp_path):
    """One device call answers the A/B and the search, the verdict deciding between them. The A/B
    itself is rehearsed above; here it gets no cycle (on the emulator its verdict is noise: the
    standby's start-up saving is a fixed sleep on a loaded 2-core box), so the verdict fails for want
    of runs, deterministically, and the search runs on the space's copy with measure.standby off
    (on a GPU the shipped space's backend, SGLang, has it on by default)."""
    import yaml

    proc, res, space_path, standby_space = _cost_plan(tmp_path, ab_s="200", cycles="0")
    verdict = (res / "standby-ab" / "verdict.txt").read_text()
    assert verdict.startswith("FAIL") and "no off run" in verdict, verdict
    off_space = tmp_path / f".{space_path.stem}-no-standby.yaml"
    assert f"== the search's space: {off_space}" in proc.stdout
    assert yaml.safe_load(off_space.read_text())["measure"]["standby"] is False
    assert not standby_space.exists()
    assert not any(_standby_used(res))


def test_cost_plan_resumed_after_a_passing_ab_searches_with_the_standby(tmp_path):
    """A plan resumed on a fresh host keeps its first host's verdict (here a passing one, written as
    that host would have) and searches with the space's standby copy."""
    import yaml

    def passed(ab_dir):
        ab_dir.mkdir(parents=True)
        rows = [{"cycle": 0, "kind": k, "ok": True, "startup_s": s, "tok_s": 300.0, "used": k == "standby",
                 "standby_cpu_s": None if k == "off" else 0.0, "standby_gpu_mib": None,
                 "max_total_num_tokens": 1000} for k, s in (("off", 40.0), ("fresh", 40.0), ("standby", 25.0))]
        (ab_dir / "standby-ab.json").write_text(json.dumps({"backend": "sim", "rows": rows}))
        (ab_dir / "verdict.txt").write_text("PASS: written by the first host\n")

    proc, res, _, standby_space = _cost_plan(tmp_path, ab_s="200", before=passed)
    assert "PASS: written by the first host" in proc.stdout  # not measured again
    assert not (res / "standby-ab" / "standby-ab.log").exists()
    assert f"== the search's space: {standby_space}" in proc.stdout
    assert yaml.safe_load(standby_space.read_text())["measure"]["standby"] is True
    used = _standby_used(res)
    assert any(used), used  # the servers after the first were launched by a standby


def test_cost_plan_with_the_standby_on_and_no_ab(tmp_path):
    """AUTOTUNE_STANDBY=on: no A/B, the search on the space's standby copy."""
    from tests.gpu_kit.test_gpu_plan import sim_twin

    space_path = sim_twin("scripts/gpu/h200-llama-8b.yaml", tmp_path, trials=3)
    res, work = tmp_path / "res", tmp_path / "repo"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_SIM_", "AUTOTUNE_STANDBY"))}
    env.update(AUTOTUNE_SIM_STARTUP_S="3", PYTHON=sys.executable, AUTOTUNE_GPU_SPACES=str(space_path),
               AUTOTUNE_STANDBY="on", AUTOTUNE_GPU_TRIAL_S="20")
    proc = subprocess.run(["bash", str(REPO / "scripts/gpu/plan_cost.sh"), str(res), "400"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    standby_space = tmp_path / f".{space_path.stem}-standby.yaml"
    assert f"== the search's space: {standby_space} (measure.standby on, no A/B)" in proc.stdout
    assert not (res / "standby-ab").exists()
    used = _standby_used(res)
    assert any(used), used
