"""The cost surface, the repick's predictions and the phase-cost table, on results written out here.

The end-to-end checks (a search on the emulator, ``autotune repick`` reading MLflow, the proof on
two forced acceptances) are in tests/e2e/test_repick.py and tests/integration/test_repick_proof.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.search import repick
from autotune.search.cost_surface import FORMAT, surface_of, throughput_line
from autotune.search.phase_costs import adaptive_candidates, phase_cost_table
from autotune.sglang.adaptive import check_table
from autotune.space.synthetic import SyntheticAcceptance
from autotune.trial.result import TrialResult

RATES = (0.8, 0.7, 0.6, 0.5)
PARAMETERS = {
    "speculative_algorithm": {"type": "categorical", "choices": [None, "EAGLE3"]},
    "speculative_num_steps": {"type": "int", "low": 1, "high": 4},
    "speculative_eagle_topk": {"type": "categorical", "choices": [1, 2]},
    "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 6},
}
DECODE_MS = 10.0
A = 1.0 / 1000.0  # one request in flight: tok/s = 1000 * L / cycle_ms


def _cycle(s: int, k: int, n: int) -> dict[str, float]:
    """A cost law written out: draft 0.8 ms a step (x k), verify 10.5 + 0.2 (n - 1), extend 1."""
    draft, verify, extend, other = 0.8 * s * k, 10.5 + 0.2 * (n - 1), 1.0, 0.3
    return {"draft_ms": draft, "verify_ms": verify, "extend_ms": extend, "other_ms": other,
            "cycle_ms": draft + verify + extend + other}


def _result(params: dict[str, Any], model: SyntheticAcceptance, *, noise: float = 0.0) -> TrialResult:
    s, k, n = (params["speculative_num_steps"], params["speculative_eagle_topk"],
               params["speculative_num_draft_tokens"])
    ph = _cycle(s, k, n)
    length = model.accept_length(steps=s, topk=k, draft_tokens=n)
    tok = 1.0 / (A * ph["cycle_ms"] / length)
    return TrialResult(status="feasible", reason=None, params=params, is_baseline=False,
                       output_tok_s=tok, output_tok_s_repeats=[tok * (1 - noise), tok, tok * (1 + noise)],
                       accept_length=length, phases=ph, acceptance="synthetic",
                       baseline_decode_step_ms=DECODE_MS, baseline_tok_s=1.0 / (A * DECODE_MS))


def _spec(s: int, k: int, n: int) -> dict[str, Any]:
    return {"speculative_algorithm": "EAGLE3", "speculative_num_steps": s,
            "speculative_eagle_topk": k, "speculative_num_draft_tokens": n}


@pytest.fixture
def space(space_factory: Any) -> Any:
    base = {"name": "unit", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
            "model_path": "sim/llama", "draft_model_path": "sim/draft", "fixed_args": {"tp_size": 1},
            "parameters": PARAMETERS, "synthetic_acceptance": {"rates": list(RATES)},
            "workload": {"num_prompts": 2, "output_len": 16, "concurrency": 1}}
    return space_factory(base)


MEASURED = [_spec(1, 1, 2), _spec(2, 1, 3), _spec(4, 1, 5), _spec(2, 2, 4), _spec(3, 2, 6), _spec(4, 2, 6)]


def _surface(space: Any, noise: float = 0.005) -> dict[str, Any]:
    model = SyntheticAcceptance(RATES)
    return surface_of(space, [_result(p, model, noise=noise) for p in MEASURED], name="unit")


def test_the_surface_keeps_each_config_s_phases_with_spreads(space: Any) -> None:
    surface = _surface(space)
    assert surface["format"] == FORMAT and surface["batch_size"] == 1
    assert len(surface["configs"]) == len(MEASURED)
    c = next(c for c in surface["configs"] if c["steps"] == 4 and c["topk"] == 2)
    assert c["phases"]["verify_ms"]["ms"] == pytest.approx(10.5 + 0.2 * 5)
    assert c["draft_ms_per_step"] == pytest.approx(1.6)
    assert c["phases"]["draft_ms"]["sd_ms"] == pytest.approx(6.4 * c["tok_s_sd_rel"])
    assert c["tok_s_sd_rel"] > 0
    assert surface["groups"][0]["decode_step_ms"] == DECODE_MS
    # Every enumerated speculative config not measured is a candidate, with its shape.
    shapes = {(u["steps"], u["topk"], u["draft_tokens"]) for u in surface["unmeasured"]}
    assert (3, 1, 4) in shapes and (1, 1, 2) not in shapes
    json.dumps(surface)  # JSON-ready


def test_one_repeat_leaves_the_spread_unknown_never_zero(space: Any) -> None:
    model = SyntheticAcceptance(RATES)
    r = _result(_spec(2, 1, 3), model)
    r.output_tok_s_repeats = [r.output_tok_s or 0.0]
    c = surface_of(space, [r], name="one")["configs"][0]
    assert c["tok_s_sd_rel"] is None and c["phases"]["verify_ms"]["sd_ms"] is None


def test_nothing_measured_is_an_error(space: Any) -> None:
    with pytest.raises(ValueError, match="no cost surface"):
        surface_of(space, [], name="empty")


def test_the_throughput_line_recovers_a_written_line() -> None:
    pts = [(x, 1.0 / (0.002 * x + 0.0004)) for x in (2.0, 3.0, 5.0, 8.0)]
    line = throughput_line(pts)
    assert line["a"] == pytest.approx(0.002) and line["b"] == pytest.approx(0.0004, abs=1e-12)
    assert line["a_sd"] == pytest.approx(0.0, abs=1e-9)
    two = throughput_line(pts[:2])
    assert two["a_sd"] is None and two["b"] == 0.0


def test_a_measured_config_at_its_own_acceptance_is_its_measurement(space: Any) -> None:
    surface = _surface(space)
    preds = repick.predict_all(surface, SyntheticAcceptance(RATES))
    for c in surface["configs"]:
        p = next(p for p in preds if p.params == c["params"])
        assert p.measured and p.tok_s == pytest.approx(c["output_tok_s"])


def test_other_rates_are_predicted_as_the_cost_law_gives_and_the_best_ranks_first(space: Any) -> None:
    surface = _surface(space)
    low = SyntheticAcceptance((0.6, 0.45, 0.3, 0.2))
    preds = repick.predict_all(surface, low)
    for p in preds:
        if p.tok_s is None:
            continue
        s, k, n = (p.params["speculative_num_steps"], p.params["speculative_eagle_topk"],
                   p.params["speculative_num_draft_tokens"])
        truth = 1000.0 * low.accept_length(steps=s, topk=k, draft_tokens=n) / _cycle(s, k, n)["cycle_ms"]
        assert p.tok_s == pytest.approx(truth, rel=0.03 if p.measured else 0.06), p
    trusted = [p for p in preds if p.trusted]
    assert trusted and trusted == sorted(trusted, key=lambda p: -(p.tok_s or 0))
    assert preds.index(trusted[-1]) < len(trusted)  # trusted rank above the rest


def test_no_extrapolation_outside_a_group_s_measured_range(space: Any) -> None:
    model = SyntheticAcceptance(RATES)
    narrow = [_spec(1, 1, 2), _spec(2, 1, 3), _spec(2, 2, 4)]
    surface = surface_of(space, [_result(p, model, noise=0.005) for p in narrow], name="narrow")
    preds = repick.predict_all(surface, model)
    far = next(p for p in preds if p.params.get("speculative_num_steps") == 4)
    assert far.tok_s is None and not far.trusted and "outside the measured range" in (far.why or "")
    text = repick.ranking_text(preds, space="s.yaml")
    assert "too uncertain to rank" in text and "python -m autotune.trial --space s.yaml" in text
    assert "predicted" in text.splitlines()[0]


def test_a_noisy_config_is_named_not_ranked(space: Any) -> None:
    model = SyntheticAcceptance(RATES)
    results = [_result(p, model, noise=0.005) for p in MEASURED]
    results[0] = _result(MEASURED[0], model, noise=0.2)
    preds = repick.predict_all(surface_of(space, results, name="noisy"), model)
    noisy = next(p for p in preds if p.params == MEASURED[0])
    assert not noisy.trusted and "spread" in (noisy.why or "")


@pytest.mark.parametrize(("text", "rates"), [("rates:[0.8, 0.7]", (0.8, 0.7)), ("[0.5]", (0.5,)),
                                             ('{"rates": [0.9, 0.6]}', (0.9, 0.6))])
def test_acceptance_forms(text: str, rates: tuple[float, ...]) -> None:
    assert repick.parse_acceptance(text).rates == rates


@pytest.mark.parametrize(("text", "needle"), [("rates:0.8", "per-position rates"),
                                              ("rates:[0.8, 1.5]", "not a probability"),
                                              ("rates:[oops", "not rates:")])
def test_bad_acceptance_says_what_would_be_right(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        repick.parse_acceptance(text)


def test_the_phase_cost_table_and_sglang_s_adaptive_candidates(space: Any, tmp_path: Path) -> None:
    table = phase_cost_table(_surface(space))
    assert {(e["steps"], e["topk"], e["draft_tokens"]) for e in table["entries"]} == {
        (p["speculative_num_steps"], p["speculative_eagle_topk"], p["speculative_num_draft_tokens"])
        for p in MEASURED}
    e = next(e for e in table["entries"] if e["steps"] == 2 and e["topk"] == 1)
    assert e["batch_size"] == 1 and e["verify_ms"] == pytest.approx(10.9) and e["verify_sd_ms"] > 0
    adaptive = adaptive_candidates(table)
    assert adaptive == {"1": {"candidate_steps": [1, 2, 4]}}  # the measured chains only
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(adaptive))
    steps, _checker = check_table(path)
    assert steps == [1, 2, 4]


def test_no_batch_size_no_table(space: Any) -> None:
    surface = {**_surface(space), "batch_size": None}
    with pytest.raises(ValueError, match="no batch size"):
        phase_cost_table(surface)


def test_the_proof_compares_measured_and_interpolated_configs_and_the_pick(space: Any) -> None:
    low = SyntheticAcceptance((0.6, 0.45, 0.3, 0.2))
    # At the second acceptance: two configs of the surface and one it never measured.
    at_b = [_result(_spec(2, 1, 3), low), _result(_spec(4, 2, 6), low), _result(_spec(3, 1, 4), low)]
    report = repick.compare_at(_surface(space), low, at_b)
    assert report["compared"] == 3
    rows = {r["params"]["speculative_num_steps"]: r for r in report["rows"]}
    assert rows[3]["cost"] == "interpolated" and rows[3]["error_at_measured_accept_pct"] is None
    assert rows[2]["cost"] == "measured"
    # The written law is the surface's own form: the measured ones land on it, the interpolated one near.
    assert abs(rows[2]["error_pct"]) < 0.5 and abs(rows[4]["error_pct"]) < 0.5
    assert abs(rows[3]["error_pct"]) < 6.0
    best = max(at_b, key=lambda r: r.output_tok_s or 0.0)
    assert report["best"]["params"] == best.params
    assert report["pick_share"] == pytest.approx(report["pick"]["measured_tok_s"] / best.output_tok_s)
    assert "repick:" in report["text"] and " inte  num_steps=3" in report["text"]


def test_rates_for_fewer_positions_than_steps_name_the_config_and_stay_valid_json(space: Any) -> None:
    preds = repick.predict_all(_surface(space), SyntheticAcceptance((0.8, 0.7)))
    deep = [p for p in preds if p.params["speculative_num_steps"] > 2]
    assert deep and all(p.tok_s is None and p.accept_length is None and not p.trusted for p in deep)
    assert all("fewer positions" in (p.why or "") for p in deep)
    json.loads(json.dumps([p.to_dict() for p in preds], allow_nan=False))


def test_an_open_loop_rate_keys_no_batch_size_even_under_a_concurrency_cap(space_factory: Any) -> None:
    # With a rate the requests in flight follow the rate; the cap only bounds them, so the costs
    # belong to no one batch size (and the phase-cost table, keyed by batch size, is not written).
    model = SyntheticAcceptance(RATES)
    results = [_result(p, model) for p in MEASURED]
    for workload, batch in (({"request_rate": 4.0, "concurrency": 8}, None), ({"request_rate": 4.0}, None),
                            ({"concurrency": 8}, 8)):
        base = {"name": "unit", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
                "model_path": "sim/llama", "draft_model_path": "sim/draft", "fixed_args": {"tp_size": 1},
                "parameters": PARAMETERS, "synthetic_acceptance": {"rates": list(RATES)},
                "workload": {"num_prompts": 8, "output_len": 16, **workload}}
        surface = surface_of(space_factory(base), results, name="unit")
        assert surface["batch_size"] == batch, workload
