"""PhaseModelSampler and the samplers registry: fitting pieces on synthetic data, and the sampler
driven through real Optuna studies on small spaces of the emulator's performance model."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.samplers import RandomSampler, TPESampler

from autotune.search.samplers import (
    SAMPLER_NAMES,
    GridOrderSampler,
    PhaseModelSampler,
    _blr,
    make_sampler,
)
from autotune.search.samplers._acceptance import AcceptancePredictor as AcceptanceModel
from autotune.search.samplers._acceptance import AcceptObs
from autotune.search.samplers._candidates import CandidateTable
from autotune.search.samplers._fit import Settings, predict
from autotune.search.samplers._observations import Observation, read_observation
from autotune.search.samplers.phase_model import expected_improvement
from autotune.space.search_space import load_space
from autotune.space.trial_config import config_key
from benchmarks.search.problem import Oracle, load_problem

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

TINY = """\
name: tiny
backend: sim
profile: {profile}
model_path: sim/target
draft_model_path: sim/draft
fixed_args:
  speculative_algorithm: EAGLE3
  {fixed}
parameters:
  speculative_num_steps: {{type: int, low: 1, high: 5}}
  speculative_eagle_topk: {{type: categorical, choices: [1, 4]}}
  speculative_num_draft_tokens: {{type: int, low: 2, high: 14, step: 4}}
{extra}
workload: {{source: builtin, num_prompts: 4, warmup_prompts: 1, output_len: 128, concurrency: 1,
           seed: 0}}
"""


def tiny_space(tmp_path: Path, *, profile: str = "llama-3.1-8b-eagle3-h100",
               fixed: str = "tp_size: 1",
               extra: str = "  attention_backend: {type: categorical, choices: [triton, fa3]}",
               name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(TINY.format(profile=profile, fixed=fixed, extra=extra))
    return path


def drive(problem, sampler, *, seed: int, trials: int, phase_data: bool = True):
    """Run ``trials`` Optuna trials of ``sampler`` against the noisy evaluator; return the params
    proposed and the oracle."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    oracle = Oracle(problem, seed=seed, noise_cv=0.02, phase_data=phase_data)
    proposed = []
    for _ in range(trials):
        trial = study.ask()
        params = problem.space.suggest(trial)
        proposed.append(params)
        oracle.run(params).tell(study, trial, maximize=True)
    return proposed, oracle, study


# ----------------------------------------------------------------------------- fitting pieces

def test_blr_recovers_a_line_and_pins_negative_coefficients():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, 40)
    X = np.stack([np.ones_like(x), x], axis=1)
    post = _blr.fit(X, 2.0 + 0.5 * x + rng.normal(0, 0.01, 40), 0.01,
                    prior_mean=np.zeros(2), prior_sd=np.full(2, 10.0))
    assert post.mean == pytest.approx([2.0, 0.5], abs=0.02)
    # A falling curve with a "must not fall" coefficient gets that coefficient pinned at zero.
    pinned = _blr.fit(X, 5.0 - 0.3 * x, 0.01, prior_mean=np.zeros(2),
                      prior_sd=np.full(2, 10.0), nonneg=np.array([False, True]))
    assert pinned.mean[1] == 0.0
    mu, var = pinned.predict(X[:3])
    assert np.all(var >= 0) and mu.shape == (3,)
    with pytest.raises(ValueError):
        _blr.fit(X, x, 0.1, prior_mean=np.zeros(2), prior_sd=np.zeros(2))


def synthetic_histogram(model: AcceptanceModel, theta, steps, topk, draft, cycles=4000):
    reach = model.reach([steps], [topk], [draft], theta)[0]
    tail = np.concatenate([[1.0], reach, [0.0]])
    probs = tail[:-1] - tail[1:]
    return tuple(np.round(probs * cycles)), 1.0 + reach.sum()


@pytest.mark.parametrize("theta", [[0.3, -0.45, 0.3, -0.2, 0.1],    # MoE-like, fast decay
                                   [1.3, -0.12, 0.0, 0.3, 0.5]])   # dense, slow decay
def test_acceptance_fit_recovers_accept_lengths_it_never_saw(theta):
    truth = AcceptanceModel(10, 8)
    theta = np.array(theta)
    obs = []
    for steps, topk, draft in [(2, 1, 3), (8, 1, 9), (4, 8, 24)]:
        hist, mean = synthetic_histogram(truth, theta, steps, topk, draft)
        obs.append(AcceptObs(steps, topk, draft, mean, hist))
    fitted = AcceptanceModel(10, 8)
    fitted.fit(obs)
    unseen = [(1, 1, 2), (5, 1, 6), (6, 4, 20), (3, 8, 16), (10, 8, 60)]
    S, K, N = map(np.array, zip(*unseen, strict=True))
    want = truth.mean(S, K, N, theta)
    got, var = fitted.predict(S, K, N)
    assert np.all(np.abs(got / want - 1) < 0.03), (got, want)
    assert np.all(var >= 0)


def test_acceptance_fit_from_accept_lengths_alone():
    truth = AcceptanceModel(8, 4)
    theta = np.array([0.8, -0.2, 0.2, 0.0, 0.0])
    obs = [AcceptObs(s, k, n, float(truth.mean([s], [k], [n], theta)[0]), None)
           for s, k, n in [(1, 1, 2), (3, 1, 4), (6, 1, 7), (3, 4, 10)]]
    fitted = AcceptanceModel(8, 4)
    fitted.fit(obs)
    got = fitted.mean([4], [1], [5])[0]
    assert got == pytest.approx(truth.mean([4], [1], [5], theta)[0], rel=0.04)


def test_acceptance_grows_with_depth_and_width():
    m = AcceptanceModel(8, 8)
    chain = m.mean([1, 2, 4, 8], [1, 1, 1, 1], [2, 3, 5, 9])
    assert np.all(np.diff(chain) > 0)
    tree = m.mean([4, 4, 4], [8, 8, 8], [5, 10, 20])
    assert np.all(np.diff(tree) > 0)
    assert m.mean([4], [1], [5])[0] == pytest.approx(tree[0], rel=0.2)


def test_expected_improvement_is_monotone_in_mean_and_spread():
    ei = expected_improvement(np.array([0.0, 0.1, 0.2]), np.full(3, 0.05), 0.1)
    assert np.all(np.diff(ei) > 0)
    wide = expected_improvement(np.zeros(3), np.array([0.01, 0.05, 0.2]), 0.1)
    assert np.all(np.diff(wide) > 0)
    assert expected_improvement(np.array([1.0]), np.array([0.0]), 0.5)[0] == pytest.approx(0.5)


# ----------------------------------------------------------------------------- candidates

def test_candidate_table_reads_the_space(tmp_path):
    space = load_space(tiny_space(tmp_path))
    table = CandidateTable(space)
    assert len(table) == space.count()
    assert table.physics.all() and table.spec.all()
    assert len(table.groups) == 2
    for i, cfg in enumerate(table.configs):
        assert table.steps[i] == cfg["speculative_num_steps"]
        assert table.draft[i] == cfg["speculative_num_draft_tokens"]
        if cfg["speculative_eagle_topk"] == 1:
            assert table.draft[i] == table.steps[i] + 1
        assert table.find(cfg) == i
    # A topk-1 config is found without its derived draft-token count.
    cfg = next(c for c in table.configs if c["speculative_eagle_topk"] == 1)
    partial = {k: v for k, v in cfg.items() if k != "speculative_num_draft_tokens"}
    assert table.configs[table.find(partial)] == cfg
    # Changing only the attention backend is one step away.
    i = 0
    j = next(k for k, c in enumerate(table.configs)
             if config_key({**table.configs[0], "attention_backend": c["attention_backend"]})
             == config_key(c) and c["attention_backend"] != table.configs[0]["attention_backend"])
    assert table.distance(i)[j] == 1
    assert table.distance(i)[i] == 0


# ----------------------------------------------------------------------------- the sampler

def test_finds_the_optimum_of_a_small_space_quickly(tmp_path):
    problem = load_problem(str(tiny_space(tmp_path)))
    size = len(problem.configs)
    hits = []
    for seed in range(3):
        sampler = PhaseModelSampler(problem.space, seed=seed)
        _, oracle, _ = drive(problem, sampler, seed=seed, trials=12)
        hits.append(oracle.success_at)
    assert all(h is not None for h in hits), hits
    assert max(hits) <= 9 < size / 3, hits


def test_never_proposes_a_config_twice_and_proposals_are_valid(tmp_path):
    problem = load_problem(str(tiny_space(tmp_path)))
    space = problem.space
    sampler = PhaseModelSampler(space, seed=3)
    proposed, _, study = drive(problem, sampler, seed=3, trials=30)
    keys = [config_key(p) for p in proposed]
    assert len(set(keys)) == len(keys)
    valid = {config_key(c) for c in space.enumerate()}
    for params in proposed:
        assert space.validate_config(params) is None
        assert config_key(params) in valid
    reasons = {t.number: t.system_attrs.get("autotune:plan") for t in study.trials}
    assert all(plan is not None for plan in reasons.values())


def test_exhausting_the_space_then_falls_back(tmp_path):
    problem = load_problem(str(tiny_space(tmp_path, extra="")))
    n = len(problem.configs)
    sampler = PhaseModelSampler(problem.space, seed=0)
    proposed, _, _ = drive(problem, sampler, seed=0, trials=n + 2)
    assert len({config_key(p) for p in proposed[:n]}) == n
    assert sampler.last_reason == "exhausted"


def test_designed_start_is_short_chain_long_chain_wide_tree(tmp_path):
    space = load_space(tiny_space(tmp_path))
    sampler = PhaseModelSampler(space, seed=0)
    design = [sampler.table.configs[i] for i in sampler.design()]
    assert [(c["speculative_num_steps"], c["speculative_eagle_topk"]) for c in design[:2]] == \
        [(2, 1), (5, 1)]
    tree = design[2]
    assert tree["speculative_eagle_topk"] == 4
    assert tree["speculative_num_draft_tokens"] == max(
        c["speculative_num_draft_tokens"] for c in space.enumerate()
        if c["speculative_eagle_topk"] == 4
        and c["speculative_num_steps"] == tree["speculative_num_steps"])
    assert len({c["attention_backend"] for c in design}) == 1


def test_skip_rule_applies_from_a_speculative_run_before_the_design(tmp_path):
    """A speculative config run before the design (the warm start) gives the model a point to
    fit: the designed configs it already rules out are skipped from the first plan on, not only
    after a designed config ran. With a skip margin that rules out everything, the first plan is
    the model's; with none, the design runs."""
    problem = load_problem(str(tiny_space(tmp_path, extra="")))
    for skip_z, first in ((-1e6, "model"), (None, "design")):
        sampler = PhaseModelSampler(problem.space, seed=0, skip_z=skip_z)
        table = sampler.table
        warm = next(i for i in range(len(table)) if table.physics[i] and i not in sampler.design())
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.enqueue_trial(table.configs[warm])
        oracle = Oracle(problem, seed=0, noise_cv=0.02)
        reasons = []
        for _ in range(2):
            trial = study.ask()
            oracle.run(problem.space.suggest(trial)).tell(study, trial, maximize=True)
            reasons.append(sampler.last_reason)
        assert sampler.trial_index(study.trials[0]) == warm
        assert reasons[1] == first, (skip_z, reasons)


def test_long_chain_is_dropped_when_a_run_already_drafted_as_deep(tmp_path):
    """The design's long chain pins the acceptance at the deepest steps; after a warm start that
    drafted as deep (a tree at the most steps), the design runs without it. After a shallower
    warm start it still runs."""
    problem = load_problem(str(tiny_space(tmp_path, extra="")))
    for deep in (True, False):
        sampler = PhaseModelSampler(problem.space, seed=0, skip_z=None)
        table = sampler.table
        long_chain = sampler.design()[1]
        depth = int(table.steps[long_chain]) if deep else int(table.steps[long_chain]) - 1
        warm = next(i for i in range(len(table)) if table.physics[i] and table.topk[i] > 1
                    and table.steps[i] == depth and i not in sampler.design())
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.enqueue_trial(table.configs[warm])
        oracle = Oracle(problem, seed=0, noise_cv=0.02)
        for _ in range(4):
            trial = study.ask()
            oracle.run(problem.space.suggest(trial)).tell(study, trial, maximize=True)
        designed = [sampler.trial_index(t) for t in study.trials
                    if (t.system_attrs.get("autotune:plan") or {}).get("reason") == "design"]
        assert (long_chain in designed) is not deep, (deep, designed)
        assert set(designed) <= set(sampler.design())


def test_without_phase_data_it_behaves_like_tpe(tmp_path):
    problem = load_problem(str(tiny_space(tmp_path)))
    sampler = PhaseModelSampler(problem.space, seed=1)
    proposed, oracle, _ = drive(problem, sampler, seed=1, trials=15, phase_data=False)
    assert sampler.last_reason == "no phase data: fallback"
    assert isinstance(sampler._fallback, TPESampler)
    for params in proposed:
        assert problem.space.validate_config(params) is None
    assert oracle.trials >= 15


def test_plain_study_optimize_without_user_attrs(tmp_path):
    space = load_space(tiny_space(tmp_path))
    sampler = make_sampler("phase-model", seed=0, space=space)

    def objective(trial):
        params = space.suggest(trial)
        return float(params["speculative_num_steps"] * params["speculative_eagle_topk"])

    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(objective, n_trials=12)
    assert len(study.trials) == 12
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


def test_constrained_study_with_set_constraint(tmp_path):
    """Failures reported as violated constraints: the sampler steers away from what fails."""
    space = load_space(tiny_space(tmp_path, profile="kimi-k2.5-eagle3-tp8",
                                  fixed="mem_fraction_static: 0.85",
                                  extra="  tp_size: {type: categorical, choices: [4, 8]}"))
    problem = load_problem(str(space.file))
    sampler = PhaseModelSampler(space, seed=0)
    proposed, oracle, study = drive(problem, sampler, seed=0, trials=14)
    assert proposed[0]["tp_size"] == 8  # the designed start takes the largest TP
    # TP 4 cannot hold Kimi's weights: after the first failure, no more TP 4 proposals.
    first_fail = next((i for i, p in enumerate(proposed) if p["tp_size"] == 4), None)
    assert first_fail is not None  # an untried TP is worth one look...
    assert all(p["tp_size"] == 8 for p in proposed[first_fail + 1:])  # ...and only one
    assert oracle.failed == 2  # the TP 4 baseline and the TP 4 config
    failed = [t for t in study.trials if t.constraints.get("failed", 0) > 0]
    assert len(failed) == 1 and failed[0].user_attrs["baseline_status"] == "failed"
    assert failed[0].user_attrs["failure"] == "oom"  # the kind reaches the sampler
    assert read_observation(failed[0], None).failure == "oom"


def test_reads_observations_with_missing_keys():
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    trial.suggest_int("speculative_num_steps", 1, 3)
    trial.set_user_attr("phases", {"cycle_ms": None, "draft_ms": 1.0})
    trial.set_user_attr("accept_length", None)
    trial.set_constraint("break_even", 0.2)
    study.tell(trial, 10.0)
    obs = read_observation(study.trials[0], None)
    assert obs.status == "infeasible"
    assert obs.value == 10.0
    assert obs.accept_length is None and obs.phases["cycle_ms"] is None
    assert not obs.has_phase_data

    t2 = study.ask()
    t2.set_user_attr("objective_unmeasured", True)
    t2.set_constraint("failed", 1.0)
    study.tell(t2, 0.0)
    failed = read_observation(study.trials[1], None)
    assert failed.status == "failed" and failed.value is None and not failed.ok


def test_failed_baseline_rules_out_its_group(tmp_path):
    space = load_space(tiny_space(tmp_path))
    table = CandidateTable(space)
    i = 0
    g = table.group[i]
    obs = [Observation(number=0, index=i, status="failed", value=None, baseline_failed=True)]
    pred = predict(table, obs, AcceptanceModel(5, 4), Settings())
    assert np.all(pred.p_fail[table.group == g] == 1.0)
    other = table.group != g
    assert np.all(pred.p_fail[other] < 1.0)


def test_failure_blame_is_explained_away(tmp_path):
    """Two start-up failures share one suspect (TP 2): it takes the blame, and the other value
    of the first failure (fa3), which merely ran with it, is cleared. Shared equally, fa3 would
    keep half of the first failure's blame (p_fail 0.475) and hide the configs that use it."""
    space = load_space(tiny_space(
        tmp_path, fixed="mem_fraction_static: 0.85",
        extra=("  tp_size: {type: categorical, choices: [1, 2]}\n"
               "  attention_backend: {type: categorical, choices: [triton, fa3]}")))
    table = CandidateTable(space)

    def index(tp, backend):
        return next(i for i, c in enumerate(table.configs) if table.spec[i]
                    and c["tp_size"] == tp and c["attention_backend"] == backend)

    ok = Observation(number=0, index=index(1, "triton"), status="feasible", value=100.0)
    first = Observation(number=1, index=index(2, "fa3"), status="failed", value=None,
                        baseline_failed=True)
    second = Observation(number=2, index=index(2, "triton"), status="failed", value=None,
                         baseline_failed=True)
    fa3_tp1 = (table.coords[:, [d.name for d in table.dims].index("tp_size")] == 0) & np.array(
        [c["attention_backend"] == "fa3" for c in table.configs])
    one = predict(table, [ok, first], AcceptanceModel(5, 4), Settings())
    assert np.allclose(one.p_fail[fa3_tp1], 0.475)  # one failure, two suspects: even shares
    both = predict(table, [ok, first, second], AcceptanceModel(5, 4), Settings())
    assert np.all(both.p_fail[fa3_tp1] < 0.05), both.p_fail[fa3_tp1]
    assert np.all(both.p_fail[np.array([c["tp_size"] == 2 for c in table.configs])] == 1.0)


def test_phase_fit_predicts_unseen_configs(tmp_path):
    """After the designed start, the model ranks the space close to the truth."""
    problem = load_problem(str(tiny_space(tmp_path, extra="")))
    sampler = PhaseModelSampler(problem.space, seed=0)
    _, _, study = drive(problem, sampler, seed=0, trials=4)
    table = sampler.table
    obs = [read_observation(t, sampler.trial_index(t)) for t in study.trials]
    pred = predict(table, obs, sampler._accept or AcceptanceModel(5, 4), sampler.settings)
    assert pred.physics_ready
    true = np.array([problem.truth(c)["output_tok_s"] for c in table.configs])
    err = np.abs(np.exp(pred.mu) / true - 1)
    assert np.median(err) < 0.05, np.sort(err)
    assert true[int(np.argmax(pred.mu))] >= 0.95 * true.max()


# ----------------------------------------------------------------------------- registry, grid

def test_make_sampler_names(tmp_path):
    space = load_space(tiny_space(tmp_path))
    assert isinstance(make_sampler("tpe", seed=0, space=space), TPESampler)
    assert isinstance(make_sampler("random", seed=0, space=space), RandomSampler)
    assert isinstance(make_sampler("grid", seed=0, space=space), GridOrderSampler)
    assert isinstance(make_sampler("phase-model", seed=0, space=space), PhaseModelSampler)
    assert set(SAMPLER_NAMES) == {"tpe", "random", "grid", "phase-model"}
    with pytest.raises(ValueError, match="phase-model"):
        make_sampler("cmaes", seed=0, space=space)
    with pytest.raises(ValueError):
        PhaseModelSampler(None)


def test_grid_order_follows_bench_speculative(tmp_path):
    space = load_space(tiny_space(tmp_path))
    sampler = GridOrderSampler(space, seed=0)
    configs = [sampler.table.configs[i] for i in sampler.order]
    assert len(configs) == space.count()
    backends = [c["attention_backend"] for c in configs]
    half = len(configs) // 2
    assert set(backends[:half]) == {"triton"} and set(backends[half:]) == {"fa3"}
    keys = [(c["speculative_num_steps"], c["speculative_eagle_topk"],
             c["speculative_num_draft_tokens"]) for c in configs[:half]]
    assert keys == sorted(keys)
    proposed, _, _ = drive(load_problem(str(space.file)), sampler, seed=0, trials=6)
    assert proposed == configs[:len(proposed)]


def test_sampler_pickles_mid_study(tmp_path):
    """Ray checkpoints the searcher, sampler included: a restored sampler keeps planning."""
    import pickle

    problem = load_problem(str(tiny_space(tmp_path)))
    sampler = PhaseModelSampler(problem.space, seed=0)
    _, _, study = drive(problem, sampler, seed=0, trials=5)
    restored = pickle.loads(pickle.dumps(sampler))
    again = optuna.create_study(direction="maximize", sampler=restored)
    again.add_trials(study.trials)  # the same history, as a restored Ray searcher has it
    trial = again.ask()
    plan = again._storage.get_trial(trial._trial_id).system_attrs["autotune:plan"]
    assert plan["reason"] in ("model", "neighbour")
    done = {restored.trial_index(t) for t in study.trials}
    assert len(done) == 5 and plan["index"] not in done


def test_a_continuous_float_parameter_is_a_clear_config_error(tmp_path):
    from autotune.errors import ConfigError

    path = tiny_space(tmp_path, extra="  mem_fraction_static: {type: float, low: 0.7, high: 0.9}")
    space = load_space(path)
    for name in ("phase-model", "grid"):
        with pytest.raises(ConfigError) as err:
            make_sampler(name, seed=0, space=space)
        assert "mem_fraction_static" in str(err.value) and "step" in str(err.value)
        assert str(path) in str(err.value)
    assert isinstance(make_sampler("tpe", seed=0, space=space), TPESampler)


def test_out_of_memory_blames_the_tp_and_every_smaller_one(tmp_path):
    """A baseline that runs out of memory at TP 4 beside an NCCL value never seen either: memory
    per GPU is sized by the server's arguments, not NCCL's environment, so TP 4 takes the whole
    blame (Ring stays free to try at TP 8), and TP 2, which holds even more per GPU, inherits it.
    Another kind of failure keeps the even shares (Ring half to blame, TP 2 untouched)."""
    space = load_space(tiny_space(
        tmp_path, fixed="mem_fraction_static: 0.85",
        extra=("  tp_size: {type: categorical, choices: [2, 4, 8]}\n"
               "  NCCL_ALGO: {type: categorical, choices: [null, Ring]}")))
    table = CandidateTable(space)
    tp = np.array([c["tp_size"] for c in table.configs])
    ring = np.array([c.get("NCCL_ALGO") == "Ring" for c in table.configs])

    def index(tp_size, algo):
        return next(i for i, c in enumerate(table.configs) if table.spec[i]
                    and c["tp_size"] == tp_size and c.get("NCCL_ALGO") == algo)

    ok = Observation(number=0, index=index(8, None), status="feasible", value=100.0)

    def failed(kind):
        return Observation(number=1, index=index(4, "Ring"), status="failed", value=None,
                           baseline_failed=True, failure=kind)

    oom = predict(table, [ok, failed("oom")], AcceptanceModel(5, 4), Settings())
    assert np.all(oom.p_fail[(tp == 8) & ring] == 0.0)  # Ring is cleared
    assert np.allclose(oom.p_fail[(tp == 4) & ~ring], 0.95)  # TP 4 alone to blame
    assert np.allclose(oom.p_fail[tp == 2], 0.95)  # a smaller TP needs more memory per GPU
    crash = predict(table, [ok, failed("crash_at_start")], AcceptanceModel(5, 4), Settings())
    assert np.allclose(crash.p_fail[(tp == 8) & ring], 0.475)
    assert np.allclose(crash.p_fail[(tp == 4) & ~ring], 0.475)
    assert np.all(crash.p_fail[(tp == 2) & ~ring] == 0.0)


def test_after_a_fitted_warm_start_the_design_runs_in_the_model_s_order(tmp_path):
    """The fixed design order (short chain, long chain, wide tree) is for a study with nothing to
    fit. After a speculative run the model can fit (SGLang's default 3/1/4 as the warm start), the
    designed configs left run in the order of the model's acquisition: here the wide tree, whose
    top-k > 1 acceptance the chain run leaves the least known, comes before both chains."""
    problem = load_problem(str(tiny_space(tmp_path, extra="")))
    for seed in range(3):
        sampler = PhaseModelSampler(problem.space, seed=seed)
        table = sampler.table
        tree = sampler.design()[2]
        warm = next(i for i in range(len(table)) if table.physics[i] and
                    (table.steps[i], table.topk[i], table.draft[i]) == (3, 1, 4))
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.enqueue_trial(table.configs[warm])
        oracle = Oracle(problem, seed=seed, noise_cv=0.02)
        for _ in range(2):
            trial = study.ask()
            oracle.run(problem.space.suggest(trial)).tell(study, trial, maximize=True)
        assert sampler.trial_index(study.trials[0]) == warm
        assert sampler.last_reason == "design"
        assert sampler.trial_index(study.trials[1]) == tree, (
            seed, table.configs[sampler.trial_index(study.trials[1])])
