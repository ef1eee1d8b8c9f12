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
