"""Per-level cost surfaces: a search with load levels keeps each level's costs from that level's
measurement, a repick ranks at any level, and the phase-cost table covers every batch size.

Results are built here from a cost law written out per batch size (the verify cycle grows with the
batch), so every figure a test checks is the law's; the search end to end is in
tests/e2e/test_repick.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune.search import repick
from autotune.search.cost_surface import FORMAT, at_level, levels_of, surface_of
from autotune.search.phase_costs import adaptive_candidates, phase_cost_table
from autotune.sglang.adaptive import check_table
from autotune.space.synthetic import SyntheticAcceptance
from autotune.trial.level_results import LoadLevel, level_record
from autotune.trial.result import TrialResult

RATES = (0.8, 0.7, 0.6, 0.5)
PARAMETERS = {
    "speculative_algorithm": {"type": "categorical", "choices": [None, "EAGLE3"]},
    "speculative_num_steps": {"type": "int", "low": 1, "high": 4},
    "speculative_eagle_topk": {"type": "categorical", "choices": [1, 2]},
    "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 6},
}
C1, C8 = LoadLevel.of("concurrency", 1), LoadLevel.of("concurrency", 8)


def _decode_ms(batch: int) -> float:
    return 10.0 + 0.5 * batch


def _cycle(s: int, k: int, n: int, batch: int) -> dict[str, float]:
    """A cost law per batch size: drafting 0.8 ms a step (x k), verify 10.5 + 0.2 (n - 1) tokens
    of each request of the batch, re-extend 1 ms; a batch of 8 verifies 8 x n tokens a cycle."""
    draft = 0.8 * s * k * (1 + 0.05 * batch)
    verify = 10.5 + 0.2 * (n - 1) * batch
    extend, other = 1.0 + 0.1 * batch, 0.3
    return {"draft_ms": draft, "verify_ms": verify, "extend_ms": extend, "other_ms": other,
            "cycle_ms": draft + verify + extend + other}


def _at(params: dict[str, Any], batch: int, model: SyntheticAcceptance, *, noise: float = 0.005,
        status: str = "feasible") -> TrialResult:
    """One level's result: ``batch`` requests in flight, each at the law's cycle and accept length."""
    if params.get("speculative_algorithm") is None:
        tok = 1000.0 * batch / _decode_ms(batch)
        return TrialResult(status=status, reason=None, params=params, is_baseline=True, output_tok_s=tok,
                           output_tok_s_repeats=[tok * (1 - noise), tok, tok * (1 + noise)],
                           phases={"cycle_ms": _decode_ms(batch)})
    s, k, n = (params["speculative_num_steps"], params["speculative_eagle_topk"],
               params["speculative_num_draft_tokens"])
    ph = _cycle(s, k, n, batch)
    length = model.accept_length(steps=s, topk=k, draft_tokens=n)
    tok = 1000.0 * batch * length / ph["cycle_ms"]
    failed = status == "failed"
    return TrialResult(status=status, reason="oom" if failed else None, params=params, is_baseline=False,
                       output_tok_s=None if failed else tok,
                       output_tok_s_repeats=[] if failed else [tok * (1 - noise), tok, tok * (1 + noise)],
                       accept_length=None if failed else length, phases=None if failed else ph,
                       acceptance="synthetic", baseline_decode_step_ms=_decode_ms(batch),
                       baseline_tok_s=1000.0 * batch / _decode_ms(batch))


def _levels(params: dict[str, Any], model: SyntheticAcceptance, *, failed_at: int | None = None) -> TrialResult:
    """The trial's result as a search keeps it: the primary level's (c8), with each level's record."""
    per = {lv: _at(params, int(lv.value), model, status="failed" if lv.value == failed_at else "feasible")
           for lv in (C1, C8)}
    return replace(per[C8], levels=[level_record(lv, r) for lv, r in per.items()])


def _spec(s: int, k: int, n: int) -> dict[str, Any]:
    return {"speculative_algorithm": "EAGLE3", "speculative_num_steps": s,
            "speculative_eagle_topk": k, "speculative_num_draft_tokens": n}


MEASURED = [_spec(1, 1, 2), _spec(2, 1, 3), _spec(4, 1, 5), _spec(2, 2, 4), _spec(3, 2, 6), _spec(4, 2, 6)]
BASE = {"speculative_algorithm": None}


@pytest.fixture
def space(space_factory: Any) -> Any:
    return space_factory({
        "name": "levels", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
        "model_path": "sim/llama", "draft_model_path": "sim/draft", "fixed_args": {"tp_size": 1},
        "parameters": PARAMETERS, "synthetic_acceptance": {"rates": list(RATES)},
        "workload": {"num_prompts": 8, "output_len": 16, "concurrency": [1, 8], "primary_concurrency": 8}})


def _surface(space: Any, *, failed_at: dict[int, int] | None = None) -> dict[str, Any]:
    model = SyntheticAcceptance(RATES)
    fails = failed_at or {}
    results = [_levels(BASE, model)]
    results += [_levels(p, model, failed_at=fails.get(i)) for i, p in enumerate(MEASURED)]
    return json.loads(json.dumps(surface_of(space, results, name="levels")))  # as read from the file


def _shape(c: dict[str, Any]) -> tuple[int, int, int]:
    return c["steps"], c["topk"], c["draft_tokens"]


def test_each_level_keeps_its_own_measurement_and_the_top_is_the_primary(space: Any) -> None:
    surface = _surface(space)
    assert surface["format"] == FORMAT and levels_of(surface) == [C1, C8]
    # The top of the file is the primary level's (what a single-level reader reads), now keyed.
    assert surface["level"] == {"concurrency": 8} and surface["batch_size"] == 8
    by_level = {LoadLevel.of_record(p): p for p in surface["levels"]}
    assert by_level[C8]["configs"] == surface["configs"]
    for lv, part in by_level.items():
        batch = int(lv.value)
        assert part["batch_size"] == batch and len(part["configs"]) == len(MEASURED)
        assert part["groups"][0]["decode_step_ms"] == pytest.approx(_decode_ms(batch))
        for c in part["configs"]:
            law = _cycle(*_shape(c), batch)
            assert c["phases"]["verify_ms"]["ms"] == pytest.approx(law["verify_ms"])
            assert c["output_tok_s"] == pytest.approx(1000.0 * batch * c["accept_length"] / law["cycle_ms"])
        # Each level's throughput line is its own: one request in flight, or eight.
        assert part["throughput_line"]["a"] == pytest.approx(1e-3 / batch, rel=1e-6)
    # The configs not measured are the same at every level (the space's, not a level's).
    assert {_shape(u) for u in surface["unmeasured"]} >= {(3, 1, 4)}


def test_a_repick_at_each_level_predicts_that_level_s_cost_law(space: Any) -> None:
    surface = _surface(space)
    low = SyntheticAcceptance((0.6, 0.45, 0.3, 0.2))
    picks = {}
    for key, batch in (("1", 1), ("8", 8), (None, 8)):
        view, level = at_level(surface, key)
        assert level == LoadLevel.of("concurrency", batch) and view["batch_size"] == batch
        assert ("levels" in view) == (key is None)  # the primary level is the file's top
        preds = repick.predict_all(view, low)
        checked = 0
        for p in preds:
            if p.tok_s is None:
                continue
            s, k, n = (p.params["speculative_num_steps"], p.params["speculative_eagle_topk"],
                       p.params["speculative_num_draft_tokens"])
            length = low.accept_length(steps=s, topk=k, draft_tokens=n)
            truth = 1000.0 * batch * length / _cycle(s, k, n, batch)["cycle_ms"]
            assert p.tok_s == pytest.approx(truth, rel=0.03 if p.measured else 0.08), (key, p)
            checked += 1
        assert checked >= len(MEASURED)
        picks[key] = next(p for p in preds if p.trusted).params
    # The law makes wide trees dear at batch 8 and cheap at 1: the levels' picks differ.
    assert picks["1"] != picks["8"] and picks[None] == picks["8"]


def test_an_unknown_level_names_the_levels_the_surface_keeps(space: Any) -> None:
    surface = _surface(space)
    for key in ("64", "r2", "eight"):
        with pytest.raises(ValueError, match=r"--level .*no such level; its levels: 1 \(concurrency 1\), "
                                             r"8 \(concurrency 8\)"):
            at_level(surface, key)


def test_a_config_failed_at_one_level_is_kept_at_the_other_only(space: Any) -> None:
    surface = _surface(space, failed_at={3: 8})  # (2, 2, 4) ran out of memory at batch 8
    by_level = {LoadLevel.of_record(p): p for p in surface["levels"]}
    assert (2, 2, 4) in {_shape(c) for c in by_level[C1]["configs"]}
    assert (2, 2, 4) not in {_shape(c) for c in by_level[C8]["configs"]}
    # Measured (and failed) is not unmeasured: nothing interpolates it at batch 8 as if it ran.
    assert (2, 2, 4) not in {_shape(u) for u in surface["unmeasured"]}
    view, _ = at_level(surface, "8")
    preds = repick.predict_all(view, SyntheticAcceptance(RATES))
    assert _spec(2, 2, 4) not in [p.params for p in preds]


def test_the_phase_cost_table_covers_every_batch_size_and_sglang_reads_it(space: Any, tmp_path: Path) -> None:
    table = phase_cost_table(_surface(space, failed_at={1: 8}))  # the 2-step chain failed at batch 8
    assert table["batch_sizes"] == [1, 8] and table["skipped"] == []
    by_bs = {bs: {(e["steps"], e["topk"], e["draft_tokens"]): e for e in table["entries"] if e["batch_size"] == bs}
             for bs in (1, 8)}
    assert len(by_bs[1]) == len(MEASURED) and len(by_bs[8]) == len(MEASURED) - 1
    for bs, entries in by_bs.items():
        e = entries[(4, 2, 6)]
        assert e["verify_ms"] == pytest.approx(_cycle(4, 2, 6, bs)["verify_ms"]) and e["verify_sd_ms"] > 0
    adaptive = adaptive_candidates(table)
    # Per batch size, the chains whose cost was measured there.
    assert adaptive == {"1": {"candidate_steps": [1, 2, 4]}, "8": {"candidate_steps": [1, 4]}}
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(adaptive))
    steps, _checker = check_table(path)
    assert steps == [1, 2, 4]


def test_rate_levels_keep_surfaces_but_name_no_batch_size(space_factory: Any) -> None:
    space = space_factory({
        "name": "rates", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
        "model_path": "sim/llama", "draft_model_path": "sim/draft", "fixed_args": {"tp_size": 1},
        "parameters": PARAMETERS, "synthetic_acceptance": {"rates": list(RATES)},
        "workload": {"num_prompts": 8, "output_len": 16, "request_rate": [2, 8]}})
    model = SyntheticAcceptance(RATES)
    r2, r8 = LoadLevel.of("request_rate", 2), LoadLevel.of("request_rate", 8)
    results = []
    for p in MEASURED:
        per = {r2: _at(p, 1, model), r8: _at(p, 4, model)}
        results.append(replace(per[r2], levels=[level_record(lv, r) for lv, r in per.items()]))
    surface = surface_of(space, results, name="rates")
    assert levels_of(surface) == [r2, r8] and surface["level"] == {"request_rate": 2.0}
    view, level = at_level(surface, "r8")
    assert level == r8 and view["batch_size"] is None and view["configs"][0]["output_tok_s"] == pytest.approx(
        results[0].levels[1]["output_tok_s"])  # type: ignore[index]
    with pytest.raises(ValueError, match="no batch size"):
        phase_cost_table(surface)


def test_a_single_level_surface_is_unchanged_and_has_no_level(space_factory: Any) -> None:
    space = space_factory({
        "name": "one", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
        "model_path": "sim/llama", "draft_model_path": "sim/draft", "fixed_args": {"tp_size": 1},
        "parameters": PARAMETERS, "synthetic_acceptance": {"rates": list(RATES)},
        "workload": {"num_prompts": 2, "output_len": 16, "concurrency": 4}})
    model = SyntheticAcceptance(RATES)
    surface = surface_of(space, [_at(p, 4, model) for p in MEASURED], name="one")
    assert "levels" not in surface and "level" not in surface and surface["batch_size"] == 4
    assert levels_of(surface) == []
    assert at_level(surface, None) == (surface, None)
    with pytest.raises(ValueError, match="its levels: none: a single-level search at batch size 4"):
        at_level(surface, "4")


@pytest.mark.parametrize(("fmt", "needle"), [("autotune-cost-surface/2", "reads 'autotune-cost-surface/1' only"),
                                             (None, "not a cost surface")])
def test_another_format_is_refused_by_name(fmt: str | None, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        repick.predict_all({"format": fmt, "configs": []}, SyntheticAcceptance(RATES))
    with pytest.raises(ValueError, match=needle):
        levels_of({"format": fmt})
