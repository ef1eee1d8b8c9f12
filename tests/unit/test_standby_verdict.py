"""scripts/gpu/standby_verdict.py: the written-down rule that lets the cost-per-answer search use a standby.

Each case is a standby-ab.json as scripts/gpu/standby_ab.py writes it, changed in one way; the
script is run as scripts/gpu/plan_cost.sh runs it.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu" / "standby_verdict.py"


def _run(kind: str, cycle: int, *, startup_s: float, tok_s: float, used: bool | None = None,
         cpu: float | None = None, gpu: float | None = None) -> dict[str, Any]:
    return {"cycle": cycle, "kind": kind, "ok": True, "reason": None, "startup_s": startup_s, "tok_s": tok_s,
            "used": used, "standby_cpu_s": cpu, "standby_gpu_mib": gpu, "max_total_num_tokens": 812345,
            "standby": None if kind == "off" else {"used": used}}


def _passing() -> dict[str, Any]:
    rows = []
    for c in range(2):
        rows += [_run("off", c, startup_s=41.0 + c, tok_s=300.0 + c),
                 _run("fresh", c, startup_s=42.0, tok_s=299.5, used=False, cpu=0.0, gpu=0.0),
                 _run("standby", c, startup_s=27.0, tok_s=300.5, used=True, cpu=0.01, gpu=0.0)]
    return {"space": "scripts/gpu/h200-llama-8b.yaml", "backend": "sglang", "rows": rows, "summary": {}}


def _verdict(tmp_path: Path, ab: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "standby-ab.json"
    path.write_text(json.dumps(ab))
    return subprocess.run([sys.executable, str(SCRIPT), str(path), *extra], capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_clean_ab_passes_and_writes_the_space_with_a_standby(tmp_path: Path) -> None:
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump({"name": "s", "model_path": "../m", "measure": {"repeats": 3}}))
    proc = _verdict(tmp_path, _passing(), "--space", str(space), "--write")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("PASS")
    written = Path(proc.stdout.strip().splitlines()[-1])
    assert written == tmp_path / ".s-standby.yaml"
    data = yaml.safe_load(written.read_text())
    assert data["measure"] == {"repeats": 3, "standby": True} and data["model_path"] == "../m"


def _change(ab: dict[str, Any], kind: str, **fields: Any) -> dict[str, Any]:
    ab = copy.deepcopy(ab)
    for r in ab["rows"]:
        if r["kind"] == kind:
            r.update(fields)
    return ab


@pytest.mark.parametrize(("change", "said"), [
    (lambda ab: _change(ab, "standby", used=False), "did not launch the server"),
    (lambda ab: _change(ab, "fresh", standby_gpu_mib=512.0), "held 512.0 MiB"),
    (lambda ab: _change(ab, "standby", standby_gpu_mib=None), "held None MiB"),
    (lambda ab: _change(ab, "fresh", standby_cpu_s=2.5), "took 2.5 CPU s"),
    (lambda ab: _change(ab, "standby", max_total_num_tokens=790000), "KV pools differ"),
    (lambda ab: _change(ab, "standby", tok_s=294.0), "standby read 294.0 tok/s"),
    (lambda ab: _change(ab, "fresh", tok_s=306.0), "fresh read 306.0 tok/s"),
    (lambda ab: _change(ab, "standby", startup_s=45.0), "no saving"),
    (lambda ab: _change(ab, "off", ok=False, reason="crashed"), "off failed: crashed"),
    (lambda ab: {**ab, "rows": [r for r in ab["rows"] if r["kind"] != "standby"]}, "no standby run"),
])
def test_each_broken_check_fails_the_verdict_and_says_which(tmp_path: Path, change: Any, said: str) -> None:
    space = tmp_path / "s.yaml"
    space.write_text("name: s\n")
    proc = _verdict(tmp_path, change(_passing()), "--space", str(space), "--write")
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.startswith("FAIL") and said in proc.stdout, proc.stdout
    assert not (tmp_path / ".s-standby.yaml").exists()
    # The search's space says "off" itself: SGLang's default is on.
    written = Path(proc.stdout.strip().splitlines()[-1])
    assert written == tmp_path / ".s-no-standby.yaml"
    assert yaml.safe_load(written.read_text())["measure"] == {"standby": False}


def test_the_emulator_is_not_asked_for_gpu_memory(tmp_path: Path) -> None:
    ab = _change(_passing(), "fresh", standby_gpu_mib=None)
    ab = _change(ab, "standby", standby_gpu_mib=None)
    assert _verdict(tmp_path, ab).returncode == 1  # on a real GPU an unmeasured figure fails
    assert _verdict(tmp_path, {**ab, "backend": "sim"}).returncode == 0


def test_a_missing_ab_fails_with_its_reason(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.json")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 1 and proc.stdout.startswith("FAIL: no A/B to judge"), proc.stdout


def _printed(ab: dict[str, Any]) -> str:
    """``ab``'s runs as scripts/gpu/standby_ab.py prints them, with its own formatter and columns."""
    sys.path.insert(0, str(REPO / "scripts" / "gpu"))
    try:
        from standby_ab import COLUMNS, fmt_cell
    finally:
        sys.path.remove(str(REPO / "scripts" / "gpu"))
    lines = ["NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04", "sglang 0.5.17"]
    lines += [" | ".join(f"{c}={fmt_cell(r.get(c))}" for c in ("cycle", "kind", "ok", "used", *COLUMNS))
              for r in ab["rows"]]
    return "\n".join(lines + ["cycle 2 off: not started, 51 s left", "| kind | n |"]) + "\n"


def test_the_printed_log_judges_as_its_json_does(tmp_path: Path) -> None:
    ab = _passing()
    (tmp_path / "standby-ab.log").write_text(_printed(ab))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "standby-ab.log")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("PASS"), proc.stdout + proc.stderr
    assert "standby: 2 runs, tok/s median 300.5" in proc.stdout and "start-up median 27.0 s" in proc.stdout
    # A run the log shows failing the rule fails it from the log too (its GPU line says a GPU: MiB asked).
    (tmp_path / "bad.log").write_text(_printed(_change(ab, "standby", standby_gpu_mib=None)))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "bad.log")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "held None MiB" in proc.stdout, proc.stdout


def test_a_file_that_is_not_an_ab_log_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "notes.log").write_text("cycle 1 fresh: not started\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "notes.log")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stdout
    assert "notes.log" in proc.stdout and "not standby_ab.py's printed output" in proc.stdout


def test_several_abs_are_judged_on_their_pooled_runs(tmp_path: Path) -> None:
    # Each A/B alone has one off run 2% from its standby runs, in opposite directions: each fails
    # the 1.5% bound, and pooled the medians agree.
    slow = _change(_change(_passing(), "off", tok_s=294.0), "off", tok_s=294.0)
    fast = _change(_passing(), "off", tok_s=306.5)
    for ab in (slow, fast):
        assert _verdict(tmp_path, ab).returncode == 1
    paths = []
    for i, ab in enumerate((slow, fast)):
        paths.append(tmp_path / f"ab{i}.json")
        paths[-1].write_text(json.dumps(ab))
    proc = subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("PASS"), proc.stdout
    assert "off: 4 runs, tok/s median 300.2" in proc.stdout
    # A broken check in one of them still fails the pool, and names the file and cycle.
    paths[1].write_text(json.dumps(_change(fast, "standby", used=False)))
    proc = subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 1 and f"cycle {paths[1]}:0: the standby did not launch" in proc.stdout, proc.stdout
