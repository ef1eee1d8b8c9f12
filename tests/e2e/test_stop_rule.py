"""The stop rule end to end: a real local Ray, emulator servers, MLflow in sqlite under tmp_path.

The phase-model sampler on ``tests/spaces/stop-rule.yaml`` (8 chain configs and plain decoding,
budget 9): the searcher returns Ray's ``Searcher.FINISHED`` once no unmeasured config can
plausibly beat the incumbent, the search concludes (its finalist confirmed), and the reason is on
the console once, in ``summary.md``, in the JSON summary and on the MLflow search run. With
``search.stop_rule: false`` the same space runs its budget.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.errors import ConfigError
from autotune.search.folders import CONCLUDED_FILE
from autotune.search.options import SearchOptions
from autotune.search.run import run_search
from autotune.search.stopping import TAG_STOP_RULE
from autotune.tracking.tracker import Tracker

SPACE = Path(__file__).resolve().parents[1] / "spaces" / "stop-rule.yaml"
BUDGET = 9


def _search(space: Path, root: Path, *, tracking: bool) -> tuple[Any, str]:
    out = io.StringIO()
    outcome = run_search(SearchOptions(space=str(space), root=str(root), tracking=tracking), out=out)
    return outcome, out.getvalue()


@pytest.mark.slow
def test_the_rule_stops_the_search_before_its_budget_and_says_why(sim_env: Path, tmp_path: Path) -> None:
    assert yaml.safe_load(SPACE.read_text())["budget"]["trials"] == BUDGET
    outcome, console = _search(SPACE, tmp_path, tracking=True)

    summary = outcome.summary()
    rule = summary["stop_rule"]
    assert rule["setting"] == "on" and rule["stopped"] is True, rule
    assert not outcome.interrupted
    assert outcome.trials < BUDGET and rule["trials"] == outcome.trials
    reason = rule["reason"]
    assert reason.startswith(f"stopped after {outcome.trials} of {BUDGET} trials: ")
    assert rule["upper_gap"] is None or rule["upper_gap"] <= (rule["noise"] or 0.0)
    # The search's noise came from the trials' repeats (two a trial): measured, not assumed.
    assert rule["noise"] is not None and rule["noise"] > 0
    # The conclusion still ran: a finalist confirmed beside a fresh baseline, a winner named.
    assert outcome.winner is not None and outcome.finalists
    assert console.count(reason) == 1 and f"Stop rule: {reason}" in console
    assert f"Stop rule (on): {reason}." in outcome.report_files["summary.md"]

    tracker = Tracker("test-stop-rule", root=str(tmp_path)).connect(create=False)
    parents = tracker.parent_runs()
    assert len(parents) == 1
    parent = parents[0]
    assert parent.data.tags[TAG_STOP_RULE] == reason
    assert parent.data.params["stop_rule"] == "on"
    assert parent.data.metrics["stop_rule_trials"] == outcome.trials

    # A concluded search is not resumed: that would only pay for its finalists' servers again.
    resume = SearchOptions(space=str(SPACE), root=str(tmp_path), tracking=False, resume=True)
    with pytest.raises(ConfigError, match="already finished .*nothing is left to resume"):
        run_search(resume, out=io.StringIO())
    # A driver that died after the trials and before its conclusion leaves no mark. Resumed, the
    # search the rule ended is then concluded, not "interrupted" (rc 130 and a resume hint, again
    # and again): the driver reads the stop decision from the searcher Ray saved, as the live one
    # is inside the restored Tuner. No trial runs again.
    marks = list((tmp_path / "mlruns" / "ray" / "test-stop-rule").glob(f"run-*/{CONCLUDED_FILE}"))
    assert len(marks) == 1
    marks[0].unlink()
    out = io.StringIO()
    again = run_search(resume, out=out)
    assert not again.interrupted, out.getvalue()[-3000:]
    assert again.trials == outcome.trials
    assert again.summary()["stop_rule"]["reason"] == reason and f"Stop rule: {reason}" in out.getvalue()


@pytest.mark.slow
def test_a_space_with_the_rule_off_runs_its_budget(sim_env: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(SPACE.read_text())
    data["search"]["stop_rule"] = False
    space = tmp_path / "stop-rule-off.yaml"
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    outcome, console = _search(space, tmp_path, tracking=False)

    assert outcome.trials == BUDGET and not outcome.interrupted
    rule = outcome.summary()["stop_rule"]
    assert rule["setting"] == "off" and rule["stopped"] is False
    assert rule["reason"] == f"the stop rule is off (search.stop_rule: false): {BUDGET} of {BUDGET} trials run"
    assert f"Stop rule: {rule['reason']}" in console
