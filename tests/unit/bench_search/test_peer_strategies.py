"""SGLang auto_benchmark's tiers as samplers (benchmarks/search/peers.py): the documented order,
no repeats inside the plan, conditions, plain Optuna use, constraints, and bench_search rows.

The expected orders below are worked out by hand from the rules in the module docstring
(auto_benchmark's build_candidates: baseline first; tier 1 one knob at a time over the first 2
values; tier 2 the product of the first 3 knobs over their first 3 values, first knob
outermost), the space's rules (top-k 1 makes draft tokens steps + 1; at most steps * topk + 1
draft tokens) and the defaults (null if a knob can be unset, false for a boolean, else the first
value; steps/top-k/draft tokens: SGLang's auto-picked triple, 3/1/4 for most targets and 5/4/8
for a Llama one, where the space can run it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.search.samplers import SAMPLER_NAMES, make_sampler
from autotune.search.samplers._observations import PLAN_KEY
from autotune.space.search_space import load_space
from benchmarks.search.command import render
from benchmarks.search.peers import (
    AutoBenchmarkTierSampler,
    AutoTier1Sampler,
    AutoTier2Sampler,
    default_value,
    tier_overlays,
)
from benchmarks.search.problem import Oracle, load_problem
from benchmarks.search.strategies import AUTO_TIERS, OURS, PEER_SAMPLERS, PEERS, STRATEGIES, benchmark, make_strategy

ROOT = Path(__file__).resolve().parents[3]

# Speculation can be off (a plain config per group); draft tokens only asked when topk > 1. A
# Llama target: SGLang would pick 5/4/8, which these ranges (at most 4 steps) cannot run.
PLAIN = """\
name: peers
backend: sim
profile: llama-3.1-8b-eagle3-h100
model_path: sim/Llama-3.1-8B-Instruct
draft_model_path: sim/draft
fixed_args: {tp_size: 1, mem_fraction_static: 0.8}
parameters:
  attention_backend: {type: categorical, choices: [triton, fa3, flashinfer]}
  disable_custom_all_reduce: {type: categorical, choices: [true, false]}
  speculative_algorithm: {type: categorical, choices: [null, EAGLE3]}
  speculative_num_steps: {type: int, low: 1, high: 4}
  speculative_eagle_topk: {type: categorical, choices: [1, 2, 4]}
  speculative_num_draft_tokens: {type: int, low: 2, high: 8, step: 2,
                                 when: "speculative_eagle_topk > 1"}
workload: {source: builtin, num_prompts: 4, warmup_prompts: 1, output_len: 96, concurrency: 1,
           seed: 0}
"""

# Speculation fixed on (as in the shipped spaces); tp 2 does not fit Kimi's weights. A target
# of unknown architecture: SGLang would pick 3/1/4, which these ranges can run.
FIXED = """\
name: peers-fixed
backend: sim
profile: kimi-k2.5-eagle3-tp8
model_path: sim/target
draft_model_path: sim/draft
fixed_args: {speculative_algorithm: EAGLE3, mem_fraction_static: 0.85}
parameters:
  tp_size: {type: categorical, choices: [8, 2]}
  speculative_num_steps: {type: int, low: 1, high: 3}
  speculative_eagle_topk: {type: categorical, choices: [1, 2]}
  speculative_num_draft_tokens: {type: int, low: 2, high: 6, step: 2}
  NCCL_PROTO: {type: categorical, choices: [LL, null]}
workload: {source: builtin, num_prompts: 4, warmup_prompts: 1, output_len: 96, concurrency: 1,
           seed: 0}
"""

BASE_KEYS = ("attention_backend", "disable_custom_all_reduce")
TRIPLE = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


def write(tmp_path: Path, text: str, name: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture()
def plain_path(tmp_path: Path) -> str:
    return write(tmp_path, PLAIN, "plain.yaml")


@pytest.fixture()
def fixed_path(tmp_path: Path) -> str:
    return write(tmp_path, FIXED, "fixed.yaml")


def drive(problem, sampler, *, seed: int, trials: int, noise_cv: float = 0.0):
    """Study trials through the bench's oracle, as bench_search runs them."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    oracle = Oracle(problem, seed=seed, noise_cv=noise_cv)
    for _ in range(trials):
        trial = study.ask()
        oracle.run(problem.space.suggest(trial)).tell(study, trial, maximize=True)
    return study, oracle


def reasons(study) -> list[str]:
    return [t.system_attrs[PLAN_KEY]["reason"] for t in study.trials]


def configs(study, sampler) -> list[dict]:
    return [sampler.table.configs[sampler.trial_index(t)] for t in study.trials]


def base_of(c: dict) -> tuple:
    return tuple(c[k] for k in BASE_KEYS)


def triple(c: dict) -> tuple:
    return tuple(c[k] for k in TRIPLE)


# ----------------------------------------------------------------------------- the order

def test_defaults_and_overlays_follow_build_candidates():
    assert default_value([None, "Ring"]) is None
    assert default_value([True, False]) is False
    assert default_value([8, 2]) == 8
    knobs = [("a", [1, 2]), ("b", ["x", "y"]), ("c", [True]), ("d", [5, 6])]
    assert tier_overlays(knobs, 1) == [{}, {"a": 1}, {"a": 2}, {"b": "x"}, {"b": "y"},
                                       {"c": True}, {"d": 5}, {"d": 6}]
    t2 = tier_overlays(knobs, 2)
    assert t2[0] == {}
    assert t2[1:5] == [{"a": 1, "b": "x", "c": True}, {"a": 1, "b": "y", "c": True},
                       {"a": 2, "b": "x", "c": True}, {"a": 2, "b": "y", "c": True}]
    assert t2[5:] == [{"d": 5}, {"d": 6}]
    with pytest.raises(ValueError):
        tier_overlays(knobs, 3)


def test_tier1_order_on_a_space_with_plain_configs(plain_path):
    problem = load_problem(plain_path)
    sampler = AutoTier1Sampler(problem.space, seed=0)
    study, _ = drive(problem, sampler, seed=0, trials=9)
    got = configs(study, sampler)
    # Base stage, speculation off: the baseline (triton: first value; custom all-reduce: false,
    # the flag left off), then attention fa3 alone, then the all-reduce flag on alone.
    assert reasons(study)[:3] == ["base"] * 3
    assert [base_of(c) for c in got[:3]] == [("triton", False), ("fa3", False), ("triton", True)]
    assert all(c["speculative_algorithm"] is None for c in got[:3])
    # The best measured baseline (noise off: the true best of the three) carries the
    # speculative stage: defaults (1 step, top-k 1, draft forced to 2), steps 2 alone, top-k 2
    # alone; draft tokens alone change nothing at top-k 1 (forced), so they are duplicates.
    truth = {base_of(c): problem.truth(c)["output_tok_s"] for c in got[:3]}
    winner = max(truth, key=truth.get)
    assert reasons(study)[3:6] == ["speculative"] * 3
    assert all(base_of(c) == winner for c in got[3:6])
    assert [triple(c) for c in got[3:6]] == [(1, 1, 2), (2, 1, 3), (1, 2, 2)]
    assert reasons(study)[6:] == ["random"] * 3


def test_tier2_order_on_a_space_with_plain_configs(plain_path):
    problem = load_problem(plain_path)
    sampler = AutoTier2Sampler(problem.space, seed=0)
    # Base: the baseline, then attention x all-reduce as listed (true before false).
    expected_base = [("triton", False), ("triton", True), ("fa3", True), ("fa3", False),
                     ("flashinfer", True), ("flashinfer", False)]
    # Speculative: steps [1, 2, 3] x topk [1, 2, 4] x draft [2, 4, 6], steps outermost; top-k 1
    # forces draft = steps + 1, and steps + 1 <= draft <= steps * topk + 1 drops the rest (rules
    # tree_draft_tokens_depth and draft_tokens_max).
    expected_spec = [(1, 1, 2), (1, 2, 2), (1, 4, 2), (1, 4, 4),
                     (2, 1, 3), (2, 2, 4), (2, 4, 4), (2, 4, 6),
                     (3, 1, 4), (3, 2, 4), (3, 2, 6), (3, 4, 4), (3, 4, 6)]
    n = len(expected_base) + len(expected_spec)
    study, _ = drive(problem, sampler, seed=0, trials=n + 4)
    got = configs(study, sampler)
    assert [base_of(c) for c in got[:6]] == expected_base
    truth = {base_of(c): problem.truth(c)["output_tok_s"] for c in got[:6]}
    winner = max(truth, key=truth.get)
    assert all(base_of(c) == winner for c in got[6:n])
    assert [triple(c) for c in got[6:n]] == expected_spec
    assert reasons(study) == ["base"] * 6 + ["speculative"] * len(expected_spec) + ["random"] * 4


def test_fixed_speculation_runs_each_group_default_config_and_skips_failed_groups(fixed_path):
    problem = load_problem(fixed_path)
    sampler = AutoTier1Sampler(problem.space, seed=0)
    study, oracle = drive(problem, sampler, seed=0, trials=6)
    got = configs(study, sampler)
    # No plain config in this space: the base stage runs each group's default speculative
    # config (SGLang's 3/1/4, which the space can run), and the oracle measures the group's
    # baseline first. Defaults: tp 8 (first listed), NCCL_PROTO unset (null is a choice).
    groups = [(c["tp_size"], c["NCCL_PROTO"]) for c in got]
    assert groups[:3] == [(8, None), (2, None), (8, "LL")]
    assert [triple(c) for c in got[:3]] == [(3, 1, 4)] * 3
    assert oracle.baselines == 3 and oracle.trials >= 6
    # tp 2 fails at start-up: its group is never the base stage's winner.
    truth = {g: problem.truth(problem.space.baseline_params(c))["output_tok_s"]
             for g, c in zip(groups[:3], got[:3], strict=True) if g[0] == 8}
    winner = max(truth, key=truth.get)
    # Speculative stage: 3/1/4 ran already; steps 1 and 2 alone (top-k 1 forces draft), top-k 2
    # alone (draft 4 <= 3 * 2 + 1); draft tokens alone are forced back at top-k 1.
    assert reasons(study)[3:] == ["speculative"] * 3
    assert groups[3:] == [winner] * 3
    assert [triple(c) for c in got[3:]] == [(1, 1, 2), (2, 1, 3), (3, 2, 4)]


def test_speculative_defaults_are_sglangs_triple_only_where_the_space_runs_it(plain_path,
                                                                           fixed_path):
    # An unknown target: SGLang picks 3/1/4, inside the fixed space's ranges.
    assert AutoTier1Sampler(load_space(fixed_path)).spec_defaults == {
        "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4}
    # A Llama target: SGLang picks 5/4/8, but this space stops at 4 steps: first values instead.
    assert AutoTier1Sampler(load_space(plain_path)).spec_defaults == {
        "speculative_algorithm": "EAGLE3", "speculative_num_steps": 1,
        "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2}


def test_max_candidates_caps_each_stage_as_a_prefix(plain_path):
    space = load_space(plain_path)
    full = AutoTier2Sampler(space, seed=0)
    capped = AutoTier2Sampler(space, seed=0, max_candidates=4)
    assert capped.base_plan == full.base_plan[:4]
    assert capped.spec_plan(0) == full.spec_plan(0)[:4]
    wide = AutoBenchmarkTierSampler(space, tier=1, values_per_knob=3)
    assert len(wide.base_plan) == len(AutoTier1Sampler(space).base_plan) + 1  # + flashinfer
    with pytest.raises(ValueError):
        AutoBenchmarkTierSampler(space, tier=3)


# ----------------------------------------------------------------------------- repeats, conditions

@pytest.mark.parametrize("name", AUTO_TIERS)
def test_no_config_twice_until_every_config_ran_and_conditions_hold(tmp_path, name):
    small = PLAIN.replace("high: 4}", "high: 2}").replace("[1, 2, 4]", "[1, 2]")
    problem = load_problem(write(tmp_path, small, "small.yaml"))
    space = problem.space
    size = space.count()
    sampler = make_strategy(name, seed=3, space=space)
    study, _ = drive(problem, sampler, seed=3, trials=size + 3)
    seen = [sampler.trial_index(t) for t in study.trials]
    assert sorted(seen[:size]) == list(range(size))  # every config once, none twice
    assert len(seen) == size + 3  # past the end it keeps going (the fallback sampler)
    for t in study.trials:
        params = sampler.table.configs[sampler.trial_index(t)]
        assert space.validate_config(params) is None
        if params["speculative_algorithm"] is None:
            assert not any(k.startswith("speculative_num") for k in t.params)
        elif params["speculative_eagle_topk"] == 1:
            # The condition keeps draft tokens out of the trial; the rule derives them.
            assert "speculative_num_draft_tokens" not in t.params
            assert params["speculative_num_draft_tokens"] == params["speculative_num_steps"] + 1


def test_random_tail_is_seeded(plain_path):
    problem = load_problem(plain_path)
    a = AutoTier1Sampler(problem.space, seed=7)
    b = AutoTier1Sampler(problem.space, seed=7)
    c = AutoTier1Sampler(problem.space, seed=8)
    sa, _ = drive(problem, a, seed=0, trials=12)
    sb, _ = drive(problem, b, seed=0, trials=12)
    sc, _ = drive(problem, c, seed=0, trials=12)
    assert configs(sa, a) == configs(sb, b)
    assert configs(sa, a)[:6] == configs(sc, c)[:6] and configs(sa, a)[6:] != configs(sc, c)[6:]


# ----------------------------------------------------------------------------- plain Optuna use

def test_plain_optimize_with_constraints_ranks_groups_by_the_objective(fixed_path):
    space = load_space(fixed_path)
    sampler = make_strategy("auto-tier1", seed=0, space=space)
    assert isinstance(sampler, AutoTier1Sampler)

    def score(params: dict) -> float:
        # A made-up objective, no user attrs: LL helps, tp 2 fails.
        return 100.0 + 10 * (params["NCCL_PROTO"] == "LL") + params["speculative_num_steps"]

    def objective(trial: optuna.Trial) -> float:
        params = space.suggest(trial)
        failed = params["tp_size"] == 2
        trial.set_constraint("failed", 1.0 if failed else 0.0)
        return 0.0 if failed else score(params)

    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(objective, n_trials=9)
    got = [sampler.table.configs[sampler.trial_index(t)] for t in study.trials]
    assert [(c["tp_size"], c["NCCL_PROTO"]) for c in got[:3]] == [(8, None), (2, None), (8, "LL")]
    # No baseline data: the base trials' objective picks the group (LL), the failed one is out.
    assert all((c["tp_size"], c["NCCL_PROTO"]) == (8, "LL") for c in got[3:6])
    assert [triple(c) for c in got[3:6]] == [(1, 1, 2), (2, 1, 3), (3, 2, 4)]
    assert len({sampler.trial_index(t) for t in study.trials}) == 9


def test_trials_in_flight_do_not_block_or_repeat(plain_path):
    space = load_space(plain_path)
    sampler = AutoTier1Sampler(space, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    asked = [study.ask() for _ in range(5)]  # none told yet
    for t in asked:
        space.suggest(t)
    idx = [sampler.trial_index(study._storage.get_trial(t._trial_id)) for t in asked]
    assert len(set(idx)) == 5
    assert idx[:3] == sampler.base_plan
    # Nothing has finished: the speculative stage starts on the first base candidate's group.
    first_group = int(sampler.table.group[sampler.base_plan[0]])
    assert idx[3:] == sampler.spec_plan(first_group)[:2]


def test_registry_names(fixed_path):
    # The peers are the benchmark's: the product's sampler registry does not know them.
    assert set(PEER_SAMPLERS) == set(AUTO_TIERS) and not set(AUTO_TIERS) & set(SAMPLER_NAMES)
    assert all(n == n.lower() and "_" not in n for n in (*SAMPLER_NAMES, *PEER_SAMPLERS))
    with pytest.raises(ValueError, match="unknown sampler"):
        make_sampler("auto-tier1", seed=0, space=load_space(fixed_path))


def test_a_space_naming_a_peer_is_pointed_at_the_benchmark(tmp_path, fixed_path):
    from autotune.errors import ConfigError

    text = Path(fixed_path).read_text()
    assert "search:" not in text  # the fixture leaves the sampler to its default
    bad = tmp_path / "peer.yaml"
    bad.write_text(text + "search: {sampler: auto-tier1}\n")
    with pytest.raises(ConfigError, match=r"auto-tier1 is a peer strategy for the sampler benchmark "
                                          r"\(python -m autotune.bench_search\), not a product sampler"):
        load_space(bad)


# ----------------------------------------------------------------------------- bench_search

def test_bench_search_runs_the_tiers_and_sets_ours_against_the_best_peer(fixed_path):
    assert set(AUTO_TIERS) <= set(STRATEGIES) and set(PEERS) <= set(STRATEGIES)
    names = ["random", "tpe", "auto-tier1", "auto-tier2", OURS]
    out = benchmark(fixed_path, seeds=3, budget=16, strategies=names)
    assert list(out) == names
    for name in AUTO_TIERS:
        s = out[name]
        hits = [h for h in s["trials_to_target"] if h is not None]
        assert all(1 <= h <= 16 for h in hits)
        assert sum(s["reached_by"].values()) == len(hits)
        assert set(s["reached_by"]) <= {"base", "speculative", "random"}
        assert s["mean_duplicates"] == 0  # 16 trials are far fewer than the space's configs
    ours = out[OURS]
    medians = {p: out[p]["median"] for p in PEERS if out[p]["median"] is not None}
    if medians:
        best = min(medians.values())
        assert ours["best_peer_median"] == best and out[ours["best_peer"]]["median"] == best
        if ours["median"]:
            assert ours["times_fewer_than_best_peer"] == pytest.approx(best / ours["median"])
    else:
        assert ours["best_peer"] is None and ours["times_fewer_than_best_peer"] is None
    text = render(out)
    assert "against the best of random, tpe, auto-tier1, auto-tier2" in text
    for name in AUTO_TIERS:
        assert f"{name}: reached the target inside its own plan in" in text


@pytest.mark.slow  # 7 s at load ~8 (make test-fast leaves it out)
def test_cli_default_strategies_include_the_tiers(fixed_path):
    proc = subprocess.run([sys.executable, "-m", "autotune.bench_search", "--space", fixed_path,
                           "--seeds", "2", "--budget", "10", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == list(STRATEGIES)
    assert out[OURS]["peers"] == list(PEERS)


@pytest.mark.parametrize("name", AUTO_TIERS)
def test_a_float_without_step_is_a_config_error(tmp_path, name):
    from autotune.errors import ConfigError

    text = PLAIN.replace("fixed_args: {tp_size: 1, mem_fraction_static: 0.8}",
                         "fixed_args: {tp_size: 1}").replace(
        "parameters:\n", "parameters:\n  mem_fraction_static: {type: float, low: 0.7, high: 0.9}\n")
    space = load_space(write(tmp_path, text, "float.yaml"))
    with pytest.raises(ConfigError, match="mem_fraction_static"):
        make_strategy(name, seed=0, space=space)


def test_sampler_pickles_mid_study(fixed_path):
    """Ray checkpoints the searcher: a restored sampler goes on with the same plan."""
    import pickle

    problem = load_problem(fixed_path)
    sampler = AutoTier2Sampler(problem.space, seed=1)
    study, _ = drive(problem, sampler, seed=1, trials=6)
    restored = pickle.loads(pickle.dumps(sampler))
    again = optuna.create_study(direction="maximize", sampler=restored)
    again.add_trials(study.trials)
    trial = again.ask()
    plan = again._storage.get_trial(trial._trial_id).system_attrs[PLAN_KEY]
    done = {sampler.trial_index(t) for t in study.trials}
    assert plan["index"] not in done
    nxt = study.ask()  # the original sampler, same history
    assert study._storage.get_trial(nxt._trial_id).system_attrs[PLAN_KEY] == plan


def test_best_peer_bounds_and_wording(fixed_path):
    from benchmarks.search.strategies import best_peer

    out = benchmark(fixed_path, seeds=2, budget=8, strategies=["random", "auto-tier1", OURS])
    for name, median in (("random", None), ("auto-tier1", None), (OURS, 4.0)):
        out[name]["median"] = median
    got = best_peer(out, budget=8)
    assert got["best_peer"] is None and got["times_fewer_than_best_peer"] is None
    assert got["times_fewer_than_best_peer_above"] == pytest.approx(8 / 4.0)
    out[OURS].update(got)
    assert "none has a median within the budget of 8, so > 2.00x fewer trials" in render(out)
    out["random"]["median"], out["auto-tier1"]["median"] = 3.0, 3.0
    got = best_peer(out, budget=8)
    assert got["best_peer"] == "random"  # a tie goes to the first peer listed
    assert got["times_fewer_than_best_peer"] == pytest.approx(0.75)
    out[OURS].update(got)
    assert "1.33x more trials (ours is behind)" in render(out)
