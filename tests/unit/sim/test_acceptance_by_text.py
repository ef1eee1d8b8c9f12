"""The emulator knob ``AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT``: per-position rates for prompts that
contain a marker, so a workload's categories can accept differently."""

from __future__ import annotations

import json

import pytest

from autotune.sim.config import ACCEPTANCE_BY_TEXT_ENV, ModelConfig
from autotune.sim.model import PerformanceModel
from autotune.sim.profile import load_profile

CODE, CHAT = [0.9, 0.8, 0.7], [0.5, 0.4, 0.3]


def _model(steps: int = 3, topk: int = 1, draft: int = 4, **env: str) -> PerformanceModel:
    args = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": steps,
            "speculative_eagle_topk": topk, "speculative_num_draft_tokens": draft}
    config = ModelConfig.from_server_args(args, env)
    return PerformanceModel(load_profile("llama-3.1-8b-eagle3-h100"), config)


def _env(**extra: str) -> dict[str, str]:
    return {ACCEPTANCE_BY_TEXT_ENV: json.dumps({"[code]": CODE, "[chat]": CHAT}), **extra}


def test_a_marked_prompt_accepts_each_position_with_its_rate() -> None:
    m = _model(**_env())
    for text, rates in (("[code] def f():", CODE), ("hello [chat] there", CHAT)):
        probs = m.acceptance_of(text).probs
        reach = 1.0
        for j, r in enumerate(rates):
            assert probs[j] == pytest.approx(reach * (1 - r))
            reach *= r
        assert probs[len(rates)] == pytest.approx(reach)
    # An unmarked prompt keeps the profile's own acceptance at its factor.
    assert m.acceptance_of("plain").probs == m.acceptance(m.prompt_factor("plain")).probs


def test_a_tree_widens_the_marked_rates_as_the_profile_s_recall_says() -> None:
    chain = _model(**_env()).acceptance_of("[chat] x")
    tree = _model(3, 2, 6, **_env()).acceptance_of("[chat] x")
    assert tree.mean > chain.mean and tree.max_tokens <= 4


def test_a_forced_accept_length_wins_over_the_markers() -> None:
    m = _model(**_env(SGLANG_SIMULATE_ACC_LEN="2.5"))
    assert m.acceptance_of("[code] x").mean == pytest.approx(2.5)


def test_fewer_rates_than_steps_stop_the_start_up() -> None:
    reason = _model(4, 1, 5, **_env()).check_startup(visible_gpus=1)
    assert reason is not None and ACCEPTANCE_BY_TEXT_ENV in reason and "4" in reason


@pytest.mark.parametrize("raw, needle", [
    ("{not json", "not JSON"),
    ("[]", "non-empty object"),
    ('{"": [0.5]}', "empty marker"),
    ('{"[code]": [0.5, 0]}', "probabilities in (0, 1]"),
    ('{"[code]": "0.5"}', "probabilities in (0, 1]"),
])
def test_a_bad_value_says_what_would_be_right(raw: str, needle: str) -> None:
    with pytest.raises(ValueError, match=ACCEPTANCE_BY_TEXT_ENV) as err:
        _model(**{ACCEPTANCE_BY_TEXT_ENV: raw})
    assert needle in str(err.value)
