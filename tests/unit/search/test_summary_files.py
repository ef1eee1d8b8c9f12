"""trials.csv and summary.md (autotune.search.summary_files) from real trial results."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from autotune.search.console import print_summary
from autotune.search.gpu_bill import search_totals
from autotune.search.options import SearchOutcome
from autotune.search.summary_files import SUMMARY_MD, TRIALS_CSV, rows_of, summary_md, trials_csv, write_beside
from autotune.search.trial_report import TrialEntry, TrialReport
from autotune.trial.gpu_time import GpuTime
from autotune.trial.result import TrialResult

SPEC = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4}


def result(params: dict, **kw: object) -> TrialResult:
    base = dict(status="feasible", reason=None, params=params, is_baseline=not params.get("speculative_algorithm"))
    return TrialResult(**{**base, **kw})  # type: ignore[arg-type]


def outcome(winner: TrialResult | None, **kw: object) -> SearchOutcome:
    data = dict(name="s", winner=winner.to_dict() if winner else None, baseline=None, trials=3,
                feasible=1, infeasible=1, failed=1, interrupted=False, baseline_wins=False,
                finalists=[], tracking_uri=None, parent_run_id=None, experiment_path=None, overheads_s=[])
    return SearchOutcome(**{**data, **kw})  # type: ignore[arg-type]


def test_rows_keep_every_measurement_and_unknowns_stay_empty() -> None:
    plain = result({"speculative_algorithm": None}, output_tok_s=200.0, speedup=1.0)
    spec = result(SPEC, output_tok_s=300.0, speedup=1.5, accept_length=2.76, baseline_tok_s=200.0,
                  phases={"verify_ms": 5.4, "cycle_ms": 7.3, "verify_pct": 74.0})
    failed = result({**SPEC, "speculative_num_steps": 5}, status="failed", reason="crashed at start-up")
    again = result(SPEC, output_tok_s=290.0, speedup=1.4)
    fresh = result({"speculative_algorithm": None}, output_tok_s=207.0, speedup=1.0)
    reports = [("t1", SPEC, TrialReport(objective=300.0, constraints={}, result=spec, baseline=plain)),
               ("t2", failed.params, TrialReport(objective=None, constraints={"failed": 1.0}, result=failed))]
    rows = rows_of(reports, [("t1", again, fresh)])
    # A trial's group baseline is named as its MLflow run is (TrialReport.baseline_label).
    assert [(r.kind, r.trial_id) for r in rows] == [
        ("baseline", reports[0][2].baseline_label), ("trial", "t1"), ("trial", "t2"),
        ("finalist", "finalist-t1"), ("baseline", "finalist-t1-baseline")]
    table = list(csv.DictReader(io.StringIO(trials_csv(rows))))
    assert table[1]["verify_ms"] == "5.4" and table[1]["accept_length"] == "2.76"
    assert table[2]["status"] == "failed" and table[2]["reason"] == "crashed at start-up"
    # Unknown is an empty cell, never a 0.
    assert table[2]["output_tok_s"] == "" and table[2]["speedup"] == "" and table[0]["accept_length"] == ""
    assert table[2]["speculative_num_steps"] == "5" and table[0]["speculative_num_steps"] == ""

    md = summary_md(outcome(again, finalists=[{"params": SPEC, "search_tok_s": 300.0, "confirmed_tok_s": 290.0,
                                               "confirmed_speedup": 1.4, "status": "feasible", "reason": None}]),
                    rows)
    assert "**Winner: algorithm=EAGLE3, steps=3, topk=1, draft_tokens=4**" in md
    assert "| algorithm=EAGLE3, steps=3, topk=1, draft_tokens=4 | 300.0 | 290.0 | 1.400x | feasible |" in md
    # Ranked by tok/s, the failed trial last with "-" for what it did not measure.
    ranked = [ln for ln in md.splitlines() if ln.startswith("| ") and ln.count("|") == 9][1:]
    assert ranked[0].startswith("| trial | t1 |") and ranked[-1].startswith("| trial | t2 |")
    assert "| failed | - | - | - | crashed at start-up |" in ranked[-1]


def test_no_winner_and_baseline_wins_say_so() -> None:
    none = summary_md(outcome(None), [])
    assert "nothing to recommend" in none and "Winner" not in none
    plain = result({"speculative_algorithm": None}, output_tok_s=200.0, speedup=1.0, baseline_tok_s=200.0)
    wins = summary_md(outcome(plain, baseline_wins=True), [])
    assert "serve without speculative decoding" in wins and "accept length" not in wins
    cut = summary_md(outcome(None, interrupted=True), [])
    assert "**Interrupted**" in cut and "nothing to recommend" not in cut


def test_files_land_beside_the_summary_json(tmp_path: Path) -> None:
    paths = write_beside(tmp_path / "run1.json", {TRIALS_CSV: "a\n", SUMMARY_MD: "# s\n"})
    assert sorted(p.name for p in paths) == ["run1.md", "run1.trials.csv"]
    assert (tmp_path / "run1.md").read_text() == "# s\n"


def test_the_summary_gives_the_command_to_serve_with_not_the_measured_one() -> None:
    """summary.md and the console print the winner's serve_command (the export's), not the launch
    that carried the forced accept length; an old record without one says its command is as measured."""
    measured = "export SGLANG_SIMULATE_ACC_LEN=2.756\npython -m sglang.launch_server --x 1"
    serve = "python -m sglang.launch_server --x 1"
    w = result(SPEC, output_tok_s=300.0, speedup=1.5, launch_command=measured, serve_command=serve)
    md = summary_md(outcome(w), [])
    assert f"```\n{serve}\n```" in md and "SIMULATE_ACC_LEN" not in md
    assert "Launch command (to serve with;" in md
    old = summary_md(outcome(result(SPEC, output_tok_s=300.0, launch_command=measured)), [])
    assert "Launch command as measured (python -m autotune.export writes the one to serve with):" in old
    assert measured in old


def test_gpu_time_is_a_column_set_per_row_and_a_table_in_summary_md() -> None:
    ran = result(SPEC, output_tok_s=300.0, gpu_time=GpuTime(gpus=2, startup_s=60.0, warmup_s=10.0,
                                                            measure_s=30.0, teardown_s=2.0))
    crashed = result({**SPEC, "speculative_num_steps": 5}, status="failed", reason="crashed at start-up",
                     gpu_time=GpuTime(gpus=2, startup_s=8.0, teardown_s=1.0))
    entries = [TrialEntry("t1", SPEC, TrialReport(objective=300.0, constraints={}, result=ran)),
               TrialEntry("t2", crashed.params, TrialReport(objective=None, constraints={"failed": 1.0},
                                                            result=crashed))]
    totals = search_totals(entries, overheads=[1.5, 0.5], overhead_gpus=[2, 2])
    rows = rows_of(entries)
    got = {r["trial_id"]: r for r in csv.DictReader(io.StringIO(trials_csv(rows)))}
    assert {k: got["t1"][k] for k in ("gpus", "gpu_s", "time_startup_s", "time_measure_s")} == {
        "gpus": "2.0", "gpu_s": "204.0", "time_startup_s": "60.0", "time_measure_s": "30.0"}
    # A crash at start-up: its start-up and teardown paid, warm-up and measurement unknown (empty).
    assert got["t2"]["gpu_s"] == "18.0" and got["t2"]["time_warmup_s"] == "" and got["t2"]["time_measure_s"] == ""
    md = summary_md(outcome(ran, gpu_time={**totals.to_dict(), "unrecorded_trials": 0}), rows)
    assert "## GPU time" in md and "| **total** | 226.0 | 0.0 | 0.0 | **226.0** |" in md
    assert "| tuner overhead | 4.0 | 0.0 | 0.0 | 4.0 |" in md
    assert "## GPU time" not in summary_md(outcome(ran), rows)  # not counted: no table, not a 0


def test_the_winner_says_how_it_was_decided_and_gives_its_margin() -> None:
    spec = result(SPEC, output_tok_s=300.0, speedup=1.5, baseline_tok_s=200.0)
    line = "margin over the runner-up (num_steps=5): +8.0% [+5.1%, +11.0%] at 95%, separated"
    settled = outcome(spec, margin={"line": line, "decisive": True, "source": "trials"})
    md = summary_md(settled, [])
    assert "decided by the trials' evidence (not re-measured)" in md and f"Its {line}." in md
    out = io.StringIO()
    print_summary(settled, out=out)
    assert "not re-measured" in out.getvalue() and line in out.getvalue()
    # Re-measured finalists: confirmed, with the margin from wherever it came.
    confirmed = outcome(spec, margin={"line": line, "decisive": False, "source": "finalists"},
                        finalists=[{"trial_id": "t1", "params": SPEC, "status": "feasible"}])
    md = summary_md(confirmed, [])
    assert "confirmed beside a fresh baseline" in md and line in md
    # No evidence at all (an older outcome): the old wording, no margin line.
    plain = summary_md(outcome(spec), [])
    assert "confirmed beside a fresh baseline" in plain and "margin" not in plain


def test_a_capped_measurement_is_flagged_in_the_csv_and_the_summary() -> None:
    note = "ran 48 of 64; 16 queued; server cap 48; 41% of the window was tail"
    capped = result(SPEC, output_tok_s=2900.0, speedup=0.9, load_asked=64, load_ran=48, load_queued=16,
                    load_tail_pct=41.0, load_capped=True, load_note=note,
                    load_comparison="compared at the load each sustained: this config ran 48 of 64 (capped), "
                    "its baseline 64 of 64")
    plain = result({"speculative_algorithm": None}, output_tok_s=3200.0, speedup=1.0, load_asked=64,
                   load_ran=64, load_queued=0, load_capped=False)
    rows = rows_of([("t1", SPEC, TrialReport(objective=2900.0, constraints={}, result=capped, baseline=plain))])
    table = list(csv.DictReader(io.StringIO(trials_csv(rows))))
    assert [(r["kind"], r["load_capped"], r["load_ran"]) for r in table] == [
        ("baseline", "False", "64"), ("trial", "True", "48")]
    assert table[1]["load_note"] == note and table[0]["load_note"] == ""
    md = summary_md(outcome(capped), rows)
    section = md.split("## Capped load", 1)[1].split("## ", 1)[0]
    # Only the capped measurement is listed, with the verdict's note on what it compared.
    assert "| trial | t1 |" in section and note in section and "| baseline |" not in section
    assert "its baseline 64 of 64" in section
    assert f"| load | capped: {note} |" in md
    shaped = summary_md(outcome(capped, workload_shape={
        "requests": 128, "output_tokens": 256, "ignore_eos": True, "api": "generate",
        "send_mode": "closed loop, concurrency 64", "prompt_chars_p10": 40.0, "prompt_chars_p50": 110.0,
        "prompt_chars_p90": 1900.0, "distinct_prompts": 120, "shared_prefix_pct": 0.0,
        "input_tokens_p10": 12.0, "input_tokens_p50": 30.0, "input_tokens_p90": 420.0}), rows)
    assert ("The figures above were measured on: 128 requests x 256 output tokens (fixed), generate API, "
            "closed loop, concurrency 64; input tokens p10/p50/p90 12/30/420 (server-counted)") in shaped
    assert "## Capped load" not in summary_md(outcome(plain), rows_of([("t2", {}, TrialReport(
        objective=3200.0, constraints={}, result=plain))]))


def test_a_winner_within_the_noise_of_its_runner_up_says_so_everywhere() -> None:
    spec = result(SPEC, output_tok_s=300.0, speedup=1.05, baseline_tok_s=285.0)
    line = "margin over the runner-up (num_steps=3): +2.4% [-2.6%, +7.7%] at 95%, NOT separated: within the noise"
    finalists = [{"trial_id": "t1", "params": SPEC, "status": "feasible"}]
    tied = outcome(spec, margin={"line": line, "decisive": False, "source": "finalists",
                                 "over_runner_up": {"ratio": 1.024, "low": 0.974, "high": 1.077,
                                                    "separated": False}}, finalists=finalists)
    assert tied.within_noise
    md = summary_md(tied, [])
    assert "the runner-up is within the noise, either serves as well." in md and line in md
    out = io.StringIO()
    print_summary(tied, out=out)
    assert "Winner (confirmed beside a fresh baseline; the runner-up is within the noise" in out.getvalue()
    assert tied.summary()["margin"]["over_runner_up"]["separated"] is False  # the JSON summary carries it
    # Separated: the plain wording.
    ahead = outcome(spec, margin={"line": line, "decisive": True, "source": "finalists",
                                  "over_runner_up": {"ratio": 1.08, "low": 1.05, "high": 1.11, "separated": True}},
                    finalists=finalists)
    assert not ahead.within_noise and "within the noise, either" not in summary_md(ahead, [])
    # No interval (one reading each): how close they are is unknown, never "within the noise".
    unknown = outcome(spec, margin={"line": line, "decisive": False, "source": "trials",
                                    "over_runner_up": {"ratio": 1.016, "low": None, "high": None,
                                                       "separated": False}}, finalists=finalists)
    assert not unknown.within_noise and "within the noise, either" not in summary_md(unknown, [])


def test_each_row_says_which_window_spoke_and_keeps_both_figures() -> None:
    """trials.csv carries the window the objective used, both windows' tok/s with their spreads, and
    why steady fell back to whole; a figure a trial does not have is an empty cell, not a 0."""
    steady = result(SPEC, output_tok_s=310.0, window="steady", output_tok_s_whole=290.0,
                    output_tok_s_whole_spread_pct=2.5, output_tok_s_steady=310.0,
                    output_tok_s_steady_spread_pct=0.8)
    fell = result({**SPEC, "speculative_num_steps": 5}, output_tok_s=280.0, window="whole",
                  window_reason="repeat 2: the steady interval spans 0.80 waves, under 1",
                  output_tok_s_whole=280.0, output_tok_s_whole_spread_pct=1.0)
    failed = result({**SPEC, "speculative_num_steps": 7}, status="failed", reason="crashed at start-up")
    entries = [TrialEntry(tid, r.params, TrialReport(objective=r.output_tok_s, constraints={}, result=r))
               for tid, r in (("t1", steady), ("t2", fell), ("t3", failed))]
    got = {r["trial_id"]: r for r in csv.DictReader(io.StringIO(trials_csv(rows_of(entries))))}
    cols = ("window", "window_reason", "output_tok_s_whole", "output_tok_s_whole_spread_pct",
            "output_tok_s_steady", "output_tok_s_steady_spread_pct")
    assert [got["t1"][c] for c in cols] == ["steady", "", "290.0", "2.5", "310.0", "0.8"]
    assert [got["t2"][c] for c in cols] == ["whole", "repeat 2: the steady interval spans 0.80 waves, under 1",
                                           "280.0", "1.0", "", ""]
    assert [got["t3"][c] for c in cols] == [""] * len(cols)
