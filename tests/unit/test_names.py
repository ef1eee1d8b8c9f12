"""autotune.names: the one rule for names that become folders."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.names import check_path_name, safe_path_name


@pytest.mark.parametrize("name", ["demo", "llama-3.1-8b_eagle3", "A" * 100, "_x"])
def test_plain_folder_names_pass(name: str) -> None:
    assert check_path_name(name, field="--name") == name


@pytest.mark.parametrize(("name", "safe"), [
    ("../../escaped-by-name", "escaped-by-name"), ("a/b", "a_b"), ("..", "search"), (".hidden", "hidden"),
    ("-rf", "rf"), ("with space", "with_space"), ("", "search"), ("x" * 101, "x" * 100), ("a..b", "a..b"),
])
def test_other_names_are_refused_with_a_safe_one_suggested(name: str, safe: str) -> None:
    assert safe_path_name(name) == safe
    with pytest.raises(ConfigError, match="not a plain folder name") as err:
        check_path_name(name, field="--name")
    assert err.value.field == "--name" and (safe == "a..b" or repr(safe) in str(err.value))
