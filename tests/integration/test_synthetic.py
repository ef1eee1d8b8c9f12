"""Synthetic acceptance (``synthetic_acceptance:``), the stable warm-up and the robust spread.

The model is checked against sums written out here; the space, the trial, MLflow and the export
are checked on real emulator servers and a real MLflow store.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli.export import main as export_main
from autotune.errors import ConfigError
from autotune.space import synthetic
from autotune.space.search_space import load_space
from autotune.tracking.tracker import Tracker
from autotune.trial.result import TrialResult, spread_pct

REPO = Path(__file__).resolve().parents[2]
RATES = [0.8, 0.7, 0.6, 0.5]

SPACE = """\
name: synthetic-{tag}
backend: sim
profile: llama-3.1-8b-eagle3-h100
model_path: sim/llama
draft_model_path: sim/draft
fixed_args: {{speculative_algorithm: EAGLE3}}
parameters:
  speculative_num_steps: {{type: int, low: 1, high: 4}}
  speculative_eagle_topk: {{type: categorical, choices: [1, 2]}}
  speculative_num_draft_tokens: {{type: int, low: 2, high: 8}}
synthetic_acceptance:
  rates: {rates}
workload: {{num_prompts: 2, warmup_prompts: 1, output_len: 24, concurrency: 1, seed: 0}}
measure: {{repeats: 2, startup_timeout_s: 60{measure}}}
"""


def write(tmp_path: Path, *, tag: str = "a", rates: str = str(RATES), measure: str = "",
          extra: str = "") -> Path:
    path = tmp_path / f"{tag}.yaml"
    path.write_text(SPACE.format(tag=tag, rates=rates, measure=measure) + extra)
    return path


def chain(rates, steps):
    total, reach = 1.0, 1.0
    for r in rates[:steps]:
        reach *= r
        total += reach
    return total


# ---------------------------------------------------------------------------------- the model

@pytest.mark.parametrize("steps", [1, 2, 3, 4])
def test_a_chain_accepts_the_running_products_of_the_rates(steps):
    model = synthetic.SyntheticAcceptance(tuple(RATES))
    got = model.accept_length(steps=steps, topk=1, draft_tokens=steps + 1)
    assert got == pytest.approx(chain(RATES, steps))
    assert 1.0 < got <= steps + 1


def test_a_tree_spends_spare_nodes_on_the_shallowest_depths():
    model = synthetic.SyntheticAcceptance(tuple(RATES))
    # 2 steps, topk 2, 4 draft tokens: 3 nodes; one per depth, the spare one at depth 1.
    first = 1 - (1 - 0.8) ** 2
    assert model.accept_length(steps=2, topk=2, draft_tokens=4) == pytest.approx(
        1 + first + first * 0.7)
    # Too few nodes for the steps: the tree is as deep as its nodes, not as its steps.
    assert model.accept_length(steps=4, topk=2, draft_tokens=3) == pytest.approx(chain(RATES, 2))
    # More nodes never hurt, and a tree never accepts past steps + 1.
    lengths = [model.accept_length(steps=3, topk=2, draft_tokens=n) for n in range(2, 8)]
    assert lengths == sorted(lengths)
    perfect = synthetic.SyntheticAcceptance((1.0, 1.0, 1.0))
    assert perfect.accept_length(steps=3, topk=2, draft_tokens=7) == 4.0


@pytest.mark.parametrize("rates, message", [
    ((), "at least one"), ((0.5, 0.0), "rates[1]"), ((1.2,), "rates[0]"),
    ((float("nan"),), "rates[0]"), ((True,), "rates[0]"),
])
def test_rates_must_be_probabilities(rates, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        synthetic.SyntheticAcceptance(rates)


def test_more_steps_than_rates_is_an_error():
    with pytest.raises(ValueError, match="2 draft positions"):
        synthetic.SyntheticAcceptance((0.8, 0.7)).accept_length(steps=3, topk=1, draft_tokens=4)


def test_forced_length_is_read_as_sglang_reads_it():
    assert synthetic.forced_accept_length({synthetic.ENV: "2.5"}) == 2.5
    for off in ({}, None, {synthetic.ENV: "0"}, {synthetic.ENV: "-1"}, {synthetic.ENV: "x"},
                {synthetic.ENV: "inf"}):
        assert synthetic.forced_accept_length(off) is None
    assert synthetic.acceptance_source({synthetic.ENV: "3"}, speculative=True) == "synthetic"
    assert synthetic.acceptance_source({}, speculative=True) == "measured"
    assert synthetic.acceptance_source({synthetic.ENV: "3"}, speculative=False) is None


# ---------------------------------------------------------------------------------- the space

def test_every_speculative_config_gets_the_length_of_its_shape(tmp_path):
    space = load_space(write(tmp_path))
    model = synthetic.SyntheticAcceptance(tuple(RATES))
    seen = set()
    for params in space.enumerate():
        cfg = space.trial_config(params)
        want = model.accept_length(steps=params["speculative_num_steps"],
                                   topk=params["speculative_eagle_topk"],
                                   draft_tokens=params["speculative_num_draft_tokens"])
        assert cfg.env[synthetic.ENV] == f"{want:.3f}"
        seen.add(cfg.env[synthetic.ENV])
        base = space.trial_config(space.baseline_params(params))
        assert synthetic.ENV not in base.env and base.group_key() == cfg.group_key()
    assert len(seen) > 5  # the forced value follows the config: no free parameter that always wins


@pytest.mark.parametrize("rates, extra, needle", [
    ("[0.8, 0.7]", "", "speculative_num_steps goes up to 4"),
    ("[0.8, 1.5, 0.6, 0.5]", "", "rates[1]"),
    ("0.8", "", "list"),
    ("[0.8, 0.7, 0.6, 0.5]\n  scale: 2", "", "unknown key 'scale'"),
    ("[0.8, 0.7, 0.6, 0.5]", "fixed_env: {SGLANG_SIMULATE_ACC_LEN: '3'}\n", "fixed_env sets"),
])
def test_bad_sections_name_file_line_and_fix(tmp_path, rates, extra, needle):
    path = write(tmp_path, rates=rates, extra=extra)
    with pytest.raises(ConfigError) as info:
        load_space(path)
    text = str(info.value)
    assert text.startswith(f"{path}:") and "synthetic_acceptance" in text
    assert needle in text
    line = int(text.split(":")[1])
    assert "synthetic_acceptance" in path.read_text().splitlines()[line - 1] or \
        "rates" in path.read_text().splitlines()[line - 1]


def test_a_searched_forced_length_is_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(SPACE.format(tag="p", rates=str(RATES), measure="").replace(
        "  speculative_num_draft_tokens: {type: int, low: 2, high: 8}\n",
        "  speculative_num_draft_tokens: {type: int, low: 2, high: 8}\n"
        "  SGLANG_SIMULATE_ACC_LEN: {type: categorical, choices: ['2', '3']}\n"))
    with pytest.raises(ConfigError, match="parameters sets SGLANG_SIMULATE_ACC_LEN"):
        load_space(path)


# ------------------------------------------------------------------ spread and warm-up helpers

def test_spread_is_robust_to_one_outlier_and_the_range_is_not():
    robust, rng = spread_pct([100.0, 101.0, 99.0, 100.0, 140.0])
    assert robust == pytest.approx(100 * 1.4826 * 1.0 / 100.0)
    assert rng == pytest.approx(41.0)
    assert spread_pct([5.0]) == (None, None)


# --------------------------------------------------------- end to end: trial, MLflow, export

@pytest.fixture(scope="module")
def flag_table(installed_flag_table) -> Path:
    """The installed SGLang's flags as a table (tests/conftest.py writes it once a session): each
    trial and emulator process then skips importing SGLang's parser (seconds of CPU each on a
    2-core box)."""
    return installed_flag_table


def _trial(space: Path, params: dict, tmp_path: Path, table: Path) -> dict:
    env = dict(os.environ, AUTOTUNE_SIM_STARTUP_S="0.2", AUTOTUNE_SGLANG_FLAG_TABLE=str(table))
    proc = subprocess.run([sys.executable, "-m", "autotune.trial", "--space", str(space), "--params",
                           json.dumps(params), "--json", "--workdir", str(tmp_path / "logs")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=150, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow  # 30 s at load ~8 (make test-fast leaves it out)
@pytest.mark.timeout(240)
def test_a_synthetic_trial_is_labelled_everywhere_and_never_exported(tmp_path, capsys, flag_table):
    space_path = write(tmp_path, measure=", warmup_until_stable_pct: 50, warmup_max_rounds: 3")
    params = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    out = _trial(space_path, params, tmp_path, flag_table)
    forced = chain(RATES, 3)
    assert out["acceptance"] == "synthetic"
    assert out["synthetic_accept_length"] == pytest.approx(forced, abs=5e-4)
    assert f"SGLANG_SIMULATE_ACC_LEN={forced:.3f}" in out["launch_command"]
    # The emulator draws the forced length as SGLang does, so the reading is near it.
    assert out["accept_length"] == pytest.approx(forced, rel=0.2)
    # The stable warm-up ran at least two passes and stopped at the first agreeing pair.
    rounds = out["warmup_tok_s"]
    assert 2 <= len(rounds) <= 3 and all(r > 0 for r in rounds)
    if out["warmup_stable"]:
        assert abs(rounds[-1] - rounds[-2]) <= 0.5 * max(rounds[-2:])
    else:
        assert len(rounds) == 3
    assert out["output_tok_s_spread_pct"] is not None and out["output_tok_s_range_pct"] >= 0

    result = TrialResult.from_dict(out)
    tr = Tracker("synthetic-e2e", root=tmp_path / "store").connect()
    tr.start_search(backend="sim")
    tr.log_trial("t1", result)
    base = TrialResult.from_dict({**out, "is_baseline": True, "params": {},
                                  "acceptance": None, "synthetic_accept_length": None})
    tr.log_trial("b1", base)
    run = tr.client.get_run(tr.find_trial_run("t1"))
    assert run.data.tags["autotune.acceptance"] == "synthetic"
    assert float(run.data.tags["autotune.synthetic_accept_length"]) == pytest.approx(forced, abs=5e-4)
    assert "autotune.acceptance" not in tr.client.get_run(tr.find_trial_run("b1")).data.tags
    tr.finish_search()

    target = tmp_path / "launch.sh"
    code = export_main(["--root", str(tmp_path / "store"), "--name", "synthetic-e2e", "--run-id",
                        run.info.run_id, "--format", "sh", "-o", str(target)])
    assert code == 0, capsys.readouterr().err
    text = target.read_text()
    command = [line for line in text.splitlines() if not line.startswith("#")]
    assert not any(synthetic.ENV in line for line in command)
    # The search's console and summary.md print the trial's serve_command: the export's, to a line.
    serve = out["serve_command"].splitlines()
    assert serve == [line for line in command if line.strip()]
    assert "sglang.launch_server" in out["serve_command"] and "AUTOTUNE_SIM_" not in out["serve_command"]
    assert "autotune.sim" in out["launch_command"]  # what was measured: the emulator
    notes = [line for line in text.splitlines() if line.startswith("#")]
    assert any(synthetic.LABEL in line and f"{forced:.3f}".rstrip("0") in line for line in notes)


@pytest.mark.slow  # 14 s at load ~8 (make test-fast leaves it out)
@pytest.mark.timeout(240)
def test_phase_profile_off_runs_without_the_device_timer(tmp_path, flag_table):
    space_path = write(tmp_path, tag="off", measure=", phase_profile: false")
    params = {"speculative_num_steps": 2, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}
    out = _trial(space_path, params, tmp_path, flag_table)
    assert "SGLANG_ENABLE_METRICS_DEVICE_TIMER" not in out["launch_command"]
    assert out["output_tok_s"] and out["output_tok_s"] > 0
    full = out["phases_full"] or {}
    assert full.get("device_timer") is False
    assert full.get("verify_ms") is None and full.get("draft_ms") is None
    assert math.isfinite(full["cycle_ms"])


@pytest.mark.parametrize("forced, measured, cycles, steps, taken", [
    (3.526, 3.53, 870, 3, True),     # the H100 search's 3-4-8: 0.1% apart
    (3.476, 3.45, 870, 4, True),
    (3.526, 1.0, 870, 3, False),     # a child left with the fork server's probe
    (2.7, 2.2, 18, 3, True),         # a short round: 18 cycles, 0.59 tokens of noise allowed
    (2.7, 1.0, 18, 3, False),
    (4.0, 2.0, 870, 1, True),        # SGLang clamps to steps + 1 (tests/spaces/slo.yaml)
    (4.0, 4.0, 870, 1, False),       # ... so 4 with one step is not what it simulates
    (2.7, 1.0, None, 3, True),       # cycles unknown: no judgement on one reading without its noise
    (2.7, 1.0, 870, None, True),     # steps unknown (SGLang's own pick): nothing to clamp by
    (None, 1.0, 870, 3, True),       # nothing forced
])
def test_a_forced_accept_length_that_did_not_take_effect_is_told(forced, measured, cycles, steps, taken):
    why = synthetic.not_taken(forced, measured, cycles, steps)
    assert (why is None) is taken
    if not taken:
        assert why.startswith(f"the forced accept length did not take effect: SGLANG_SIMULATE_ACC_LEN={forced:g}")
