"""``scripts/cpu_by_process.py`` counts a command's processes' CPU seconds by kind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "cpu_by_process.py"
sys.path.insert(0, str(SCRIPT.parent))

import cpu_by_process  # noqa: E402

# Burns 0.6 s of CPU, then idles long enough for the last reading to see all of it.
_BURN = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass\n"
         "time.sleep(0.5)\n")


def test_kinds_put_the_specific_before_the_general() -> None:
    worker = ["python", "ray/_private/workers/default_worker.py", "--raylet-name=/tmp/pytest-of-x/raylet"]
    assert cpu_by_process.kind_of(worker) == "ray worker"
    assert cpu_by_process.kind_of(["ray::IDLE"]) == "ray worker"
    raylet = [".venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet", "--raylet_socket_name=x",
              "--dashboard_agent_command=python ray/dashboard/agent.py --x"]
    assert cpu_by_process.kind_of(raylet) == "raylet"
    assert cpu_by_process.kind_of(["ray::DashboardAgent"]) == cpu_by_process.kind_of(
        ["python", "ray/dashboard/agent.py", "--node-ip-address=127.0.0.1"]) == "ray dashboard agent"
    assert cpu_by_process.kind_of(["python", "-m", "autotune.sim.server", "--port", "1"]) == "autotune.sim"
    assert cpu_by_process.kind_of(["python", "-u", "-c", "import sys"]) == "pytest-xdist worker"
    assert cpu_by_process.kind_of(["/usr/bin/sleep", "5"]) == "sleep 5"


def _burn_under_sh(tmp_path: Path, inner: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The script run on ``sh -c INNER`` (``$BURN`` the burning program, ``$KIND`` its kind's name):
    the finished process and the JSON it wrote."""
    out = tmp_path / "cpu.json"
    env = {**os.environ, "BURN": _BURN, "KIND": "autotune.trial"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--interval", "0.05", "--json", str(out), "--",
                           "sh", "-c", inner], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(out.read_text())


def test_a_grandchild_s_cpu_is_counted_under_its_kind(tmp_path: Path) -> None:
    # sh starts python: the burning process is not the command itself. Only python's own command
    # line names the kind (sh's holds the variable, not its value).
    proc, data = _burn_under_sh(tmp_path, f'{sys.executable} -c "$BURN" "$KIND"-marker')
    burner = data["by_kind"]["autotune.trial"]
    assert burner["processes"] == 1
    assert 0.3 <= burner["cpu_s"] <= 1.5, burner
    assert data["cpu_s"] >= burner["cpu_s"] and data["exit_status"] == 0
    assert "autotune.trial" in proc.stderr and "CPU" in proc.stderr


def test_a_process_seen_before_its_exec_is_counted_under_what_it_became(tmp_path: Path) -> None:
    # sh is seen first (for 0.5 s), then execs python in the same pid: the kind is python's.
    _, data = _burn_under_sh(tmp_path, f'sleep 0.5; exec {sys.executable} -c "$BURN" "$KIND"-marker')
    assert "autotune.trial" in data["by_kind"], data["by_kind"]
    assert 0.3 <= data["by_kind"]["autotune.trial"]["cpu_s"] <= 1.5, data["by_kind"]


def test_the_command_s_exit_status_is_kept_and_bad_input_is_refused() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--", "sh", "-c", "exit 3"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "give the command to run after --" in proc.stderr
    proc = subprocess.run([sys.executable, str(SCRIPT), "--interval", "0", "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--interval must be above 0" in proc.stderr
