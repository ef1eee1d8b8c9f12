"""scripts/gpu/launcher_profile.py rehearsed on the emulator: a launcher set up as a standby's, its
stack sampled from the hand-over to healthy, its process group ended by itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(200), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_launcher_profile_dry_run_on_the_emulator(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({
        "argv": ["python", "-m", "autotune.sim.server", "--model-path", "sim/Llama-3.1-8B-Instruct",
                 "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft",
                 "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", "4", "--host", "127.0.0.1"],
        "env": {"AUTOTUNE_SIM_PROFILE": "llama-3.1-8b-eagle3-h100"}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    proc = subprocess.run(["setsid", "-w", sys.executable, "scripts/gpu/launcher_profile.py", "--backend", "sim",
                           "--run-json", str(run), "--out", str(tmp_path), "--label", "t", "--timeout-s", "120"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    # It ends its own process group (the server with it) once it has written its report.
    assert proc.returncode == -9 or proc.returncode == 137, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "launcher-profile-t.json").read_text())
    marks = [what for _, what in report["marks"]]
    assert marks[0] == "hand-over" and marks[-1] == "healthy", marks
    assert report["samples"] > 0 and report["to_healthy"]["functions"], report["to_healthy"]
    text = (tmp_path / "launcher-profile-t.txt").read_text()
    assert "timeline to the scheduler's start" in text and "autotune/sim/server.py" in text
