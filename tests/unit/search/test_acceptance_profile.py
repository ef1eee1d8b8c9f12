"""The measured acceptance profile (:mod:`autotune.search.acceptance_profile`): per-position rates
from ``spec_correct_drafts_histogram``, their spreads, censoring, and what stays unknown."""

from __future__ import annotations

import math
import random

import pytest

from autotune.search.acceptance_profile import (
    TOP1,
    TREE_PATH,
    UNKNOWN_SHAPE,
    known_rates,
    position_rates,
    profile_of,
)


def _record(hist: list[int] | None, kind: str | None = None, *, ok: bool = True) -> dict:
    return {"prompt_id": "p", "kind": kind, "ok": ok, "error": None if ok else "boom",
            "spec": {} if hist is None else {"spec_correct_drafts_histogram": hist}}


def test_rates_are_the_histogram_s_conditional_tail_with_a_binomial_spread() -> None:
    # 100 cycles: 10 accepted nothing, 20 one draft, 70 two.
    first, second = position_rates([[10, 20, 70]], 2)
    assert (first.reached, first.accepted, first.rate) == (100, 90, pytest.approx(0.9))
    smooth = 90.5 / 101
    assert first.sd == pytest.approx(math.sqrt(smooth * (1 - smooth) / 100))
    assert (second.reached, second.accepted, second.rate) == (90, 70, pytest.approx(70 / 90))
    # One request: no spread between requests can be told.
    assert first.sd_requests is None


def test_a_simulated_chain_s_rates_are_recovered_within_their_spread() -> None:
    rates = [0.85, 0.7, 0.6]
    rng = random.Random(7)
    hists = []
    for _ in range(60):
        h = [0] * (len(rates) + 1)
        for _ in range(40):
            j = 0
            while j < len(rates) and rng.random() < rates[j]:
                j += 1
            h[j] += 1
        hists.append(h)
    got = position_rates(hists, len(rates))
    for pos, given in zip(got, rates, strict=True):
        assert pos.sd is not None and pos.sd_requests is not None and pos.rate is not None
        assert 0 < pos.sd < 0.03
        assert abs(pos.rate - given) <= 4 * max(pos.sd, pos.sd_requests)


def test_a_shorter_histogram_is_censored_not_counted_as_rejections() -> None:
    # The second request could not draft position 2: it counts for position 1 only.
    first, second = position_rates([[0, 0, 10], [5, 5]], 2)
    assert (first.reached, first.accepted) == (20, 15)
    assert (second.reached, second.accepted, second.rate) == (10, 10, 1.0)
    # Every cycle accepted it, over ten cycles: a rate of 1, but not a certain one.
    assert second.sd is not None and second.sd > 0.02


def test_positions_past_the_run_s_steps_are_unknown_never_zero() -> None:
    positions = position_rates([[2, 3, 5]], 3)
    assert positions[2].rate is None and positions[2].sd is None and positions[2].reached == 0
    assert known_rates(positions) == [pytest.approx(0.8), pytest.approx(5 / 8)]


def test_a_histogram_past_the_steps_is_refused() -> None:
    with pytest.raises(ValueError, match="more than 2 drafts"):
        position_rates([[1, 1, 1, 1]], 2)


def test_the_profile_groups_by_category_and_says_what_its_rates_are() -> None:
    records = [_record([1, 1, 8], "code"), _record([6, 3, 1], "chat"), _record([2, 2, 6]),
               _record([9, 9, 9], "code", ok=False), _record(None, "chat")]
    profile = profile_of(records, steps=2, topk=1, source="run.json")
    assert profile["rates_are"] == TOP1 and profile["label"] == "measured"
    assert profile["requests"] == 3 and profile["uncategorized_requests"] == 1
    assert set(profile["by_category"]) == {"code", "chat"}
    assert profile["by_category"]["code"]["rates"] == [pytest.approx(0.9), pytest.approx(8 / 9)]
    assert profile["by_category"]["chat"]["requests"] == 1
    # The failed request and the one without a histogram count nowhere.
    assert profile["cycles"] == 30
    tree = profile_of(records, steps=2, topk=3, source="run.json")
    assert tree["rates_are"] == TREE_PATH and "top-3" in tree["note"]
    assert profile_of(records, steps=None, topk=None, source="r")["rates_are"] == UNKNOWN_SHAPE


def test_a_run_without_histograms_says_so() -> None:
    with pytest.raises(ValueError, match="no completed request carries spec_correct_drafts_histogram"):
        profile_of([_record(None, "code")], steps=2, topk=1, source="run.json")
    with pytest.raises(ValueError, match="non-negative counts"):
        profile_of([_record([1, -1], "code")], steps=1, topk=1, source="run.json")
