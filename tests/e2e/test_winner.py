"""The one winner policy (autotune.trial.winner) and the objective it ranks by, end to end.

The unit tests pin the rules. The search test runs a real search on the emulator with an objective
other than tok/s, minimised, where half the configs crash, and checks that Ray's result, Optuna,
the printed winner, MLflow's winner tags and the export all rank by that objective and name the same
config.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from autotune.export.launch_command import choose
from autotune.figures import shown
from autotune.search.console import print_summary
from autotune.search.options import SearchOptions
from autotune.search.run import run_search
from autotune.tracking.search_reader import open_reader
from autotune.tracking.tracker import Tracker
from autotune.trial.winner import FINALIST, metric_field, pick_winner, unmeasured_value
from autotune.trial.winner import Contender as Candidate
from tests.e2e.test_search import _study

SPACES = Path(__file__).resolve().parents[1] / "spaces"


def spec(ref: str, value: float | None, *, feasible: bool = True, stage: str = "trial") -> Candidate:
    return Candidate(ref=ref, value=value, is_baseline=False, feasible=feasible, stage=stage)


def base(ref: str, value: float | None, *, feasible: bool = True) -> Candidate:
    return Candidate(ref=ref, value=value, is_baseline=True, feasible=feasible)


# ---- the rules ------------------------------------------------------------------------------------

@pytest.mark.parametrize("maximize,expected", [(True, "fast"), (False, "slow")])
def test_the_direction_decides_and_unknown_never_competes(maximize: bool, expected: str) -> None:
    cands = [spec("fast", 300.0), spec("slow", 200.0), spec("unmeasured", None),
             base("b", 100.0 if maximize else 900.0)]
    pick = pick_winner(cands, maximize=maximize)
    assert pick is not None and pick.ref == expected and not pick.is_baseline


def test_only_confirmed_finalists_compete_once_finalists_ran() -> None:
    trials = [spec("t1", 500.0), spec("t2", 400.0)]
    # t1 did not hold up when re-measured, t2 was not a finalist: t2's unconfirmed figure does not
    # make it the recommendation; the baseline is.
    pick = pick_winner(trials + [spec("f1", 90.0, feasible=False, stage=FINALIST), base("b", 100.0)],
                       maximize=True)
    assert pick is not None and pick.ref == "b" and pick.is_baseline
    assert "no finalist held up" in pick.note
    confirmed = pick_winner(trials + [spec("f1", 480.0, stage=FINALIST), base("b", 100.0)], maximize=True)
    assert confirmed is not None and confirmed.ref == "f1" and "confirmed" in confirmed.note


def test_a_better_baseline_of_another_group_wins_and_a_broken_one_never() -> None:
    cands = [spec("t", 300.0), base("own", 200.0), base("other-group", 350.0)]
    pick = pick_winner(cands, maximize=True)
    assert pick is not None and pick.ref == "other-group" and pick.is_baseline
    assert "better than every feasible speculative config" in pick.note
    # A baseline that broke an SLO is not feasible: it never wins, however fast.
    slo = pick_winner([spec("t", 300.0), base("broke-slo", 999.0, feasible=False)], maximize=True)
    assert slo is not None and slo.ref == "t"
    assert pick_winner([spec("t", 300.0, feasible=False), base("broke-slo", 999.0, feasible=False)],
                       maximize=True) is None


def test_unmeasured_value_is_worse_than_any_measurement() -> None:
    assert unmeasured_value(maximize=True) < -1e300 and unmeasured_value(maximize=False) > 1e300
    assert metric_field("p99_ttft_ms") == "ttft_ms_p99" and metric_field("output_tok_s") == "output_tok_s"
    with pytest.raises(ValueError, match="stage"):
        Candidate(ref=None, value=1.0, is_baseline=False, feasible=True, stage="final")


# ---- end to end -----------------------------------------------------------------------------------

@pytest.mark.slow  # a search on Ray
def test_a_minimised_objective_is_honoured_everywhere(tmp_path: Path, sim_env: Path) -> None:
    out = io.StringIO()
    outcome = run_search(SearchOptions(space=str(SPACES / "objective-min.yaml"), root=str(tmp_path)),
                         out=out)
    print_summary(outcome, out=out)
    tracker = Tracker("test-objective-min", root=str(tmp_path)).connect(create=False)
    parent = tracker.parent_runs()[0]
    runs = tracker.trial_runs(parent.info.run_id)
    trials = [r for r in runs if r.kind == "trial"]
    assert len(trials) == 4
    crashed = [r for r in trials if r.params.get("AUTOTUNE_SIM_FAULT") == "crash_at_start"]
    measured = [r for r in trials if r not in crashed]
    assert len(crashed) == 2 and all(r.status == "failed" for r in crashed)
    assert all(r.metric("ttft_ms_p99") is not None for r in measured)

    # Optuna was told each trial's p99 TTFT (not its tok/s), and worse-than-anything for a crash.
    study = _study(outcome.experiment_path)
    by_steps = {r.params.get("speculative_num_steps"): r.metric("ttft_ms_p99") for r in measured}
    for t in study.trials:
        if t.params.get("AUTOTUNE_SIM_FAULT") == "crash_at_start":
            assert t.value == math.inf and t.user_attrs.get("objective_unmeasured") is True
        else:
            assert shown(t.value) == pytest.approx(by_steps[str(t.params["speculative_num_steps"])])
    assert study.direction.name == "MINIMIZE"
    assert study.best_trial.params.get("AUTOTUNE_SIM_FAULT") is None

    # One winner everywhere: the search's summary, MLflow's tag, and the export.
    assert outcome.winner is not None
    tags = parent.data.tags
    assert tags.get("autotune.objective") == "p99_ttft_ms:minimize"
    tagged = next(r for r in runs if r.run_id == tags["autotune.winner_run_id"])
    exported = choose(open_reader("test-objective-min", root=str(tmp_path)))  # as `autotune export` reads
    assert exported.run.run_id == tagged.run_id
    w = outcome.winner
    assert str(w["params"].get("speculative_num_steps")) == str(tagged.params.get("speculative_num_steps"))
    assert bool(w.get("is_baseline")) == (tags.get("autotune.winner_is_baseline") == "true")
    assert shown(w["ttft_ms_p99"]) == pytest.approx(tagged.metric("ttft_ms_p99"))
    # And it is the lowest p99 TTFT of what could win: the confirmed finalists and the baselines.
    pool = [r for r in runs if r.status == "feasible" and (r.kind == "finalist" or r.is_baseline)]
    assert tagged.metric("ttft_ms_p99") == min(r.metric("ttft_ms_p99") for r in pool)
    assert "Winner" in out.getvalue() or "BASELINE" in out.getvalue()
    # The live table's "best so far" column holds the objective's values and says so.
    assert "best p99_ttft_ms" in out.getvalue() and "best tok/s" not in out.getvalue()
    summary = json.loads(json.dumps(outcome.summary(), default=str))
    assert summary["winner_params"] == w["params"]
