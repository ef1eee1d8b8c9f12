"""Per-rate answers: ``workload.request_rate: [2, 50]`` measures each trial at every rate.

The level machinery is the concurrency levels' (:mod:`autotune.trial.level_results`); this checks what a
rate list changes: level labels (``r2``, ``r50``) in the metrics, the tag, ``trials.csv``, the
summary and the per-level export, and that the adaptive export (keyed by batch size) refuses.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.bench.client import run_benchmark_sync
from autotune.space.workload import Workload
from tests.e2e.test_search import _assert_no_emulator_left, _mlflow, _search, _study
from tests.unit.sim.test_sim_server import LLAMA_ARGS, Sim, launch  # noqa: F401  (launch is a fixture)

slow = pytest.mark.slow


@pytest.mark.slow  # a real server under load
@pytest.mark.timeout(90)
def test_a_rate_of_50_per_second_without_concurrency_keeps_several_requests_in_flight(
        launch: Callable[..., Sim]) -> None:  # noqa: F811
    """Open-loop arrivals are not throttled to one in flight (the old default cap of 1 made the
    rate closed-loop concurrency 1): 8 requests at 50/s against a real emulator, the overlap read
    from the records' send and close times; a written ``concurrency: 1`` still caps it."""
    spec = {"request_rate": [2, 50], "num_prompts": 8, "warmup_prompts": 0, "output_len": 48,
            "max_duration_s": 30}
    sim = launch(*LLAMA_ARGS)
    fast = Workload.from_spec(spec).levels()[1]
    bench = run_benchmark_sync(sim.url, fast.measured(), **fast.bench_kwargs())
    assert bench.completed == 8 and bench.request_rate == 50.0
    assert bench.peak_in_flight is not None and bench.peak_in_flight > 1
    assert bench.concurrency is None
    capped = Workload.from_spec({**spec, "concurrency": 1}).levels()[1]
    bench = run_benchmark_sync(sim.url, capped.measured(), **capped.bench_kwargs())
    assert (bench.completed, bench.peak_in_flight) == (8, 1)


@slow
def test_rate_levels_give_a_best_config_per_rate_and_export_the_table(
        tmp_path: Path, sim_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli.export import main as export_main

    outcome, text = _search("rate-levels.yaml", tmp_path)
    _, runs = _mlflow("test-rate-levels", tmp_path)
    measured = [r for r in runs if r.status != "failed"]
    assert measured
    for r in measured:
        assert list(json.loads(r.tags["autotune.level_status"])) == ["r2", "r50"]
        # The run's own figures (what Optuna was told) are the primary level's: the first rate.
        assert r.metrics["output_tok_s"] == r.metrics["output_tok_s_r2"]
        assert "output_tok_s_r50" in r.metrics and "speedup_r50" in r.metrics
    study = _study(outcome.experiment_path)
    trials = {r.tags["autotune.trial_id"]: r for r in runs if r.kind == "trial"}
    assert len(study.trials) == len(trials) == 2

    assert [(row["request_rate"], row["level"]) for row in outcome.per_level] == [(2.0, "r2"), (50.0, "r50")]
    assert all("concurrency" not in row for row in outcome.per_level)
    rows = list(csv.DictReader(io.StringIO(outcome.report_files["trials.csv"])))
    for answer in outcome.per_level:
        label = answer["level"]
        assert {f"status_{label}", f"output_tok_s_{label}", f"speedup_{label}"} <= set(rows[0])
        if answer["winner"] is not None and not answer["is_baseline"]:
            row = next(r for r in rows if r["trial_id"] == answer["winner"])
            assert answer["output_tok_s"] == pytest.approx(float(row[f"output_tok_s_{label}"]), rel=1e-3)
    summary = outcome.report_files["summary.md"]
    assert "## Best config per request rate" in summary and "| request rate (req/s) |" in summary
    assert "Best config per request rate" in text

    # The per-level table is exported with each rate's winner ...
    capsys.readouterr()
    assert export_main(["--name", "test-rate-levels", "--root", str(tmp_path), "--per-level"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [(row["request_rate"], row["level"]) for row in table["levels"]] == [(2.0, "r2"), (50.0, "r50")]
    for answer, row in zip(outcome.per_level, table["levels"], strict=True):
        assert (row["winner"] or {}).get("trial_id") == answer["winner"]
    assert "same request rate" in table["note"]
    # ... but not as SGLang's adaptive table: it is keyed by batch size, which a rate does not fix.
    config = tmp_path / "adaptive.json"
    assert export_main(["--name", "test-rate-levels", "--root", str(tmp_path),
                        "--adaptive-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "batch size" in err and "--per-level" in err and not config.exists()
    _assert_no_emulator_left(sim_env)
