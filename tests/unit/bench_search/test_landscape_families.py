"""Synthetic landscape families (benchmarks.search.families): the committed landscapes load and
cover their spaces, their curves are not the phase-model sampler's form (fitted against the
emulator's landscape of the same space as the contrast), the repeats carry the noise asked for,
the never-pays family never pays, and bench_search replays them."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotune.search.samplers._acceptance import AcceptancePredictor as AcceptanceModel
from autotune.search.samplers._acceptance import AcceptObs
from autotune.search.samplers._cycle import CycleModel, _verify_features
from autotune.simtools.evaluate import ModelEvaluator
from autotune.space.search_space import load_space
from benchmarks.search.families import FAMILIES, PLATEAU, generate, interp_verify, plain_8b, truth, write
from benchmarks.search.landscape import load_landscape, missing_configs
from benchmarks.search.problem import load_problem
from benchmarks.search.strategies import benchmark

ROOT = Path(__file__).resolve().parents[3]
LANDSCAPES = ROOT / "benchmarks" / "landscapes"
SPACES = ROOT / "search_spaces"
#: Committed file -> (family, space): benchmarks/landscapes/README.md gives the commands.
COMMITTED = {
    "table-accept-llama-8b-h200-c8.json": ("table-accept", "bench-family-llama-8b-h200-c8.yaml"),
    "interp-verify-llama-8b-h200.json": ("interp-verify", "bench-family-llama-8b-h200.yaml"),
    "step-verify-moe.json": ("step-verify", "bench-family-moe-h200.yaml"),
    "never-pays-moe.json": ("never-pays", "bench-family-moe-h200.yaml"),
}
TRIPLE = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


def triple(params: dict) -> tuple[int, int, int]:
    return tuple(int(params[k]) for k in TRIPLE)  # type: ignore[return-value]


def one_group(space_file: str, backend: str = "fa3") -> tuple[object, list[dict]]:
    space = load_space(SPACES / space_file)
    return space, [c for c in space.enumerate() if c["attention_backend"] == backend]


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_committed_landscape_loads_covers_its_space_and_is_what_the_command_writes(
        name: str, tmp_path: Path) -> None:
    family, space_file = COMMITTED[name]
    land = load_landscape(LANDSCAPES / name)
    assert Path(land.space_path).resolve() == (SPACES / space_file).resolve()
    assert missing_configs(land.space, land.entries) == ([], [])
    groups = {json.dumps(land.space.baseline_params(c), sort_keys=True)
              for c in land.space.enumerate()}
    assert len(land.entries) == len(list(land.space.enumerate())) + len(groups)
    assert land.description.startswith(f"synthetic family {family}: not the sampler's "
                                        "functional form")
    assert "Sources:" in land.description and "not measured" in land.acceptance
    # Reproducible: the README's command writes the same records.
    again = write(generate(family, str(SPACES / space_file), seed=0, noise_cv=0.01),
                  tmp_path / name)
    assert json.loads(again.read_text())["records"] == json.loads(
        (LANDSCAPES / name).read_text())["records"]


def _fit_acceptance(points: dict[tuple, float]) -> np.ndarray:
    ts = list(points)
    model = AcceptanceModel(max(t[0] for t in ts), max(t[1] for t in ts))
    model.fit([AcceptObs(*t, a) for t, a in points.items()], iterations=200)
    pred = model.mean([t[0] for t in ts], [t[1] for t in ts], [t[2] for t in ts])
    return (pred - np.array(list(points.values()))) / np.array(list(points.values()))


def test_table_acceptance_is_not_the_samplers_form_and_the_emulators_is() -> None:
    space, configs = one_group("bench-family-llama-8b-h200-c8.yaml")
    land = load_landscape(LANDSCAPES / "table-accept-llama-8b-h200-c8.json")
    family = {triple(c): land.entry(c).accept_length for c in configs}
    ev = ModelEvaluator(space, noise_cv=0.0)
    emulator = {triple(c): ev.expected(c)["accept_length"] for c in configs}
    fam, emu = _fit_acceptance(family), _fit_acceptance(emulator)
    rms = lambda r: float(np.sqrt(np.mean(r ** 2)))  # noqa: E731
    # The sampler's 5-parameter acceptance fits the emulator to a fraction of a percent, and
    # misses the table family by several percent (at the trees most).
    assert rms(emu) < 0.005 and np.abs(emu).max() < 0.01
    assert rms(fam) > 0.02 and np.abs(fam).max() > 0.05
    # The chain's per-position acceptance, read back from the accept lengths, dips, rises and
    # falls off a cliff: no sigmoid(a + b (d - 1) + g [d >= 2]) does that.
    chain = [family[(s, 1, s + 1)] for s in range(1, 8)]
    reach = np.diff([1.0, *chain])  # P(accept >= d), d = 1..7
    q = reach[1:] / reach[:-1]  # q[d] for d = 2..7
    assert q[1] < q[0] and q[2] > q[1] + 0.1 and q[4] > q[2] and q[5] < q[4] - 0.3


def _verify_fit_error(rows: list[tuple[int, int, int, float]]) -> float:
    """Max relative miss of the sampler's verify model fitted to normalised verify times."""
    s, k, n = (np.array([r[i] for r in rows], float) for i in range(3))
    y = np.array([r[3] for r in rows])
    ph = np.stack([np.full_like(y, 0.05), y, np.full_like(y, 0.1), np.full_like(y, 0.05)], 1)
    model = CycleModel()
    model.fit(s, k, n, ph, True)
    name, post = model.parts[1]
    assert name == "verify"
    pred = sum(w * p.predict(_verify_features(n, k, c))[0] for w, c, p in post)
    return float(np.max(np.abs(pred - y) / y))


@pytest.mark.parametrize("family,space_file", [("step-verify", "bench-family-moe-h200.yaml"),
                                               ("table-accept",
                                                "bench-family-llama-8b-h200-c8.yaml")])
def test_verify_steps_and_kinks_the_samplers_verify_curve_cannot_follow(
        family: str, space_file: str) -> None:
    space, configs = one_group(space_file)
    fam = FAMILIES[family]
    base = truth(fam, space, space.baseline_params(configs[0]))["phases"]["cycle_ms"]
    rows = [(*triple(c), truth(fam, space, c)["phases"]["verify_ms"] / base) for c in configs]
    ev = ModelEvaluator(space, noise_cv=0.0)
    ebase = ev.expected(space.baseline_params(configs[0]))["phases"]["cycle_ms"]
    erows = [(*triple(c), ev.expected(c)["phases"]["verify_ms"] / ebase) for c in configs]
    assert _verify_fit_error(erows) < 0.01  # the emulator's verify is the sampler's curve
    assert _verify_fit_error(rows) > 0.05
    if family == "step-verify":
        chain = {triple(c)[2]: r[3] for c, r in zip(configs, rows, strict=True) if triple(c)[1] == 1}
        slope = chain[4] - chain[3]
        assert chain[5] - chain[4] > 8 * slope and chain[6] - chain[5] < 2 * slope  # a jump


def test_interp_costs_reproduce_the_measured_h200_sweep_and_other_falls_with_accept() -> None:
    rows = json.loads((ROOT / "docs/measurements/real-search-h200-llama-8b.json").read_text())
    f = FAMILIES["interp-verify"]
    errors = []
    for r in rows["spaces"]["h200-llama-8b"]["rows"]:
        p = r["params"]
        if p["speculative_algorithm"] is None:
            ph, a, prefill = plain_8b(1, f.backends["triton"]), 1.0, f.prefill_ms
        else:
            a = r["accept"]
            ph = interp_verify(*triple(p), 1, f.backends["triton"], a)
            prefill = 1.02 * f.prefill_ms
        tok_s = 1000 * 192 / (prefill + 191 / a * sum(ph.values()))
        errors.append(tok_s / r["tok_s"] - 1)
    assert len(errors) == 9 and max(abs(e) for e in errors) < 0.035
    space, configs = one_group("bench-family-llama-8b-h200.yaml", "triton")
    chains = sorted((truth(f, space, c)["accept_length"], truth(f, space, c)["phases"]["other_ms"])
                    for c in configs if c["speculative_eagle_topk"] == 1)
    other = [o for _, o in chains]
    assert len(other) == 7 and all(b < a for a, b in zip(other, other[1:], strict=False))
    assert 0.30 < other[-1] < other[0] < 0.34  # the measured chains: 0.31-0.32 ms


def test_repeats_carry_the_requested_noise(tmp_path: Path) -> None:
    space = str(SPACES / "bench-family-moe-h200.yaml")
    fam = FAMILIES["step-verify"]
    sp = load_space(space)
    for cv in (0.0, 0.04):
        doc = generate("step-verify", space, seed=3, noise_cv=cv, repeats=6)
        logs = []
        for rec in doc["records"]:
            true = truth(fam, sp, rec["params"])["tok_s"]
            assert len(rec["output_tok_s_repeats"]) == 6
            logs += [math.log(x / true) for x in rec["output_tok_s_repeats"]]
        if cv == 0:
            assert max(abs(x) for x in logs) < 1e-4
        else:
            assert 0.85 * cv < float(np.std(logs)) < 1.15 * cv and abs(np.mean(logs)) < 0.01
    other_seed = generate("step-verify", space, seed=4, noise_cv=0.04, repeats=6)["records"]
    assert other_seed[0]["output_tok_s_repeats"] != doc["records"][0]["output_tok_s_repeats"]


def test_never_pays_every_speculative_config_is_infeasible_and_the_answer_is_a_baseline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    land = load_landscape(LANDSCAPES / "never-pays-moe.json")
    spec = [r for r in land.records if not r["is_baseline"]]
    assert spec and all(r["status"] == "infeasible" and r["speedup"] < 0.95 for r in spec)
    problem = load_problem(landscape=str(LANDSCAPES / "never-pays-moe.json"))
    assert problem.optimum_params["speculative_algorithm"] is None
    assert not any(problem.truly_feasible(c) for c in problem.configs)
    # The guard: given a draft that pays, the never-pays family refuses to write.
    good = dataclasses.replace(FAMILIES["never-pays"], draft=PLATEAU)
    monkeypatch.setitem(FAMILIES, "never-pays", good)
    with pytest.raises(ValueError, match="must never pay"):
        generate("never-pays", str(SPACES / "bench-family-moe-h200.yaml"))


def test_bench_search_replays_a_family_landscape() -> None:
    out = benchmark(landscape=str(LANDSCAPES / "step-verify-moe.json"), seeds=2, budget=12,
                    strategies=("random", "phase-model"))
    for name in ("random", "phase-model"):
        assert out[name]["oracle"] == "landscape" and out[name]["configs"] == 171
        assert len(out[name]["trials_to_target"]) == 2
    assert out["phase-model"]["description"].startswith("synthetic family step-verify")


def test_cli_writes_a_landscape_and_refuses_what_the_family_does_not_model(
        tmp_path: Path) -> None:
    out = tmp_path / "l.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.search.families", "--family", "interp-verify",
         "--space", str(SPACES / "bench-family-llama-8b-h200.yaml"), "--out", str(out),
         "--seed", "1", "--noise-cv", "0.02"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "184 records (2 baselines)" in proc.stdout
    assert load_landscape(out).records[0]["output_tok_s_repeats"]
    bad = tmp_path / "bad.yaml"
    bad.write_text((SPACES / "bench-family-llama-8b-h200.yaml").read_text().replace(
        "  attention_backend: {type: categorical, choices: [triton, fa3]}",
        "  attention_backend: {type: categorical, choices: [triton, fa3]}\n"
        "  NCCL_ALGO: {type: categorical, choices: [null, Ring]}"))
    with pytest.raises(ValueError, match="NCCL_ALGO"):
        generate("interp-verify", str(bad))
    deep = tmp_path / "deep.yaml"
    deep.write_text((SPACES / "bench-family-llama-8b-h200.yaml").read_text().replace(
        "low: 1, high: 7}", "low: 1, high: 9}"))
    with pytest.raises(ValueError, match="8 positions"):
        generate("interp-verify", str(deep))
