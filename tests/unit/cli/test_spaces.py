"""``autotune spaces`` lists the benchmark spaces apart, under a line that says what they are."""

from __future__ import annotations

import json

import pytest

from autotune.cli import spaces
from autotune.space.packaged import is_benchmark, names


def test_benchmark_spaces_are_listed_apart_and_labelled(capsys: pytest.CaptureFixture[str]) -> None:
    assert spaces.main([]) == 0
    tuning, bench, folder = capsys.readouterr().out.split("\n\n")
    assert [line.split()[0] for line in tuning.splitlines()] == [n for n in names() if not is_benchmark(n)]
    head, *rows = bench.splitlines()
    assert head.startswith("Benchmark spaces (the sampler benchmark's landscapes, python -m autotune.bench_search")
    assert [line.split()[0] for line in rows] == [n for n in names() if is_benchmark(n)]
    assert rows and all(line.startswith("bench-") for line in rows)
    assert "demo" in tuning and folder.startswith("files in ")


def test_the_json_list_marks_the_benchmark_spaces(capsys: pytest.CaptureFixture[str]) -> None:
    assert spaces.main(["--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    marked = {s["name"]: s["benchmark"] for s in record["spaces"]}
    assert marked["demo"] is False and marked["kimi-k2.5-eagle3-tp8"] is False
    assert {n for n, b in marked.items() if b} == {n for n in names() if n.startswith("bench-")} != set()
