"""benchmarks.agreement_report: the agreement tables from the benchmark's JSON, one run or several pooled."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks.agreement_report import level, main, pool

RAW = Path(__file__).resolve().parents[2] / "docs" / "measurements" / "raw" / "h100-2026-12-05"
THREE = RAW / "agreement-3levels.json"
FIVE = RAW / "agreement-c64-5rounds.json"


def _run(tok_s: list[float]) -> list[dict[str, float]]:
    return [{"tok_s": x} for x in tok_s]


def test_one_file_reads_as_the_device_printed_it(capsys: pytest.CaptureFixture[str]) -> None:
    # The device's own table (agreement-3levels.log): c1 1.0046 PASS, c16 0.9825 PASS, c64 1.0208 FAIL.
    assert main([str(THREE)]) == 1
    out = capsys.readouterr().out
    log = (RAW / "agreement-3levels.log").read_text()
    for row in ("   1 (8 req)           282.8   0.4%                281.5   0.7%  1.0046",
                "64 (384 req)         5,914.0   2.1%              5,793.4   7.2%  1.0208"):
        assert row in out and row in log
    assert "2/3 concurrencies agree within 2%" in out


def test_pooling_takes_the_ratio_of_the_pooled_medians() -> None:
    runs = [json.loads(THREE.read_text()), json.loads(FIVE.read_text())]
    levels = {lv["concurrency"]: lv for lv in pool(runs, within=2.0)}
    assert sorted(levels) == [1, 16, 64]
    c64 = levels[64]
    a = [r["tok_s"] for run in runs for lv in run["levels"] if lv["concurrency"] == 64 for r in lv["autotune"]]
    b = [r["tok_s"] for run in runs for lv in run["levels"] if lv["concurrency"] == 64 for r in lv["bench_serving"]]
    assert len(a) == len(b) == 8 == len(c64["round_ratios"])
    assert c64["ratio"] == pytest.approx(statistics.median(a) / statistics.median(b))
    assert c64["ok"] is (abs(c64["ratio"] - 1) <= 0.02)
    assert levels[1]["ratio"] == pytest.approx(runs[0]["levels"][0]["ratio"])  # one file's level is unchanged


def test_a_level_outside_the_band_fails_and_unpaired_rounds_are_refused() -> None:
    assert level(concurrency=4, requests=8, autotune=_run([97, 98]), bench_serving=_run([100, 100]),
                 within=2.0)["ok"] is False
    assert level(concurrency=4, requests=8, autotune=_run([99, 98.5]), bench_serving=_run([100, 100]),
                 within=2.0)["ok"] is True
    with pytest.raises(ValueError, match="rounds pair one of each"):
        level(concurrency=4, requests=8, autotune=_run([99]), bench_serving=_run([100, 100]), within=2.0)


def test_different_windows_are_not_pooled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = json.loads(FIVE.read_text())
    other["levels"][0]["requests"] = 128
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    assert main([str(THREE), str(path)]) == 2
    assert "c64: 128 requests a run in one file and 384 in another" in capsys.readouterr().err


def test_a_file_that_is_not_the_benchmarks_json_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": []}')
    assert main([str(bad)]) == 2
    assert f"{bad}: no 'levels' list" in capsys.readouterr().err
    bad.write_text("{not json")
    assert main([str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
