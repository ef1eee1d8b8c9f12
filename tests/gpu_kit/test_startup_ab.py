"""scripts/gpu/startup_ab.py rehearsed on the emulator: the script the lead runs on one H200."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_startup_ab_dry_run_on_the_emulator(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    env.update(AUTOTUNE_SIM_STARTUP_S="0.5", AUTOTUNE_SIM_STOP_DIAG_S="3")
    proc = subprocess.run([sys.executable, "scripts/gpu/startup_ab.py", "--backend", "sim", "--pairs", "2",
                           "--budget-s", "240", "--out", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "startup-ab.json").read_text())
    rows = {r["run"]: r for r in data["rows"]}
    assert set(rows) == {"p0-plain-before", "p0-plain-after", "p1-eagle3-after", "p1-eagle3-before"}
    for run, row in rows.items():
        assert row["rc"] == 0 and row["startup_s"] > 0 and len(row["repeats"]) == 3, row
        lean = run.endswith("after")
        assert ("--skip-server-warmup" in row["launch_command"]) is lean
        assert ("--cuda-graph-max-bs-decode 1" in row["launch_command"]) is lean
        # The prefill capture is read from the emulator's log, written as SGLang 0.5.17 writes it;
        # the lean start captures the sizes its workload reaches (the sim model has no
        # tokenizer.json, so the byte bound decides), the full start all 58.
        assert ("--cuda-graph-max-bs-prefill" in row["launch_command"]) is lean
        assert row["prefill_capture_s"] is not None and (row["prefill_sizes"] < 58 if lean else
                                                          row["prefill_sizes"] == 58), row
        # The emulator's 3 s stop pause is paid by the full start only (whole-second stamps).
        assert row["stop_s"] is not None and ((row["stop_s"] <= 1) if lean else (row["stop_s"] >= 2)), row
    assert data["counts"] == {"before": 2, "after": 2}
    assert "| before/eagle3 (n=1)" in proc.stdout and "runs: before 2, after 2" in proc.stdout
    assert not list((REPO / "scripts" / "gpu").glob(".startup-ab-*.yaml"))  # its space copies are gone
