"""The phase-model sampler's designed start follows each space's own range (issue 15: no constant
tuned to a shipped space), and an explicit short_chain still wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.search.samplers import PhaseModelSampler
from autotune.space.search_space import load_space

SPACE = """\
name: design
backend: sim
profile: llama-3.1-8b-eagle3-h100
model_path: sim/target
draft_model_path: sim/draft
fixed_args: {{speculative_algorithm: EAGLE3, tp_size: 1}}
parameters:
  speculative_num_steps: {{type: int, low: {low}, high: {high}}}
  speculative_eagle_topk: {{type: categorical, choices: [1, 4]}}
  speculative_num_draft_tokens: {{type: int, low: 2, high: 14, step: 4, when: "speculative_eagle_topk > 1"}}
workload: {{source: builtin, num_prompts: 2, output_len: 16, concurrency: 1}}
"""


def _chains(tmp_path: Path, low: int, high: int, **kwargs) -> list[int]:
    path = tmp_path / f"s{low}-{high}.yaml"
    path.write_text(SPACE.format(low=low, high=high))
    sampler = PhaseModelSampler(load_space(path), seed=0, **kwargs)
    design = [sampler.table.configs[i] for i in sampler.design()]
    return [c["speculative_num_steps"] for c in design if c["speculative_eagle_topk"] == 1]


@pytest.mark.parametrize(("low", "high", "short"), [(1, 5, 2), (1, 9, 3), (2, 10, 4), (1, 2, 1)])
def test_the_short_chain_is_a_quarter_up_the_space_s_range(tmp_path: Path, low: int, high: int, short: int) -> None:
    chains = _chains(tmp_path, low, high)
    assert chains[0] == short and chains[-1] == high


def test_an_explicit_short_chain_is_kept(tmp_path: Path) -> None:
    assert _chains(tmp_path, 1, 9, short_chain=6)[0] == 6
