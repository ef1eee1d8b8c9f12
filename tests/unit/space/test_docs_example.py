"""The docs' "complete example" is the shipped demo space, and the default sampler is decided once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from autotune.space.packaged import packaged
from autotune.space.search_space import load_space

REPO = Path(__file__).resolve().parents[3]


def _complete_example() -> str:
    text = (REPO / "docs" / "search-spaces.md").read_text()
    found = re.search(r"## A complete example\n.*?```yaml\n(.*?)```", text, re.S)
    assert found, "docs/search-spaces.md has no complete example"
    return found.group(1)


def test_the_docs_complete_example_is_the_shipped_demo() -> None:
    demo = yaml.safe_load(packaged()["demo"][0].read_text())
    assert yaml.safe_load(_complete_example()) == demo


def test_the_docs_complete_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(_complete_example())
    assert load_space(str(path)).count() == load_space(str(packaged()["demo"][0])).count()


_SPACE = """
name: s
backend: sim
profile: kimi-k2.5-eagle3-tp8
model_path: sim/Kimi-K2.5
draft_model_path: sim/Kimi-K2.5-EAGLE3
fixed_args: {{speculative_algorithm: EAGLE3, tp_size: 8}}
parameters:
  speculative_num_steps: {{type: int, low: 1, high: 3}}
  speculative_eagle_topk: {{type: categorical, choices: [1]}}
{extra}
workload: {{source: builtin, num_prompts: 2, output_len: 16, concurrency: 1}}
{tail}
"""


@pytest.mark.parametrize(("extra", "tail", "sampler", "why"), [
    ("", "", "phase-model", "default: the space can be enumerated"),
    ("", "search: {seed: 3}", "phase-model", "default: the space can be enumerated"),
    ("  mem_fraction_static: {type: float, low: 0.7, high: 0.9}", "", "tpe",
     "default: mem_fraction_static is a float without a step, so the space cannot be enumerated"),
    ("  mem_fraction_static: {type: float, low: 0.7, high: 0.9, step: 0.1}", "", "phase-model",
     "default: the space can be enumerated"),
    ("", "objective: {metric: p50_ttft_ms, direction: minimize}", "tpe",
     "default: the objective p50_ttft_ms is not the phase model's output_tok_s"),
    ("", "search: {sampler: tpe}", "tpe", "search.sampler"),
])
def test_a_space_without_a_sampler_gets_phase_model_where_it_applies(
        tmp_path: Path, extra: str, tail: str, sampler: str, why: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(_SPACE.format(extra=extra, tail=tail))
    space = load_space(str(path))
    assert (space.search.sampler, space.search.sampler_why) == (sampler, why)


@pytest.mark.parametrize("name", ["kimi-k2.5-eagle3-tp8", "kimi-k2.5-eagle3-tp8-sim",
                                  "llama-3.1-8b-eagle3", "llama-3.1-8b-eagle3-sim", "demo"])
def test_the_shipped_spaces_use_the_phase_model(name: str) -> None:
    assert load_space(str(packaged()[name][0])).search.sampler == "phase-model"
