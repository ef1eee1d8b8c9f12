"""Absurd values in a space file: integers past their bound, YAML aliases that expand without end,
and values too long to print; each refused with file, line and field in a message of bounded size."""

from __future__ import annotations

import pytest

from autotune.errors import SHOWN_CHARS, ConfigError
from autotune.space.search_space import load_space
from tests.conftest import SpaceFactory


def test_a_budget_of_absurd_trials_is_refused_and_wall_time_suggested(space_factory: SpaceFactory) -> None:
    with pytest.raises(ConfigError) as err:
        space_factory(budget={"trials": 10**23})
    assert err.value.field == "budget.trials" and err.value.line is not None
    assert "<= 100,000" in str(err.value) and "wall_time_s" in str(err.value)
    assert space_factory(budget={"trials": 100_000}).budget.trials == 100_000


@pytest.mark.parametrize(("section", "values", "field"), [
    ("search", {"seed": 2**32}, "search.seed"),
    ("measure", {"repeats": 10**30}, "measure.repeats"),
    ("search", {"finalists": -(10**30)}, "search.finalists"),
])
def test_every_integer_field_has_a_bound(space_factory: SpaceFactory, section: str, values: dict,
                                         field: str) -> None:
    with pytest.raises(ConfigError) as err:
        space_factory(**{section: values})
    assert err.value.field == field and len(str(err.value)) < 2 * SHOWN_CHARS, err.value


def test_a_yaml_alias_bomb_is_refused_at_its_line_without_expanding_it(space_factory: SpaceFactory) -> None:
    path = space_factory.write()
    lines = ["a0: &a0 'xxxxxxxxxx'"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
                                        for i in range(1, 9)]
    bomb = "\n".join(lines) + "\n"
    path.write_text(bomb + path.read_text().replace("fixed_args:", "fixed_env: {X: *a8}\nfixed_args:", 1))
    with pytest.raises(ConfigError) as err:
        load_space(path)
    # a6 (line 7) is the first anchor past the limit: 9**6 copies of an 11-character scalar.
    assert err.value.file == str(path) and err.value.line == 7, err.value
    assert "aliases expand" in str(err.value) and len(str(err.value)) < SHOWN_CHARS, err.value


def test_a_merge_key_alias_still_loads(space_factory: SpaceFactory) -> None:
    path = space_factory.write()
    text = path.read_text().replace("measure:\n", "measure: &m\n", 1)
    path.write_text(text + "x-copy:\n  <<: *m\n")
    with pytest.raises(ConfigError, match="unknown key 'x-copy'"):  # the alias loads; the key is checked
        load_space(path)


def test_a_huge_wrong_value_is_shown_cut(space_factory: SpaceFactory) -> None:
    with pytest.raises(ConfigError) as err:
        space_factory(measure={"repeats": "x" * 100_000})
    assert err.value.field == "measure.repeats" and len(str(err.value)) < 2 * SHOWN_CHARS, len(str(err.value))
    assert "more characters" in str(err.value)
