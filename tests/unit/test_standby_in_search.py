"""scripts/gpu/standby_in_search.py on the ninth session's committed 8B search (no standby), as itself
and changed the ways a misbehaving standby would show."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHIVE = REPO / "docs/measurements/raw/cost-per-answer-h200-2026-12-03/search.tar.xz"
SCRIPT = REPO / "scripts/gpu/standby_in_search.py"


def _unpack(dest: Path) -> Path:
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_ninth_search_against_itself_holds(tmp_path: Path) -> None:
    ref = _unpack(tmp_path / "ref")
    proc = _run(str(ref), "--reference", str(ref))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| s0")]
    assert len(rows) == 5
    assert rows[0].startswith("| s03.json | baseline |") and "| 560916 |" in rows[0]  # launched first
    assert all("| 521049 |" in r for r in rows[1:])
    assert "every check held (pools against the reference)" in proc.stdout


def test_a_busy_standby_and_a_shrunk_pool_fail(tmp_path: Path) -> None:
    ref = _unpack(tmp_path / "ref")
    mine = _unpack(tmp_path / "mine")
    record = next(mine.glob("rs-*/*/search/s01.json"))
    data = json.loads(record.read_text())
    data["standby"] = {"used": True, "next_cpu_s_measuring": 2.5}
    record.write_text(json.dumps(data))
    log = next(mine.rglob(Path(data["log_path"]).name))
    log.write_text(log.read_text().replace("max_total_num_tokens=521049", "max_total_num_tokens=517000"))
    proc = _run(str(mine), "--reference", str(ref))
    assert proc.returncode == 1, proc.stdout
    assert "FAIL: s01.json (3-4-8): the next server's standby took 2.5 CPU s" in proc.stdout
    assert "FAIL: s01.json (3-4-8): KV pool 517000 tokens against 521049 without a standby" in proc.stdout
    assert proc.stdout.count("FAIL:") == 2


def _rebound(value: float) -> str:
    return (f"SGLANG_SIMULATE_ACC_LEN: 1.0009765625 (the fork server's probe) -> {value!r} in 2 place(s): "
            "sglang.srt.speculative.spec_utils.SIMULATE_ACC_LEN, "
            "sglang.srt.speculative.spec_utils.generate_simulated_accept_index (default)")


def test_a_forked_child_must_bind_its_own_configs_value(tmp_path: Path) -> None:
    mine = _unpack(tmp_path / "mine")
    records = {p.name: p for p in mine.glob("rs-*/*/search/s*.json")}
    forced = {}
    for name, path in records.items():
        data = json.loads(path.read_text())
        value = data.get("synthetic_accept_length")
        forced[name] = value
        data["standby"] = {"used": True, "children": {"forked": 2, "spawned": 0, "why_spawned": [],
                                                      "rebound": [_rebound(-1.0 if value is None else value)] * 2}}
        path.write_text(json.dumps(data))
    proc = _run(str(mine))
    assert proc.returncode == 0, proc.stdout
    spec = next(n for n, v in forced.items() if v is not None)
    assert any(ln.startswith(f"| {spec} |") and f"| {forced[spec]}, {forced[spec]} |" in ln
               for ln in proc.stdout.splitlines()), proc.stdout
    # One child kept the probe's binding: it bound 1.0009765625, and simulated an accept length of about 1.
    data = json.loads(records[spec].read_text())
    data["standby"]["children"]["rebound"][1] = _rebound(1.0009765625)
    data["accept_length"] = 1.02
    records[spec].write_text(json.dumps(data))
    proc = _run(str(mine))
    assert proc.returncode == 1, proc.stdout
    assert f"a forked child bound 1.0009765625, its config {float(forced[spec])}" in proc.stdout
    assert f"accept length 1.02 measured, {forced[spec]} forced (at most 2% apart)" in proc.stdout
    assert proc.stdout.count("FAIL:") == 2
