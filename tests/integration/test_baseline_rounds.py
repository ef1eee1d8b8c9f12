"""A group's baseline measured ahead of its first speculative config measures in rounds, by the rule
a trial measures by, and its rounds are not the trial's: real emulator servers, the search's
incumbent file, the measuring evaluator (no Ray).

The space writes no ``repeats`` (the schema's 3 applies to fixed-count measurement), so a baseline
that still measured a fixed count would read 3 rounds where the rule, alone, stops at min_rounds.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from autotune.search.incumbent import IncumbentFile
from autotune.trial.baselines import FileBaselineStore, group_key
from autotune.trial.evaluator import MeasuringEvaluator
from autotune.trial.measure_settings import settings_for
from autotune.trial.sequential import Round
from tests.conftest import SMALL_SPACE


@pytest.mark.slow
def test_the_baseline_ahead_of_a_config_measures_in_rounds_unreported(tmp_path: Path, sim_env: Path,
                                                                      space_factory: Any) -> None:
    data = copy.deepcopy(SMALL_SPACE)
    data["measure"] = {"startup_timeout_s": 60, "sequential": {"min_rounds": 2, "max_rounds": 4}}
    space = space_factory(data)
    settings = settings_for(space)
    assert settings.sequential is not None and settings.repeats == 3
    heard: list[Round] = []
    evaluator = MeasuringEvaluator(space=space, baseline_dir=str(tmp_path / "baselines"), settings=settings,
                                   incumbent=IncumbentFile(tmp_path / "incumbent.json").read,
                                   on_round=heard.append)

    spec = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}
    evaluation = evaluator(spec, name="s")
    base = evaluation.baseline
    assert base is not None and base.ok, base
    # Alone (no incumbent yet): stop-alone at min_rounds, as the same config would be as a trial.
    assert base.sequential is not None and base.sequential["decision"] == "stop-alone"
    assert len(base.output_tok_s_repeats) == 2 == base.sequential["rounds"]
    group = group_key(space.trial_config(space.baseline_params(spec)))
    stored = FileBaselineStore(str(tmp_path / "baselines")).get(group)
    assert stored is not None and stored.output_tok_s_repeats == base.output_tok_s_repeats
    # The trial's own rounds alone reached on_round (what the trainable reports to Ray Tune).
    result = evaluation.result
    assert result.sequential is not None and result.sequential["decision"] == "stop-alone"
    assert [r.number for r in heard] == [1, 2]
    assert [r.tok_s for r in heard][-1] == result.output_tok_s_repeats
    assert result.baseline_tok_s == base.output_tok_s
    # The baseline's GPU time counts the rounds it ran.
    assert base.gpu_time is not None and base.gpu_time.measure_s is not None and base.gpu_time.measure_s > 0
