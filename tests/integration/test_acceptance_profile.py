"""Measured acceptance profiles per prompt category (issue 37, deliverable 3), on the emulator.

A real ``python -m autotune.trial`` run of the emulator, whose ``[code]`` and ``[chat]`` prompts
accept with different per-position rates (``AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT``); ``autotune
acceptance`` must recover each category's rates within the spread it states, and ``autotune repick
--by-category`` must then give each category the config that is best for its own rates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.cli.acceptance import main as acceptance_main
from autotune.cli.repick import main as repick_main
from autotune.search.cost_surface import surface_of
from autotune.space.synthetic import SyntheticAcceptance
from autotune.trial.result import TrialResult

REPO = Path(__file__).resolve().parents[2]
GIVEN = {"code": [0.92, 0.88, 0.82, 0.76], "chat": [0.55, 0.42, 0.33, 0.25]}
STEPS = 4

SPACE = """\
name: acceptance-by-category
backend: sim
profile: llama-3.1-8b-eagle3-h100
model_path: sim/llama
draft_model_path: sim/draft
fixed_args: {{speculative_algorithm: EAGLE3}}
parameters:
  speculative_num_steps: {{type: int, low: 1, high: 4}}
  speculative_eagle_topk: {{type: categorical, choices: [1, 2]}}
  speculative_num_draft_tokens: {{type: int, low: 2, high: 8}}
workload: {{source: jsonl, path: {prompts}, num_prompts: 16, warmup_prompts: 0, output_len: 256,
           concurrency: 8, sample: stratified, seed: 0}}
measure: {{repeats: 1, startup_timeout_s: 60}}
"""


def _prompts(path: Path) -> Path:
    lines = []
    for kind in GIVEN:
        for i in range(8):
            lines.append(json.dumps({"id": f"{kind}-{i}", "category": kind,
                                     "prompt": f"[{kind}] request {i}: write something about item {i * 7}."}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def measured_run(tmp_path_factory: pytest.TempPathFactory, installed_flag_table: Path) -> Path:
    """One real trial on the emulator, its request records kept (``--records``)."""
    tmp = tmp_path_factory.mktemp("acceptance")
    space = tmp / "space.yaml"
    space.write_text(SPACE.format(prompts=_prompts(tmp / "prompts.jsonl")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_SIM_")}
    env.update(AUTOTUNE_SIM_STARTUP_S="0.2", AUTOTUNE_SGLANG_FLAG_TABLE=str(installed_flag_table),
               AUTOTUNE_SIM_ACCEPTANCE_BY_TEXT=json.dumps({f"[{k}]": v for k, v in GIVEN.items()}))
    params = {"speculative_num_steps": STEPS, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": STEPS + 1}
    out = tmp / "run.json"
    proc = subprocess.run([sys.executable, "-m", "autotune.trial", "--space", str(space), "--params",
                           json.dumps(params), "--json", "--records", "-o", str(out),
                           "--workdir", str(tmp / "logs")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=200, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow  # one emulator trial (its baseline too): ~15 s on a loaded 2-core box
@pytest.mark.timeout(300)
def test_each_category_s_rates_are_recovered_within_their_stated_spread(measured_run: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    profile_path = tmp_path / "profile.json"
    assert acceptance_main([str(measured_run), "--json", "-o", str(profile_path)]) == 0
    profile = json.loads(profile_path.read_text())
    assert profile["steps"] == STEPS and profile["topk"] == 1 and profile["rates_are"] == "top-1"
    assert profile["uncategorized_requests"] == 0
    assert set(profile["by_category"]) == set(GIVEN)
    for kind, rates in GIVEN.items():
        part = profile["by_category"][kind]
        assert part["requests"] == 8 and len(part["rates"]) == STEPS
        for pos, given in zip(part["positions"], rates, strict=True):
            spread = max(pos["sd"], pos["sd_requests"])
            # The stated spread is small enough to say something, and the given rate is inside it.
            assert 0 < spread < 0.1, (kind, pos)
            assert abs(pos["rate"] - given) <= 4 * spread, (kind, pos, given)
    # The categories are told apart: the chat draft's first position is far below the code one's.
    code, chat = profile["by_category"]["code"]["positions"][0], profile["by_category"]["chat"]["positions"][0]
    assert code["rate"] - chat["rate"] > 4 * (code["sd"] + chat["sd"])
    # The text form names every category and says what the rates are.
    assert acceptance_main([str(measured_run)]) == 0
    text = capsys.readouterr().out
    assert "code" in text and "chat" in text and "top-1" in text and "unknown" in text


# ------------------------------------------------------------ repick per category, from the profile

def _cycle(s: int, k: int, n: int) -> dict[str, float]:
    """A cost law written out: draft 0.8 ms a step (x k), verify 10.5 + 0.2 (n - 1), extend 1."""
    draft, verify, extend, other = 0.8 * s * k, 10.5 + 0.2 * (n - 1), 1.0, 0.3
    return {"draft_ms": draft, "verify_ms": verify, "extend_ms": extend, "other_ms": other,
            "cycle_ms": draft + verify + extend + other}


def _spec(s: int, k: int, n: int) -> dict[str, Any]:
    return {"speculative_algorithm": "EAGLE3", "speculative_num_steps": s,
            "speculative_eagle_topk": k, "speculative_num_draft_tokens": n}


MEASURED = [_spec(1, 1, 2), _spec(2, 1, 3), _spec(3, 1, 4), _spec(4, 1, 5), _spec(2, 2, 4), _spec(4, 2, 6)]


def _tok_s(params: dict[str, Any], model: SyntheticAcceptance) -> float:
    s, k, n = (params["speculative_num_steps"], params["speculative_eagle_topk"],
               params["speculative_num_draft_tokens"])
    return 1000.0 * model.accept_length(steps=s, topk=k, draft_tokens=n) / _cycle(s, k, n)["cycle_ms"]


def _surface(space: Any) -> dict[str, Any]:
    """A search's surface measured at a middling acceptance, under the written cost law."""
    model = SyntheticAcceptance((0.75, 0.65, 0.55, 0.45))
    results = []
    for p in MEASURED:
        s, k, n = p["speculative_num_steps"], p["speculative_eagle_topk"], p["speculative_num_draft_tokens"]
        tok = _tok_s(p, model)
        results.append(TrialResult(status="feasible", reason=None, params=p, is_baseline=False, output_tok_s=tok,
                                   output_tok_s_repeats=[tok * 0.997, tok, tok * 1.003],
                                   accept_length=model.accept_length(steps=s, topk=k, draft_tokens=n),
                                   phases=_cycle(s, k, n), acceptance="synthetic", baseline_decode_step_ms=10.0,
                                   baseline_tok_s=100.0))
    return surface_of(space, results, name="by-category")


@pytest.mark.slow  # the same emulator trial (module fixture)
@pytest.mark.timeout(300)
def test_repick_by_category_gives_each_workload_its_own_best(measured_run: Path, tmp_path: Path,
                                                             space_factory: Any) -> None:
    profile = tmp_path / "profile.json"
    assert acceptance_main([str(measured_run), "--json", "-o", str(profile)]) == 0
    space = space_factory({
        "name": "by-category", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
        "model_path": "sim/llama", "draft_model_path": "sim/draft", "fixed_args": {"tp_size": 1},
        "parameters": {"speculative_algorithm": {"type": "categorical", "choices": [None, "EAGLE3"]},
                       "speculative_num_steps": {"type": "int", "low": 1, "high": 4},
                       "speculative_eagle_topk": {"type": "categorical", "choices": [1, 2]},
                       "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 6}},
        "synthetic_acceptance": {"rates": [0.75, 0.65, 0.55, 0.45]},
        "workload": {"num_prompts": 2, "output_len": 16, "concurrency": 1}})
    surface = tmp_path / "s.cost_surface.json"
    surface.write_text(json.dumps(_surface(space)))
    out = tmp_path / "repick.json"
    assert repick_main(["--surface", str(surface), "--acceptance-file", str(profile), "--by-category",
                        "--json", "-o", str(out)]) == 0
    record = json.loads(out.read_text())
    picks = {kind: record["by_category"][kind]["pick"] for kind in GIVEN}
    # Each category's pick is, under the written cost law and the rates the emulator was given,
    # at least 98% of the best config the repick ranked (the figure).
    for kind, rates in GIVEN.items():
        truth = SyntheticAcceptance(tuple(rates))
        ranked = [p["params"] for p in record["by_category"][kind]["predictions"] if p["trusted"]]
        best = max(_tok_s(p, truth) for p in ranked)
        assert _tok_s(picks[kind], truth) >= 0.98 * best, (kind, picks[kind])
    # Far apart: the code draft wants a deep chain, the chat draft a short one.
    code, chat = SyntheticAcceptance(tuple(GIVEN["code"])), SyntheticAcceptance(tuple(GIVEN["chat"]))
    assert _tok_s(picks["chat"], code) < 0.9 * _tok_s(picks["code"], code)
    assert _tok_s(picks["code"], chat) < 0.95 * _tok_s(picks["chat"], chat)
    assert all(p["label"] == "predicted" for kind in GIVEN for p in record["by_category"][kind]["predictions"])
