"""Load levels: a list of request rates as the level axis, and the one definition of a level."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.space.load_levels import primary_level
from autotune.space.search_space import load_space
from autotune.space.workload import Workload, primary_concurrency
from autotune.trial.level_results import LoadLevel, as_level, metric_suffix

SPACES = Path(__file__).resolve().parents[2] / "spaces"


def test_a_level_has_one_label_key_and_record_field():
    c8, r = LoadLevel.of("concurrency", 8), LoadLevel.of("request_rate", 2.5)
    assert (c8.label, c8.key, c8.describe(), c8.field()) == ("c8", "8", "concurrency 8", {"concurrency": 8})
    assert (r.label, r.key, r.describe(), r.field()) == ("r2.5", "r2.5", "request rate 2.5/s",
                                                         {"request_rate": 2.5})
    assert metric_suffix(r) == "_r2.5" and metric_suffix(8) == metric_suffix(c8) == "_c8"
    for level in (c8, r, LoadLevel.of("request_rate", 4)):
        assert LoadLevel.from_key(level.key) == level == LoadLevel.of_record(level.field())
    assert as_level(8) == c8 and LoadLevel.of("request_rate", 4) == LoadLevel.of("request_rate", 4.0)


def test_rate_levels_keep_order_prompts_the_cap_and_a_primary():
    wl = Workload.from_spec({"request_rate": [8, 2], "concurrency": 16, "num_prompts": 4,
                             "warmup_prompts": 1})
    assert wl.request_rate == 8.0 and wl.concurrency == 16 and wl.concurrency_levels is None
    assert wl.primary_level() == LoadLevel.of("request_rate", 8)
    levels = wl.levels()
    assert [w.request_rate for w in levels] == [8.0, 2.0]
    assert all(w.concurrency == 16 and w.load_levels is None and w.measured() == wl.measured()
               for w in levels)
    assert [wl.level_of(w).label for w in levels] == ["r8", "r2"]
    assert [w.bench_kwargs()["request_rate"] for w in levels] == [8.0, 2.0]
    assert wl.to_dict()["request_rate"] == [8.0, 2.0] and wl.to_dict()["primary_request_rate"] == 8.0
    chosen = Workload.from_spec({"request_rate": [0.5, 2], "primary_request_rate": 2,
                                 "num_prompts": 2, "warmup_prompts": 0})
    assert chosen.request_rate == 2.0 and chosen.primary_level().label == "r2"
    # Code that models a workload: the rate list's primary, and the concurrency that caps it.
    spec = {"request_rate": [1, 4], "concurrency": 8}
    assert primary_level(spec) == LoadLevel.of("request_rate", 1) and primary_concurrency(spec) == 8
    assert primary_level({"concurrency": [1, 8]}) == LoadLevel.of("concurrency", 1)
    assert primary_level({}) is None


@pytest.mark.parametrize("rate", [50, [2, 50]])
def test_a_request_rate_leaves_in_flight_requests_uncapped_unless_concurrency_is_written(rate):
    """As ``bench_serving --request-rate`` (``--max-concurrency`` unset): a cap of 1 would make
    the open-loop rate closed-loop concurrency 1."""
    spec = {"request_rate": rate, "num_prompts": 8, "warmup_prompts": 0}
    wl = Workload.from_spec(spec)
    fast = wl.levels()[-1]
    assert (fast.request_rate, fast.concurrency) == (50.0, None)
    assert fast.bench_kwargs()["concurrency"] is None and wl.to_dict()["concurrency"] is None
    assert primary_concurrency(spec) is None
    # A written cap holds, 1 included; no rate (or a null one) keeps the default of 1.
    for cap in (1, 4):
        capped = Workload.from_spec({**spec, "concurrency": cap}).levels()[-1]
        assert capped.bench_kwargs()["concurrency"] == cap
    assert Workload.from_spec({**spec, "request_rate": None}).concurrency == 1
    assert primary_concurrency({}) == 1 and primary_concurrency({"request_rate": None}) == 1


@pytest.mark.parametrize("spec, field, needle", [
    ({"concurrency": [1, 8], "request_rate": [2, 4]}, "request_rate", "both lists"),
    ({"request_rate": []}, "request_rate", "empty list"),
    ({"request_rate": [2, 0]}, "request_rate[1]", "finite number"),
    ({"request_rate": [2, -1]}, "request_rate[1]", "finite number"),
    ({"request_rate": [2, math.inf]}, "request_rate[1]", "finite number"),
    ({"request_rate": [2, math.nan]}, "request_rate[1]", "finite number"),
    ({"request_rate": [True, 2]}, "request_rate[0]", "finite number"),
    ({"request_rate": ["fast"]}, "request_rate[0]", "finite number"),
    ({"request_rate": [2, 2.0]}, "request_rate[1]", "listed twice"),
    ({"request_rate": list(range(1, 10))}, "request_rate", "at most 8"),
    ({"request_rate": [2, 4], "primary_request_rate": 3}, "primary_request_rate", "[2.0, 4.0]"),
    ({"request_rate": 2, "primary_request_rate": 2}, "primary_request_rate", "list"),
    ({"request_rate": [2, 4], "primary_concurrency": 1}, "primary_concurrency", "list"),
    ({"concurrency": [1, 8], "primary_request_rate": 1}, "primary_request_rate", "list"),
    ({"concurrency": [1, 8], "primary_concurrency": 4.5}, "primary_concurrency", "[1, 8]"),
])
def test_rate_level_errors_name_the_item(spec, field, needle):
    lines = {"request_rate": 3, "request_rate[1]": 5}
    with pytest.raises(ConfigError) as err:
        Workload.from_spec(spec, file="s.yaml", lines=lines)
    assert err.value.field == f"workload.{field}" and needle in str(err.value), str(err.value)
    assert err.value.line == lines.get(field)


def test_a_bad_rate_in_a_space_file_points_at_its_line(tmp_path):
    # The profile path is relative to the space file: name it absolutely for the copy.
    text = (SPACES / "rate-levels.yaml").read_text().replace(
        "profile: profile-slow-dense.yaml", f"profile: {SPACES / 'profile-slow-dense.yaml'}")
    space = tmp_path / "s.yaml"
    space.write_text(text.replace("request_rate: [2, 50]", "request_rate:\n    - 2\n    - .inf"))
    line = space.read_text().splitlines().index("    - .inf") + 1
    with pytest.raises(ConfigError) as err:
        load_space(space)
    assert err.value.file == str(space) and err.value.line == line
    assert err.value.field == "workload.request_rate[1]" and "inf" in str(err.value)
    space.write_text(text.replace("  request_rate: [2, 50]",
                                  "  concurrency: [1, 4]\n  request_rate: [2, 50]"))
    with pytest.raises(ConfigError, match="both lists") as err:
        load_space(space)
    assert err.value.line == space.read_text().splitlines().index("  request_rate: [2, 50]") + 1
    # A cap beside a rate that is no cap: the message says what a cap is and how to have none.
    space.write_text(text.replace("  request_rate: [2, 50]", "  concurrency: 0\n  request_rate: [2, 50]"))
    with pytest.raises(ConfigError) as err:
        load_space(space)
    assert err.value.file == str(space) and err.value.field == "workload.concurrency"
    assert err.value.line == space.read_text().splitlines().index("  concurrency: 0") + 1
    assert "got 0" in str(err.value) and "leave it out" in str(err.value), str(err.value)
