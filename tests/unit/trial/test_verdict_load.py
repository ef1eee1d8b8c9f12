"""The verdict says at what load it compared a config and its baseline (trial.verdict.load_comparison)."""

from __future__ import annotations

from typing import Any

from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.verdict import judge

SPEC = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}


def measured(params: dict[str, Any], tok_s: float, **load: Any) -> TrialResult:
    return TrialResult(status=Status.OK, reason=None, params=params,
                       is_baseline=not params.get("speculative_algorithm"), output_tok_s=tok_s, **load)


def test_a_capped_config_is_judged_at_the_load_it_sustained_and_the_verdict_says_so() -> None:
    base = judge(measured({}, 3000.0, load_asked=64, load_ran=64, load_capped=False), None)
    config = measured(SPEC, 3300.0, load_asked=64, load_ran=48, load_capped=True)
    judged = judge(config, base, min_speedup=1.0)
    # The speedup is of the figures as measured: tok/s at 48 running against tok/s at 64.
    assert judged.speedup == 1.1 and judged.status == Status.FEASIBLE
    assert judged.load_comparison == ("compared at the load each sustained: this config ran 48 of 64 "
                                      "(capped), its baseline 64 of 64")


def test_no_note_when_neither_was_capped_and_none_left_from_an_earlier_judgement() -> None:
    base = judge(measured({}, 3000.0, load_asked=16, load_ran=16, load_capped=False), None)
    config = measured(SPEC, 3300.0, load_asked=16, load_ran=16, load_capped=False,
                      load_comparison="stale note from another baseline")
    assert judge(config, base).load_comparison is None
    # A capped baseline alone is said too: the config ran more than its baseline did.
    capped_base = judge(measured({}, 3000.0, load_asked=64, load_ran=48, load_capped=True), None)
    uncapped = measured(SPEC, 3300.0, load_asked=64, load_ran=64, load_capped=False)
    assert judge(uncapped, capped_base).load_comparison.endswith("its baseline 48 of 64 (capped)")


def test_a_steady_config_against_a_whole_window_baseline_is_compared_whole_to_whole() -> None:
    base = judge(measured({}, 3000.0, window="whole", output_tok_s_whole=3000.0,
                          window_reason="repeat 1: the steady interval spans 0.80 waves, under 1"), None)
    config = measured(SPEC, 3600.0, window="steady", output_tok_s_whole=3150.0, output_tok_s_steady=3600.0)
    judged = judge(config, base, min_speedup=1.0)
    # Not 3600 / 3000 = 1.2: the steady figure leaves out a ramp and tail the baseline's keeps.
    assert judged.speedup == 1.05 and judged.baseline_tok_s == 3000.0
    assert judged.load_comparison == (
        "compared over whole windows: this config's tok/s is over its steady window, its baseline's over "
        "its whole (repeat 1: the steady interval spans 0.80 waves, under 1)")
    # The same window on both sides: the objectives themselves, and no note.
    both = judge(measured(SPEC, 3600.0, window="steady", output_tok_s_whole=3150.0),
                 judge(measured({}, 3200.0, window="steady", output_tok_s_whole=2900.0), None))
    assert both.speedup == 3600.0 / 3200.0 and both.load_comparison is None
