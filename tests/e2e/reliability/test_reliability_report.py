"""The outcome recorder (``tests/e2e/reliability/record.py``) and ``scripts/reliability_report.py``,
on outcomes written to a temporary file (never the real ``test-artifacts/reliability.json``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.reliability import record
from tests.e2e.reliability.searchrun import REPO

SCRIPT = REPO / "scripts" / "reliability_report.py"


@pytest.fixture()
def outcomes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "reliability.json"
    monkeypatch.setenv("AUTOTUNE_RELIABILITY_JSON", str(path))
    return path


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, capture_output=True,
                          text=True, timeout=60)


def test_recorder_replaces_a_case_and_keeps_the_others(outcomes: Path) -> None:
    record.record("faults", "crash", ok=False, status="ok")
    record.record("faults", "oom", ok=True, status="failed")
    record.record("faults", "crash", ok=True, status="failed")
    doc = json.loads(outcomes.read_text())
    assert set(doc["sections"]["faults"]) == {"crash", "oom"}
    assert doc["sections"]["faults"]["crash"]["ok"] is True
    assert doc["sections"]["faults"]["crash"]["session"] == record.SESSION
    with pytest.raises(ValueError, match="section"):
        record.record("nonsense", "x", ok=True)


def test_report_renders_the_recorded_numbers(outcomes: Path, tmp_path: Path) -> None:
    record.record("faults", "tp2 oom", ok=True, status="failed", reason="out of memory at start-up",
                  checks={"log_tail_in_mlflow": True, "mlflow_run_ended": True}, duration_s=4.2)
    record.record("bad_inputs", "malformed YAML", ok=True, exit_code=2,
                  message="error: space.yaml:3: malformed YAML")
    record.search_outcome("faults", planned=8, completed=8, failed=6, orphans=0)
    load = tmp_path / "load.json"
    load.write_text(json.dumps({
        "trials_planned": 200, "trials_finished": 200, "trials_lost": 0, "trials_failed": 0,
        "gpu_overlaps": 0, "concurrency": 8, "wall_s": 900.0, "trials_per_min": 13.3,
        "machine": "test", "profile": "/x/zero-compute.yaml", "workload": {"num_prompts": 1},
        "nodes": [{"name": "gpu8", "gpus": 8, "cpus": 8}], "rss_mb_before": 90.0,
        "rss_mb_at_first_trial": 500.0, "rss_mb_peak": 700.0, "rss_mb_end": 690.0,
        "rss_mb_growth_per_100_trials": 20.5, "rss_samples": [[10.0, 0, 490.0], [20.0, 5, 510.0]],
        "overhead_s": {"median": 0.61, "p90": 1.7, "max": 3.0, "median_first_quarter": 0.5,
                       "median_last_quarter": 0.7}}))
    page = tmp_path / "reliability.md"
    proc = _report("--input", str(outcomes), "--load", str(load), "--output", str(page))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "| faults injected and survived | 1 of 1 |" in text
    assert "| trials lost (must be 0) | 0 |" in text
    assert "| tuner overhead per trial, p90 (s) | 1.70 |" in text
    assert "| driver RSS growth while trials finish (MiB per 100 trials) | 20.50 |" in text
    assert "error: space.yaml:3: malformed YAML" in text


def test_check_fails_on_a_lost_trial_or_an_orphan(outcomes: Path, tmp_path: Path) -> None:
    _every_section()  # complete and fresh: only the lost trial and the orphan fail it
    record.search_outcome("interrupts", planned=10, completed=9, orphans=1)
    page = tmp_path / "reliability.md"
    proc = _report("--input", str(outcomes), "--load", str(tmp_path / "none.json"),
                   "--output", str(page), "--check")
    assert proc.returncode == 1
    text = page.read_text()
    assert "| trials lost (must be 0) | 1 |" in text and "| everything as required | **NO** |" in text
    assert "No 200-trial figures" in text


def test_missing_input_is_one_clear_error(tmp_path: Path) -> None:
    proc = _report("--input", str(tmp_path / "absent.json"), "--output", str(tmp_path / "x.md"))
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


def _every_section(**data: object) -> None:
    for section in record.SECTIONS:
        record.record(section, f"a {section} case", ok=True, **data)


def test_check_passes_a_complete_run_and_writes_no_page_unless_asked(outcomes: Path, tmp_path: Path) -> None:
    _every_section()
    proc = _report("--input", str(outcomes), "--load", str(tmp_path / "none.json"), "--check",
                   "--session", record.SESSION)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("checked ") and not (tmp_path / "reliability.md").exists()


def test_check_refuses_empty_outcomes(outcomes: Path, tmp_path: Path) -> None:
    outcomes.write_text(json.dumps({"sections": {}}))
    proc = _report("--input", str(outcomes), "--load", str(tmp_path / "none.json"), "--check")
    assert proc.returncode == 1 and "no case is recorded" in proc.stderr, proc.stderr


def test_check_refuses_a_section_that_did_not_run(outcomes: Path, tmp_path: Path) -> None:
    _every_section()
    doc = json.loads(outcomes.read_text())
    del doc["sections"]["placement"]
    outcomes.write_text(json.dumps(doc))
    proc = _report("--input", str(outcomes), "--load", str(tmp_path / "none.json"), "--check")
    assert proc.returncode == 1 and "section 'placement' has no recorded case" in proc.stderr, proc.stderr


def test_check_refuses_a_case_left_by_an_earlier_session(outcomes: Path, tmp_path: Path) -> None:
    _every_section()
    doc = json.loads(outcomes.read_text())
    doc["sections"]["faults"]["old oom"] = {"ok": True, "session": "earlier-run", "recorded_at": "2026-01-01T00:00:00"}
    outcomes.write_text(json.dumps(doc))
    for extra in ([], ["--session", record.SESSION]):
        proc = _report("--input", str(outcomes), "--load", str(tmp_path / "none.json"), "--check", *extra)
        assert proc.returncode == 1, proc.stderr
        assert "left by another session" in proc.stderr and "'old oom' (session earlier-run" in proc.stderr
    # The run it names is the one every case must come from: this session's cases are stale to another.
    proc = _report("--input", str(outcomes), "--load", str(tmp_path / "none.json"), "--check",
                   "--session", "earlier-run")
    assert proc.returncode == 1 and f"session {record.SESSION}" in proc.stderr
