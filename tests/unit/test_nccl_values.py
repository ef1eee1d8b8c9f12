"""NCCL variables a space or a candidates file sets are checked against NCCL's documented values
when they load (issue 35: ``NCCL_ALGO: Rnig`` loaded without complaint and would have run every
trial with NCCL's own choice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.nccl.candidates import load_candidates
from autotune.nccl_values import ALGORITHMS, value_problem
from tests.conftest import SpaceFactory


@pytest.mark.parametrize("name, value", [
    ("NCCL_ALGO", "Ring"), ("NCCL_ALGO", "ring,tree"), ("NCCL_ALGO", "^NVLS"), ("NCCL_ALGO", "NVLSTree"),
    ("NCCL_ALGO", "allreduce:tree,ring;broadcast:ring"), ("NCCL_PROTO", "LL128"), ("NCCL_PROTO", "^LL"),
    ("NCCL_P2P_LEVEL", "nvl"), ("NCCL_P2P_LEVEL", "3"), ("NCCL_NVLS_ENABLE", 0), ("NCCL_MIN_NCHANNELS", 16),
    ("NCCL_NTHREADS", 256), ("NCCL_DEBUG", "info"), ("NCCL_SOME_FUTURE_VAR", "anything"), ("NCCL_ALGO", None),
])
def test_documented_values_pass(name: str, value: object) -> None:
    assert value_problem(name, value) is None


@pytest.mark.parametrize("name, value, expected", [
    ("NCCL_ALGO", "Rnig", "'Rnig' is not a value NCCL_ALGO takes (did you mean 'Ring'?)"),
    ("NCCL_ALGO", "Ring,Trea", "'Trea' is not a value NCCL_ALGO takes (did you mean 'Tree'?)"),
    ("NCCL_ALGO", "Ring,", "'(empty)' is not a value NCCL_ALGO takes"),
    ("NCCL_PROTO", "LL256", "is not a value NCCL_PROTO takes"),
    ("NCCL_P2P_LEVEL", "NVLINK", "allowed: LOC, NVL, PIX, PXB, PHB, SYS"),
    ("NCCL_NVLS_ENABLE", "yes", "NCCL_NVLS_ENABLE takes 0 or 1"),
    ("NCCL_MAX_NCHANNELS", "0", "takes a positive integer"),
    ("NCCL_NTHREADS", "100", "allowed: 64, 128, 256, 512"),
])
def test_undocumented_values_are_named_with_what_is_allowed(name: str, value: object, expected: str) -> None:
    problem = value_problem(name, value)
    assert problem is not None and expected in problem, problem


def test_the_message_lists_every_algorithm() -> None:
    problem = value_problem("NCCL_ALGO", "Rnig")
    assert problem is not None and all(a in problem for a in ALGORITHMS), problem


def test_a_space_with_a_misspelt_nccl_choice_fails_at_load_with_file_line_and_field(
        space_factory: SpaceFactory) -> None:
    params = {"speculative_algorithm": {"type": "categorical", "choices": [None, "EAGLE3"]},
              "speculative_num_steps": {"type": "categorical", "choices": [3]},
              "NCCL_ALGO": {"type": "categorical", "choices": [None, "Ring", "Rnig"]}}
    with pytest.raises(ConfigError) as info:
        space_factory(parameters=params)
    text = str(info.value)
    assert "did you mean 'Ring'" in text and "parameters.NCCL_ALGO.choices[2]" in text, text
    assert "space.yaml" in text and info.value.line is not None, text


def test_a_misspelt_fixed_env_value_fails_at_load(space_factory: SpaceFactory) -> None:
    with pytest.raises(ConfigError, match=r"'Simpel' is not a value NCCL_PROTO takes \(did you mean 'Simple'\?\)"):
        space_factory(fixed_env={"NCCL_PROTO": "Simpel"})
    assert space_factory(fixed_env={"NCCL_PROTO": "Simple"}).fixed_env["NCCL_PROTO"] == "Simple"


def test_a_candidates_file_with_a_misspelt_value_fails_at_load(tmp_path: Path) -> None:
    path = tmp_path / "candidates.yaml"
    path.write_text("candidates:\n  - NCCL_ALGO=Ring\n  - NCCL_ALGO=Rnig\n")
    with pytest.raises(ConfigError, match="did you mean 'Ring'"):
        load_candidates(path)
    path.write_text("candidates:\n  - env: {NCCL_PROTO: LL12}\n")
    with pytest.raises(ConfigError, match="NCCL_PROTO"):
        load_candidates(path)
