"""Fitting an emulator profile to trial summaries: forced acceptance, recovery, prediction, errors."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.cli import fit as fit_cli
from autotune.errors import ConfigError
from autotune.sim.config import ModelConfig
from autotune.sim.engine import SimEngine
from autotune.sim.model import PerformanceModel
from autotune.sim.profile import load_profile
from autotune.simtools.fit.command import fit_profile
from autotune.simtools.fit.data import MeasuredConfig as Observation
from autotune.simtools.fit.data import load_measurements, split
from autotune.simtools.fit.predictions import predict_window

ROOT = Path(__file__).resolve().parents[3]
BASE = load_profile("llama-3.1-8b-eagle3-h100")
# A made-up "truth" shaped like the tiny model on an H200: other is about half the wall time,
# the draft runs steps - 1 forwards, verify is flat.
TRUE = dataclasses.replace(
    BASE, fixed_ms=0.0, dense_ms=0.75, per_token_ms=0.002, verify_fixed_ms=0.0, verify_tree_ms=0.01,
    draft_step_ms=0.14, draft_topk_ms=0.03, draft_first_step_ms=0.0, draft_skip_steps=1,
    extend_ms=0.15, extend_per_token_ms=0.004, other_ms=0.5, spec_other_ms=2.2,
    spec_other_per_step_ms=0.35, spec_other_per_token_ms=0.0, prefill_fixed_ms=7.0)
CONFIGS = [None, (1, 1, 2, 1.8), (2, 1, 3, 2.5), (3, 1, 4, 3.0), (4, 1, 5, 3.0), (5, 1, 6, 3.5),
           (3, 2, 6, 2.5), (4, 4, 8, 3.0)]
INPUT_LEN = 64


def _launch(cfg):
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--attention-backend",
            "triton", "--tp-size", "1", "--enable-metrics"]
    env = {"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}
    if cfg is not None:
        s, k, n, acc = cfg
        argv += ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(s),
                 "--speculative-eagle-topk", str(k), "--speculative-num-draft-tokens", str(n)]
        env["SGLANG_SIMULATE_ACC_LEN"] = f"{acc:g}"
    return argv, env


def synthetic_summary(profile, cfg, *, noise: float, rng: random.Random, requests: int = 6,
                      output_len: int = 200) -> dict:
    """A summary_json-shaped measurement of ``cfg`` made by the model of ``profile``, with noise."""
    argv, env = _launch(cfg)
    from autotune.simtools.fit.data import server_args_of
    stub = Observation(id="x", source="synthetic", server_args=server_args_of(argv), env=env,
                       steps=cfg and cfg[0], topk=cfg and cfg[1], draft_tokens=cfg and cfg[2],
                       forced_acc=cfg and cfg[3], tok_s=1.0, tok_s_spread=None, repeats=1,
                       cycles_per_request=1.0, output_len=output_len, phases={})
    pred = predict_window(profile, stub, input_len=INPUT_LEN)
    ph = {k: v * math.exp(rng.gauss(0, noise)) for k, v in pred["phases"].items()
          if k not in ("cycle", "other")}
    ph["other"] = pred["phases"]["other"] * math.exp(rng.gauss(0, noise))
    cycle = math.fsum(ph.values())
    cycles = pred["cycles_per_request"] * requests
    tok = pred["tok_s"] * math.exp(rng.gauss(0, noise))
    full = {f"{k}_ms": v for k, v in ph.items()}
    full.update(cycle_ms=cycle, cycles=cycles, delta_requests=requests,
                delta_generation_tokens=output_len * requests,
                delta_verify_calls=cycles if cfg else 0.0,
                accept_length_window_decode=pred["accept_window_decode"])
    if cfg is None:
        for k in ("draft_ms", "verify_ms", "extend_ms"):
            full[k] = None
    return {"status": "feasible", "reason": None, "params": {}, "argv": argv, "env": env,
            "output_tok_s": tok, "output_tok_s_spread": tok * noise / 2,
            "output_tok_s_repeats": [tok, tok], "startup_s": 60.0,
            "accept_length_meta_info": None, "accept_length_server_info": None,
            "phases": {k: full.get(k) for k in _SUMMARY_PHASE_KEYS}, "phases_full": full}


# What summary_json keeps in "phases" (the rest is in "phases_full").
_SUMMARY_PHASE_KEYS = ("draft_ms", "verify_ms", "extend_ms", "decode_ms", "other_ms", "cycle_ms",
                       "cycles")


def write_set(tmp_path: Path, *, noise: float = 0.02, seed: int = 1, configs=CONFIGS,
              truth=None) -> Path:
    rng = random.Random(seed)
    truth = truth or TRUE
    d = tmp_path / "measurements"
    d.mkdir(exist_ok=True)
    for cfg in configs:
        name = "baseline" if cfg is None else "trial-" + "-".join(str(x) for x in cfg)
        (d / f"{name}.json").write_text(json.dumps(synthetic_summary(truth, cfg, noise=noise, rng=rng)))
    return d


def _model(steps, acc, topk=1, n=None):
    cfg = ModelConfig.from_server_args(
        {"speculative_algorithm": "EAGLE3", "speculative_num_steps": steps,
         "speculative_eagle_topk": topk, "speculative_num_draft_tokens": n or steps + 1},
        {"SGLANG_SIMULATE_ACC_LEN": acc})
    return PerformanceModel(BASE, cfg)


# ----- forced acceptance --------------------------------------------------------------------------

def test_forced_acceptance_is_sglangs_match_expected():
    m = _model(2, "3")
    assert m.acceptance(0.5).probs == (0.0, 0.0, 1.0)  # the prompt factor no longer matters
    exp = m.expected(batch=1, input_len=32, output_len=200)
    # 199 decoded tokens at 3 a cycle: 66 full cycles and a cut 67th.
    assert exp.cycles == pytest.approx(67.0) and exp.accept_length == pytest.approx(3.0)
    assert _model(1, "1.8").acceptance().mean == pytest.approx(1.8)
    assert _model(5, "3.5").acceptance().probs[2:4] == pytest.approx((0.5, 0.5))
    assert _model(3, "9").acceptance().mean == pytest.approx(4.0)  # clamped to steps + 1
    for off in ("0", "-1", "abc", ""):
        assert _model(3, off).config.simulate_acc_len is None


def test_engine_reports_the_three_accept_readings_as_sglang():
    """Forced 3 at 2 steps, 200 tokens: meta_info 200/67, /server_info 3.00, window 199/67."""
    fast = dataclasses.replace(BASE, dense_ms=0.01, fixed_ms=0.0, draft_step_ms=0.001,
                               extend_ms=0.001, spec_other_ms=0.001, prefill_fixed_ms=0.01,
                               verify_fixed_ms=0.0, noise_cv=0.0)
    model = PerformanceModel(fast, _model(2, "3").config)

    async def run():
        eng = SimEngine(model, seed=0)
        await eng.start()
        metas = []
        for prompt in ("a prompt", "another prompt"):
            async for chunk in eng.generate(prompt=prompt, prompt_tokens=8, max_new_tokens=200,
                                            ignore_eos=True):
                if chunk.finished:
                    metas.append(chunk.meta)
        eng._refresh_stats()
        await eng.stop()
        return metas, eng.stats

    metas, stats = asyncio.run(run())
    assert [m["spec_verify_ct"] for m in metas] == [67, 67]
    assert metas[0]["spec_accept_length"] == pytest.approx(200 / 67)
    assert stats.avg_spec_accept_length == pytest.approx(3.0)
    window = (stats.generation_tokens_total - 2) / stats.spec_verify_calls_total
    assert window == pytest.approx(199 / 67)


# ----- fit on synthetic measurements --------------------------------------------------------------

@pytest.mark.parametrize("half", ["even", "odd"])
def test_fit_recovers_the_truth_and_predicts_the_other_half(tmp_path, half):
    ds = load_measurements([write_set(tmp_path, noise=0.02)])
    res = fit_profile(ds, base=BASE, name="synthetic", half=half, input_len=INPUT_LEN)
    p = res.profile
    assert p.draft_skip_steps == 1
    assert p.dense_ms * p.attention_backends["triton"] == pytest.approx(
        TRUE.dense_ms * TRUE.attention_backends["triton"], rel=0.05)
    assert p.draft_step_ms == pytest.approx(TRUE.draft_step_ms, rel=0.1)
    assert p.extend_ms == pytest.approx(TRUE.extend_ms, abs=0.03)
    assert p.spec_other_ms == pytest.approx(TRUE.spec_other_ms, rel=0.12)
    assert p.spec_other_per_step_ms == pytest.approx(TRUE.spec_other_per_step_ms, rel=0.15)
    assert p.other_ms == pytest.approx(TRUE.other_ms, rel=0.08)
    g = res.report["goals"]
    assert g["tok_s"]["pass"] and g["shares"]["pass"], g
    assert g["tok_s"]["max_abs_pct"] < 6 and g["shares"]["max_abs_points"] < 3
    fit_ids, pred_ids = res.report["split"]["fit"], res.report["split"]["predict"]
    assert "plain" in fit_ids and not set(fit_ids) & set(pred_ids)
    assert len(fit_ids) + len(pred_ids) == len(CONFIGS)


def test_prediction_error_grows_with_a_wrong_model(tmp_path):
    """The error is real: data whose other time grows per token make the per-token-free fit miss."""
    skewed = dataclasses.replace(TRUE, spec_other_per_step_ms=0.0, spec_other_per_token_ms=0.6)
    d = write_set(tmp_path, noise=0.0, truth=skewed,
                  configs=[c for c in CONFIGS if c is None or c[1] == 1] + [(4, 4, 8, 3.0)])
    res = fit_profile(load_measurements([d]), base=BASE, name="s", half="even", input_len=INPUT_LEN)
    # Chains alone cannot tell per step from per token; the 4-4-8 tree (fitted) can.
    assert res.profile.spec_other_per_token_ms > 0.3
    assert res.report["goals"]["tok_s"]["max_abs_pct"] < 3


def test_split_is_deterministic_and_keeps_a_spread(tmp_path):
    ds = load_measurements([write_set(tmp_path)])
    fit_e, pred_e, _ = split(ds, half="even")
    fit_o, _, _ = split(ds, half="odd")

    def ids(xs):
        return sorted(o.id for o in xs)

    assert ids(fit_e) == ["1-1-2@1.8", "3-1-4@3", "3-2-6@2.5", "5-1-6@3.5", "plain"]
    assert ids(pred_e) == ["2-1-3@2.5", "4-1-5@3", "4-4-8@3"]
    assert ids(fit_o) == ["2-1-3@2.5", "4-1-5@3", "4-4-8@3", "plain"]
    fit_x, pred_x, _ = split(ds, fit_ids=["2-1-3@2.5", "5-1-6@3.5"])
    assert ids(fit_x) == ["2-1-3@2.5", "5-1-6@3.5", "plain"] and len(pred_x) == 5
    with pytest.raises(ConfigError, match="unknown config id"):
        split(ds, fit_ids=["9-9-9"])


def test_single_tree_is_fitted_not_predicted(tmp_path):
    ds = load_measurements([write_set(tmp_path, configs=CONFIGS[:-1])])
    fit, _, notes = split(ds, half="odd")
    assert "3-2-6@2.5" in {o.id for o in fit} and any("only tree" in n for n in notes)


# ----- bad inputs -----------------------------------------------------------------------------------

def test_bad_summaries_are_excluded_with_a_reason(tmp_path):
    d = write_set(tmp_path, configs=[None, (2, 1, 3, 3.0), (3, 1, 4, 3.0), (1, 1, 2, 1.8)])
    good = json.loads((d / "trial-3-1-4-3.0.json").read_text())
    (d / "failed.json").write_text(json.dumps({**good, "status": "failed", "reason": "OOM",
                                               "output_tok_s": None}))
    (d / "no-tok.json").write_text(json.dumps({**good, "output_tok_s": None}))
    (d / "no-full.json").write_text(json.dumps({k: v for k, v in good.items() if k != "phases_full"}))
    no_draft = json.loads(json.dumps(good))
    no_draft["phases_full"]["draft_ms"] = None
    (d / "no-draft.json").write_text(json.dumps(no_draft))
    batched = json.loads(json.dumps(good))
    batched["phases_full"]["delta_verify_calls"] *= 4
    (d / "batched.json").write_text(json.dumps(batched))
    one_step = json.loads((d / "trial-1-1-2-1.8.json").read_text())
    one_step["phases_full"].update(draft_ms=None, other_ms=None)
    (d / "trial-1-1-2-1.8.json").write_text(json.dumps(one_step))
    store_form = {k: v for k, v in good.items() if k != "phases_full"}
    store_form["phases"] = good["phases_full"]  # a FileBaselineStore file: full profile in phases
    (d / "store-form.json").write_text(json.dumps(store_form))
    ds = load_measurements([d])
    reasons = {Path(e.source).name: e.reason for e in ds.excluded}
    assert "store-form.json" not in reasons and "3-1-4@3#2" in ds.by_id()
    assert "status 'failed'" in reasons["failed.json"] and "OOM" in reasons["failed.json"]
    assert "output_tok_s is None" in reasons["no-tok.json"]
    assert "phases_full missing" in reasons["no-full.json"]
    assert "draft_ms is unknown" in reasons["no-draft.json"]
    assert "concurrency 1 only" in reasons["batched.json"]
    one = ds.by_id()["1-1-2@1.8"]  # 1 step: no draft series in SGLang, a known zero
    assert one.phases["draft"] == 0.0 and one.phases["other"] > 0 and one.notes


def test_no_baseline_and_broken_files_are_clear_errors(tmp_path):
    d = write_set(tmp_path, configs=[(2, 1, 3, 3.0), (3, 1, 4, 3.0)])
    with pytest.raises(ConfigError, match="no usable plain-decode"):
        fit_profile(load_measurements([d]), base=BASE, name="x", half="even")
    (d / "broken.json").write_text('{"status": "ok",\n "output_tok_s": }')
    with pytest.raises(ConfigError, match=r"broken.json:2: not valid JSON"):
        load_measurements([d])
    with pytest.raises(ConfigError, match="no such file"):
        load_measurements([tmp_path / "missing"])


# ----- CLI, profile file, evaluator -----------------------------------------------------------------

def test_cli_writes_a_profile_the_evaluator_accepts(tmp_path, capsys):
    d = write_set(tmp_path)
    out = tmp_path / "out" / "fitted.yaml"
    rc = fit_cli.main(["--measurements", str(d), "--base-profile", "llama-3.1-8b-eagle3-h100",
                       "--name", "h200-test", "--fit-half", "even", "--out-profile", str(out),
                       "--report", str(tmp_path / "out" / "report"), "--set", "num_layers=8",
                       "hidden_size=2048", "--input-len", str(INPUT_LEN)])
    printed = capsys.readouterr().out
    assert rc == 0 and "PASS" in printed
    prof = load_profile(out)
    assert prof.name == "h200-test" and prof.num_layers == 8 and prof.draft_skip_steps == 1
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["goals"]["tok_s"]["pass"] and report["cannot_capture"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| 4-1-5@3 |" in md and "What the model cannot capture" in md
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "name": "t", "backend": "sim", "profile": str(out), "model_path": "sim/t",
        "draft_model_path": "sim/d",
        "fixed_args": {"speculative_algorithm": "EAGLE3", "tp_size": 1, "attention_backend": "triton"},
        "fixed_env": {"SGLANG_SIMULATE_ACC_LEN": "3"},
        "parameters": {"speculative_num_steps": {"type": "int", "low": 1, "high": 5},
                       "speculative_eagle_topk": {"type": "categorical", "choices": [1]}},
        "workload": {"source": "builtin", "num_prompts": 4, "output_len": 200, "concurrency": 1},
        "budget": {"trials": 3}}))
    proc = subprocess.run([sys.executable, "-m", "autotune.simtools.evaluate", "--space", str(space), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    recs = json.loads(proc.stdout)["records"]
    assert len(recs) == 5 and all(r["status"] == "ok" for r in recs)
    assert [round(r["accept_length"], 6) for r in recs] == [2.0, 3.0, 3.0, 3.0, 3.0]


def test_cli_list_and_errors(tmp_path, capsys):
    d = write_set(tmp_path, configs=[None, (2, 1, 3, 3.0)])
    assert fit_cli.main(["--measurements", str(d), "--list"]) == 0
    assert "2-1-3@3" in capsys.readouterr().out
    rc = fit_cli.main(["--measurements", str(d), "--fit-half", "even",
                       "--out-profile", str(tmp_path / "p.yaml")])
    assert rc == 2 and "only chain config" not in capsys.readouterr().err  # nothing to predict
    rc = fit_cli.main(["--measurements", str(d), "--fit-half", "even", "--out-profile",
                       str(tmp_path / "p.yaml"), "--set", "not_a_key=1"])
    assert rc == 2 and "not_a_key" in capsys.readouterr().err


# ----- the live emulator, through the real trial path ------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(240)
def test_round_trip_through_live_emulator_trials(tmp_path):
    """Trials measured on the live emulator (real server, /metrics, summary_json) are fitted and
    the held-out configs predicted within the goals: the window layout matches what trials see."""
    from autotune.simtools.fit.solve import profile_dict

    truth = tmp_path / "truth.yaml"
    truth.write_text(yaml.safe_dump(profile_dict(TRUE, {}, name="truth", description="t",
                                                 overrides={"noise_cv": 0.01, "startup_s": 0.1})))
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "name": "live", "backend": "sim", "profile": str(truth), "model_path": "sim/t",
        "draft_model_path": "sim/d",
        "fixed_args": {"speculative_algorithm": "EAGLE3", "tp_size": 1, "attention_backend": "triton"},
        "parameters": {"speculative_num_steps": {"type": "int", "low": 1, "high": 5},
                       "speculative_eagle_topk": {"type": "categorical", "choices": [1]},
                       "SGLANG_SIMULATE_ACC_LEN": {"type": "categorical",
                                                   "choices": ["1.8", "2.5", "3", "3.5"]}},
        "workload": {"source": "builtin", "num_prompts": 4, "warmup_prompts": 1,
                     "output_len": 120, "concurrency": 1},
        "measure": {"repeats": 1, "startup_timeout_s": 60}, "budget": {"trials": 3}}))
    out = tmp_path / "runs"
    out.mkdir()
    store = tmp_path / "store"
    for steps, acc in ((1, "1.8"), (2, "2.5"), (3, "3"), (4, "3"), (5, "3.5")):
        params = json.dumps({"speculative_num_steps": steps, "speculative_eagle_topk": 1,
                             "SGLANG_SIMULATE_ACC_LEN": acc})
        proc = subprocess.run([sys.executable, "-m", "autotune.trial", "--space", str(space),
                               "--params", params, "--json", "--baseline-store", str(store),
                               "--workdir", str(tmp_path / "logs")],
                              cwd=ROOT, capture_output=True, text=True, timeout=120,
                              check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        (out / f"steps{steps}.json").write_text(proc.stdout)
    ds = load_measurements([out, store])
    assert not ds.excluded, ds.excluded
    assert ds.by_id()["3-1-4@3"].accept_server_info == pytest.approx(3.0)
    res = fit_profile(ds, base=BASE, name="live", half="even", input_len=INPUT_LEN)
    g = res.report["goals"]
    assert res.report["split"]["predict"] == ["2-1-3@2.5", "4-1-5@3"]
    assert g["tok_s"]["pass"] and g["shares"]["pass"], g
    assert res.profile.draft_skip_steps == 1
