"""``python -m benchmarks.load_200`` in its quick mode, as a real subprocess: a short search at
concurrency 8 on a local three-node Ray cluster, with the same checks the 200-trial run prints
(no trial lost, no GPU held twice, driver RSS sampled, tuner overhead known), plus by pid: no
server or watchdog left, no GPU lock held, no port held.

The 200-trial figures themselves come from ``python -m benchmarks.load_200 --json
test-artifacts/load_200.json`` (about half an hour on two busy cores), which
``scripts/reliability_report.py`` reads next to this test's outcome.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.reliability import record
from tests.e2e.reliability.procs import leftovers, new_token
from tests.e2e.reliability.searchrun import REPO, cli_env
from tests.e2e.reliability.usage import overlaps_per_gpu, read_usage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

TRIALS = 10


def test_load_quick_mode(tmp_path: Path) -> None:
    token = new_token("load")
    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.load_200", "--trials", str(TRIALS),
                           "--sample-s", "5", "--json", str(out), "--workdir", str(tmp_path / "work")],
                          cwd=REPO, env=cli_env(token), check=False, capture_output=True, text=True,
                          timeout=400)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    fig = json.loads(out.read_text())
    work = Path(fig["workdir"])
    lock_dirs = {d.name: d for d in (work / "gpu-locks").iterdir() if d.is_dir()}
    uses = read_usage(lock_dirs)
    left = leftovers(token, log_dir=work / "mlruns" / "ray", lock_dirs=lock_dirs.values())
    o = fig["overhead_s"]
    record.record("load", f"quick mode ({TRIALS} trials, concurrency 8)",
                  ok=proc.returncode == 0 and fig["trials_lost"] == 0 and fig["gpu_overlaps"] == 0
                  and left.count == 0, trials=fig["trials_finished"], lost=fig["trials_lost"],
                  wall_s=fig["wall_s"], rss_mb_peak=fig["rss_mb_peak"],
                  overhead_median_s=o["median"], overhead_p90_s=o["p90"],
                  gpu_overlaps=fig["gpu_overlaps"], servers=len(uses), orphans=left.count)
    record.search_outcome("load quick mode", planned=TRIALS, completed=fig["trials_finished"],
                          failed=fig["trials_failed"], orphans=left.count)

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Driver RSS" in proc.stdout and "p90" in proc.stdout, proc.stdout[-2000:]
    assert fig["trials_finished"] == TRIALS and fig["trials_lost"] == 0
    # Nothing of this checkout's place in the figures (they are committed): the profile by its
    # path in the repository; the kept work dir named as given.
    assert fig["profile"] == "benchmarks/profiles/zero-compute.yaml" and work == (tmp_path / "work").resolve()
    assert len(fig["rss_samples"]) >= 2 and all(mb > 0 for _, _, mb in fig["rss_samples"])
    assert o["n"] >= TRIALS - 1 and o["median"] is not None and o["p90"] >= o["median"]
    # The benchmark's own overlap count agrees with the independent reading of the usage files.
    assert fig["gpu_overlaps"] == 0 and not overlaps_per_gpu(uses)
    assert len(uses) >= TRIALS, "every trial runs at least its own server"
    assert left.count == 0, left.describe()
