"""Fuzzing the space loader: whatever goes in, only ConfigError comes out.

Random dicts, random mutations of a valid space (as data and as YAML text), and random YAML-ish
text. When a space does load, the configs it proposes must pass its own validation.
"""

from __future__ import annotations

import copy
import os
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from autotune._yaml_lines import load_yaml_text
from autotune.errors import ConfigError
from autotune.space._cross_checks import _RandomTrial
from autotune.space.search_space import SearchSpace

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"
DEMO_TEXT = (SPACES / "demo.yaml").read_text()
DEMO = yaml.safe_load(DEMO_TEXT)
# Bases for mutation: the shipped spaces plus one that uses every feature of the format.
RICH_TEXT = DEMO_TEXT.replace("fixed_args:\n  speculative_algorithm: EAGLE3\n", "fixed_args:\n") \
    .replace("parameters:\n", """parameters:
  speculative_algorithm: {type: categorical, choices: [null, EAGLE3]}
  attention_backend: {type: categorical, choices: [fa3, trtllm_mha]}
  page_size: {type: categorical, choices: [1, 16]}
  chunked_prefill_size: {type: categorical, choices: [null, 4096], when: "page_size == 16"}
  schedule_conservativeness: {type: float, low: 0.5, high: 1.5, when: "page_size > 1"}
  NCCL_MAX_NCHANNELS: {type: int, low: 2, high: 32, log: true, when: "NCCL_ALGO != null"}
""").replace("constraints: {min_speedup: 1.0}", """constraints:
  min_speedup: 1.02
  slos: ["p99_ttft_ms <= 500", "output_tok_s > 10"]
rules: {draft_tokens_min: true, paged_tree_backends: true}""")
TEXTS = [DEMO_TEXT, RICH_TEXT, *(p.read_text() for p in sorted(SPACES.glob("*.yaml"))
                                 if p.name != "demo.yaml")]
BASES = [yaml.safe_load(text) for text in TEXTS]

# About 200 examples in all by default; AUTOTUNE_FUZZ_EXAMPLES=2000 for a longer hunt.
FUZZ = settings(max_examples=int(os.environ.get("AUTOTUNE_FUZZ_EXAMPLES", "50")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Names the loader knows, so random data reaches deep checks instead of failing at the top.
KEYS = sorted({*DEMO, "rules", "speculative", "low", "high", "step", "log", "choices", "when",
               "type", "args", "env", "slos", "min_speedup", "break_even", "metric",
               "direction", "trials", "source", "path", "sampler", "tp_size",
               "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
               "speculative_num_draft_tokens", "attention_backend", "page_size", "NCCL_ALGO",
               "enable_symm_mem", "NCCL_NVLS_ENABLE", "draft_tokens_max", "int", "float",
               "categorical"})
scalars = (st.none() | st.booleans() | st.integers(-5, 40) | st.integers()
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from(["EAGLE3", "Ring", "int", "categorical", "sim", "sglang",
                              "speculative_eagle_topk > 1", "p99_ttft_ms <= 5", "builtin",
                              "kimi-k2.5-eagle3-tp8", "1", "", "null"])
           | st.text(max_size=12))
keys = st.sampled_from(KEYS) | st.text(max_size=8) | st.integers(-2, 2)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=16)


def check_loaded(space: SearchSpace) -> None:
    """A space that loads only proposes configs it accepts."""
    event("loaded")
    rng = random.Random(0)
    for _ in range(5):
        config = space.suggest(_RandomTrial(rng))
        assert space.validate_config(config) is None, config
        space.trial_config(config)


def load_data(data: Any) -> None:
    try:
        space = SearchSpace.from_dict(data, file="fuzz.yaml")
    except ConfigError as exc:
        assert exc.message
        event(f"ConfigError at {(exc.field or '-').split('.')[0]}")
        return
    check_loaded(space)


def load_text(text: str) -> None:
    try:
        data = load_yaml_text(text, file="fuzz.yaml")
        space = SearchSpace.from_dict(data, file="fuzz.yaml")
    except ConfigError as exc:
        assert exc.message and exc.file == "fuzz.yaml"
        event(f"ConfigError at {(exc.field or '-').split('.')[0]}")
        return
    check_loaded(space)


HEADER = {key: DEMO[key] for key in ("backend", "profile", "model_path", "draft_model_path")}


@FUZZ
@given(st.dictionaries(keys, values, max_size=8),
       st.dictionaries(st.sampled_from(KEYS), values, max_size=6))
@pytest.mark.slow  # 6 s at load ~8 (make test-fast leaves it out)
def test_random_dicts_only_raise_config_error(anything: dict[Any, Any],
                                              sections: dict[str, Any]) -> None:
    load_data(anything)
    # With a valid header, random sections reach the checks behind it.
    load_data({**HEADER, **sections})


@FUZZ
@given(st.data())
def test_mutated_valid_space_only_raises_config_error(data: st.DataObject) -> None:
    space = copy.deepcopy(data.draw(st.sampled_from(BASES)))
    for _ in range(data.draw(st.integers(1, 3))):
        node: Any = space
        # Walk down a random path, then replace, delete or add at the end of it.
        while isinstance(node, (dict, list)) and node and data.draw(st.booleans()):
            key = data.draw(st.sampled_from(list(node) if isinstance(node, dict)
                                            else list(range(len(node)))))
            if not isinstance(node[key], (dict, list)):
                break
            node = node[key]
        if isinstance(node, dict) and node:
            key = data.draw(st.sampled_from(list(node)))
            action = data.draw(st.sampled_from(["replace", "delete", "add"]))
            if action == "replace":
                node[key] = data.draw(values)
            elif action == "delete":
                del node[key]
            else:
                node[data.draw(keys)] = data.draw(values)
        elif isinstance(node, list) and node:
            node[data.draw(st.integers(0, len(node) - 1))] = data.draw(values)
    load_data(space)


@FUZZ
@given(st.data())
def test_mutated_yaml_text_only_raises_config_error(data: st.DataObject) -> None:
    lines = data.draw(st.sampled_from(TEXTS)).splitlines(keepends=True)
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["drop", "dup", "insert", "edit"]))
        if action == "drop":
            del lines[index]
        elif action == "dup":
            lines.insert(index, lines[index])
        elif action == "insert":
            lines.insert(index, data.draw(st.text(alphabet=" :-[]{},#&*!|>'\"\nabcAB019.",
                                                  max_size=30)))
        else:
            line = lines[index]
            cut = data.draw(st.integers(0, len(line)))
            lines[index] = line[:cut] + data.draw(st.text(max_size=4)) + line[cut + 1:]
        if not lines:
            break
    load_text("".join(lines))


@FUZZ
@given(st.text(alphabet=st.sampled_from(list(" :-[]{},#&*!|>?%@`'\"\n\tabcxyzXYZ0129._/~")),
               max_size=120) | st.text(max_size=80))
def test_random_text_only_raises_config_error(text: str) -> None:
    load_text(text)
