"""A search's GPU bill end to end: real Ray, real emulator servers, real MLflow (sqlite in tmp_path).

The ``failures`` space's four trials are one of each: out of memory at start-up (TP 4), a crash at
start-up, a crash mid-measurement, and a config that runs (then its baseline and the finalist's
confirmation). Every server the search started is in the bill, failed ones too, and the same
figures are in the console, ``summary.md``, ``trials.csv``, MLflow and the JSON summary, with the
parts adding up to the total.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import pytest

from autotune.figures import shown
from autotune.search.summary_files import SUMMARY_MD, TRIALS_CSV
from autotune.trial.gpu_time import PARTS, STAGES
from tests.e2e.test_search import _assert_no_emulator_left, _mlflow, _search

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _f(cell: str) -> float | None:
    return float(cell) if cell != "" else None


@pytest.mark.slow
def test_the_bill_counts_every_server_failed_ones_too_and_adds_up(tmp_path: Path, sim_env: Path) -> None:
    outcome, text = _search("failures.yaml", tmp_path)
    bill: dict[str, Any] | None = outcome.summary()["gpu_time"]  # the JSON summary carries it
    assert bill is not None and outcome.gpu_time == bill
    total = bill["gpu_s"]
    assert total > 0
    assert math.fsum(bill["by_part"].values()) == pytest.approx(total, rel=1e-9)
    assert math.fsum(bill["by_stage"].values()) == pytest.approx(total, rel=1e-9)
    assert set(bill["by_part"]) == set(PARTS) and set(bill["by_stage"]) == set(STAGES)
    assert bill["by_stage"]["baselines"] > 0, bill  # each group's baseline, the OOM one too
    # A feasible config is confirmed on two fresh servers (itself and its baseline); an infeasible
    # one (the emulator's noise may make it so) has no finalist.
    assert bill["servers"]["finalists"] == 2 * len(outcome.finalists), (bill, outcome.finalists)
    assert (bill["by_stage"]["finalists"] > 0) == bool(outcome.finalists)
    assert bill["by_part"]["overhead"] > 0  # the tuner's time between trials holds GPUs too

    # trials.csv: a row per server, each with its parts; together they are the bill less overhead.
    rows = list(csv.DictReader(io.StringIO(outcome.report_files[TRIALS_CSV])))
    # (trials.csv rounds every figure to 4 decimals)
    assert math.fsum(_f(r["gpu_s"]) or 0.0 for r in rows) == pytest.approx(total - bill["by_part"]["overhead"],
                                                                           abs=1e-4 * len(rows))
    for r in rows:
        parts = [_f(r[f"time_{p}_s"]) for p in ("startup", "warmup", "measure", "teardown")]
        gpus = _f(r["gpus"])
        assert gpus is not None, r["trial_id"]
        assert _f(r["gpu_s"]) == pytest.approx(gpus * math.fsum(p for p in parts if p is not None),
                                               abs=gpus * 4 * 1e-4)
    failures = {"oom" if r["tp_size"] == "4" else (r["AUTOTUNE_SIM_FAULT"] or "ok"): r
                for r in rows if r["kind"] == "trial"}
    assert {"oom", "crash_at_start", "crash_after_requests:2"} <= set(failures), sorted(failures)
    for kind in ("oom", "crash_at_start"):  # paid for: start-up and teardown, and nothing else
        r = failures[kind]
        assert (_f(r["time_startup_s"]) or 0) > 0 and r["time_teardown_s"] != "", kind
        assert r["time_warmup_s"] == "" and r["time_measure_s"] == "", kind
    assert _f(failures["oom"]["gpus"]) == 4 and _f(failures["crash_at_start"]["gpus"]) == 8
    assert (_f(failures["crash_after_requests:2"]["time_measure_s"]) or 0) > 0

    # summary.md and the console say it.
    md = outcome.report_files[SUMMARY_MD]
    assert "## GPU time" in md and f"**{total:.1f}**" in md
    assert f"GPU time: {total:,.1f} GPU-s" in text

    # MLflow: the search run's totals, each trial run's own figures.
    parent, runs = _mlflow("test-failures", tmp_path)
    assert parent.data.metrics["gpu_s_total"] == pytest.approx(shown(total))
    for part in PARTS:
        assert parent.data.metrics[f"gpu_s_{part}"] == pytest.approx(shown(bill["by_part"][part]))
    for stage in STAGES:
        assert parent.data.metrics[f"gpu_s_{stage}"] == pytest.approx(shown(bill["by_stage"][stage]))
    by_id = {r["trial_id"]: r for r in rows}
    logged = [run for run in runs if run.trial_id in by_id]
    assert len(logged) == len(rows)
    for run in logged:
        row = by_id[str(run.trial_id)]
        # Two roundings of one figure (the CSV's decimals, MLflow's four significant digits) may
        # differ by one unit in the last place.
        assert run.metrics["gpu_s"] == pytest.approx(_f(row["gpu_s"]), rel=1e-3, abs=1e-3)
        assert ("time_measure_s" in run.metrics) == (row["time_measure_s"] != "")  # unknown: absent
    _assert_no_emulator_left(sim_env)
