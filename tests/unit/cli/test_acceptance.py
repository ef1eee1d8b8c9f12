"""``autotune acceptance``'s inputs and errors, and ``repick --by-category``'s (the emulator run
that feeds them is tests/integration/test_acceptance_profile.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.cli.acceptance import main, shape_of
from autotune.cli.repick import main as repick_main
from tests.tracking_helpers import eagle, result


def _rec(hist: list[int], kind: str) -> dict:
    return {"prompt_id": "p", "kind": kind, "ok": True, "error": None,
            "spec": {"spec_correct_drafts_histogram": hist}}


def test_a_folder_of_mlflow_trial_artifacts_gives_its_shape_from_result_json(tmp_path: Path) -> None:
    (tmp_path / "requests.jsonl").write_text(
        "\n".join(json.dumps(_rec(h, k)) for h, k in (([1, 2, 7], "code"), ([5, 4, 1], "chat"))) + "\n\n")
    argv = ["python", "-m", "sglang.launch_server", "--speculative-num-steps", "2", "--speculative-eagle-topk=1"]
    (tmp_path / "result.json").write_text(json.dumps({"argv": argv}))
    out = tmp_path / "profile.json"
    assert main([str(tmp_path), "--json", "-o", str(out)]) == 0
    profile = json.loads(out.read_text())
    assert (profile["steps"], profile["topk"], profile["depth_from"]) == (2, 1, "steps")
    assert profile["by_category"]["code"]["rates"] == [pytest.approx(0.9), pytest.approx(7 / 9)]


def test_shape_of_reads_both_flag_forms_and_leaves_the_rest_unknown() -> None:
    assert shape_of({"argv": ["--speculative-num-steps=3", "--speculative-eagle-topk", "4"]}) == (3, 4)
    assert shape_of({"argv": ["--tp-size", "1"]}) == (None, None)
    assert shape_of(None) == (None, None)


def test_a_bad_line_is_named_by_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "requests.jsonl"
    bad.write_text(json.dumps(_rec([1, 1], "code")) + "\n{oops\n")
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: not JSON" in err and "one request record a line" in err


def test_a_trial_record_without_records_says_how_to_get_them(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    trial = tmp_path / "trial.json"
    trial.write_text(json.dumps({"argv": [], "status": "feasible"}))
    assert main([str(trial)]) == 2
    assert "--records" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_histograms_longer_than_the_given_steps_are_bad_input(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "r.jsonl"
    run.write_text(json.dumps(_rec([1, 1, 1, 1], "code")) + "\n")
    assert main([str(run), "--steps", "2"]) == 2
    assert "more than 2 drafts" in capsys.readouterr().err


def test_repick_by_category_needs_a_profile_with_categories(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    surface = tmp_path / "s.json"
    surface.write_text("{}")
    assert repick_main(["--surface", str(surface), "--acceptance", "rates:[0.8]", "--by-category"]) == 2
    assert "--by-category reads the categories of --acceptance-file" in capsys.readouterr().err
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"rates": [0.8, 0.7]}))
    assert repick_main(["--surface", str(surface), "--acceptance-file", str(plain), "--by-category"]) == 2
    err = capsys.readouterr().err
    assert str(plain) in err and "by_category" in err and "autotune acceptance" in err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"rates": [0.8], "by_category": {"code": {"rates": []}}}))
    assert repick_main(["--surface", str(surface), "--acceptance-file", str(empty), "--by-category"]) == 2
    assert "by_category['code']" in capsys.readouterr().err


def test_repick_says_when_a_profile_s_rates_are_a_tree_s_path(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "tree.json"
    profile.write_text(json.dumps({"rates": [0.9], "rates_are": "tree path", "note": "a top-2 tree"}))
    repick_main(["--surface", str(tmp_path / "none.json"), "--acceptance-file", str(profile)])
    assert "not the draft's top-1 rates: a top-2 tree" in capsys.readouterr().err


def test_a_search_s_trial_is_read_from_its_mlflow_store_by_name(
        tracker: Any, store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--name --trial`` reads the run's requests.jsonl and result.json artifacts, as a folder of
    them would be read (the real sqlite store, the real artifacts Tracker.log_trial writes)."""
    recs = [_rec([1, 2, 7], "code"), _rec([5, 4, 1], "chat")]
    tracker.log_trial("t_2steps", result(eagle(2, 1), 1400.0, records=recs))
    tracker.log_trial("t_none", result(eagle(3, 1), 1300.0, records=[]))
    argv = ["--name", tracker.name, "--root", str(store)]
    capsys.readouterr()
    assert main([*argv, "--trial", "t_2steps", "--json"]) == 0
    profile = json.loads(capsys.readouterr().out)
    # The shape from the run's result.json (its launch argv), the rates from its requests.jsonl.
    assert (profile["steps"], profile["topk"], profile["requests"]) == (2, 1, 2)
    assert profile["by_category"]["code"]["rates"] == [pytest.approx(0.9), pytest.approx(7 / 9)]
    assert profile["source"].startswith(f"{tracker.name}/t_2steps (MLflow run ")

    assert main([*argv, "--trial", "t_missing"]) == 2
    err = capsys.readouterr().err
    assert "--trial t_missing" in err and "no such trial" in err and "t_2steps (trial)" in err
    assert main([*argv, "--trial", "t_none"]) == 2
    assert "kept no requests.jsonl" in capsys.readouterr().err
    assert main(["--name", "no-such-search", "--root", str(store), "--trial", "t_2steps"]) == 2
    assert "no-such-search" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["run.json", "--name", "s", "--trial", "1"], ["--name", "s"],
                                  ["run.json", "--trial", "1"]])
def test_a_run_file_or_a_search_s_trial_not_both(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "give RUN (a file or folder), or --name SEARCH with --trial ID" in capsys.readouterr().err
