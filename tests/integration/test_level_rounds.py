"""Every load level measures in rounds, each against its own incumbent: real emulator servers, the
search's incumbent file, the measuring evaluator (no Ray).

With ``workload.concurrency: [1, 4]`` a trial measures both levels on one server. The primary level
consults the search's incumbent after each round (and reports its rounds, which a Ray scheduler
reads); the other level consults the incumbent at that level (the best config there so far, as the
per-level answers pick it), so its answer gets the same sequential evidence instead of a fixed
``repeats``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from autotune.search.incumbent import IncumbentFile
from autotune.search.trial_report import TrialEntry, TrialReport
from autotune.trial.evaluator import MeasuringEvaluator
from autotune.trial.level_results import LoadLevel, level_result
from autotune.trial.measure_settings import settings_for
from autotune.trial.sequential import Round
from tests.conftest import SMALL_SPACE

C1, C4 = LoadLevel.of("concurrency", 1), LoadLevel.of("concurrency", 4)


def _levels_space(space_factory: Any) -> Any:
    data = copy.deepcopy(SMALL_SPACE)
    data["measure"] = {"startup_timeout_s": 60, "sequential": {"min_rounds": 2, "max_rounds": 4}}
    data["workload"] = {**data["workload"], "num_prompts": 4, "concurrency": [1, 4]}
    return space_factory(data)


@pytest.mark.slow
def test_each_level_measures_in_rounds_against_its_own_incumbent(tmp_path: Path, sim_env: Path,
                                                                  space_factory: Any) -> None:
    space = _levels_space(space_factory)
    store = IncumbentFile(tmp_path / "incumbent.json")
    heard: list[Round] = []
    evaluator = MeasuringEvaluator(space=space, baseline_dir=str(tmp_path / "baselines"),
                                   settings=settings_for(space), incumbent=store.read,
                                   on_round=heard.append, level_incumbent=store.read_level)

    # The first config is alone at every level: min_rounds there, then it is the incumbent of both.
    base_params: dict[str, Any] = {"speculative_algorithm": None}
    base = evaluator(base_params, name="b").result
    assert base.sequential is not None and base.sequential["decision"] == "stop-alone"
    c4 = level_result(base, C4)
    assert c4 is not None and len(c4.output_tok_s_repeats) == 2
    by_level = {LoadLevel.of_record(r): r for r in base.levels or []}
    assert by_level[C4]["sequential"]["decision"] == "stop-alone"
    assert [r.number for r in heard] == [1, 2]  # only the primary level's rounds are reported
    entries = [TrialEntry("b", base_params, TrialReport(objective=base.output_tok_s, constraints={"failed": 0.0},
                                                        result=base))]
    assert store.update(space, entries) is not None
    at_c4 = store.read_level(C4)
    assert at_c4 is not None and at_c4.label == "b" and at_c4.readings == tuple(c4.output_tok_s_repeats)

    # The next config is compared at c4 with the incumbent at c4 and ends by that decision.
    heard.clear()
    spec = evaluator({"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}, name="s").result
    record = {LoadLevel.of_record(r): r for r in spec.levels or []}[C4]
    seq = record["sequential"]
    assert seq["incumbent"] == "b" and seq["decision"] in ("stop-better", "stop-worse", "stop-cap")
    assert seq["rounds"] == len(record["output_tok_s_repeats"]) and 2 <= seq["rounds"] <= 4
    assert seq["max_rounds"] == 4
    # The primary level's rounds went to on_round, numbered as measured; c4's did not.
    assert spec.sequential is not None and [r.number for r in heard] == list(range(1, spec.sequential["rounds"] + 1))
