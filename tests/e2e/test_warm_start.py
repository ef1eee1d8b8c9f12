"""The warm start (autotune.space.warm_start): SGLang's own default speculative config, found in a space,
measured first by a real search, and compared with the winner in the summary, MLflow and the export."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.figures import shown
from autotune.search.console import print_summary
from autotune.search.options import SearchOptions
from autotune.search.run import run_search
from autotune.space.search_space import load_space
from autotune.space.warm_start import compare_to_default, sglang_default
from autotune.tracking.tracker import Tracker

SPACES = Path(__file__).resolve().parents[1] / "spaces"

BASE = """
name: ws
backend: sim
profile: llama-3.1-8b-eagle3-h100
model_path: {model}
draft_model_path: sim/draft
fixed_args: {fixed}
parameters:
{params}
workload: {{source: builtin, num_prompts: 2, output_len: 16, concurrency: 1}}
budget: {{trials: 2}}
"""


def _space(tmp_path: Path, *, params: str, fixed: str = "{tp_size: 1}", model: str = "sim/target") -> object:
    path = tmp_path / "space.yaml"
    path.write_text(BASE.format(model=model, fixed=fixed, params=params))
    return load_space(path)


SPEC = """  speculative_algorithm: {type: categorical, choices: [null, EAGLE3]}
  speculative_num_steps: {type: int, low: 1, high: 6}
  speculative_eagle_topk: {type: categorical, choices: [1, 4]}
  speculative_num_draft_tokens: {type: int, low: 2, high: 10, when: "speculative_eagle_topk > 1"}
  NCCL_ALGO: {type: categorical, choices: [Tree, null, Ring]}"""


def test_the_default_follows_the_target_architecture(tmp_path: Path) -> None:
    chain = sglang_default(_space(tmp_path, params=SPEC))
    assert chain.triple == (3, 1, 4) and chain.model_arch is None
    # The other flags stay unset where the space allows it; the chain's draft tokens are derived.
    assert chain.params["NCCL_ALGO"] is None and chain.params["speculative_num_draft_tokens"] == 4
    assert chain.asked == {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                           "speculative_eagle_topk": 1, "NCCL_ALGO": None}
    model = tmp_path / "ckpt"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    tree = sglang_default(_space(tmp_path, params=SPEC, model=str(model)))
    assert tree.triple == (5, 4, 8) and tree.model_arch == "LlamaForCausalLM"
    assert tree.asked["speculative_num_draft_tokens"] == 8 and tree.reason is None
    assert "5/4/8 (auto-picked for LlamaForCausalLM), measured first" in tree.describe()


def test_a_space_that_cannot_run_the_default_says_why(tmp_path: Path) -> None:
    narrow = sglang_default(_space(tmp_path, params=SPEC.replace("high: 6", "high: 2")))
    assert narrow.params is None and "speculative_num_steps=3 is outside the space's 1..2" in narrow.reason
    fixed = sglang_default(_space(tmp_path, params="  speculative_num_steps: {type: int, low: 1, high: 4}\n"
                                                   "  speculative_num_draft_tokens: {type: int, low: 2, high: 9}",
                                  fixed="{tp_size: 1, speculative_algorithm: EAGLE3, speculative_eagle_topk: 2}"))
    assert fixed.params is None and "fixed_args sets speculative_eagle_topk=2" in fixed.reason
    none = sglang_default(_space(tmp_path,
                                 params="  speculative_algorithm: {type: categorical, choices: [null, NGRAM]}"))
    assert none.triple is None and "no EAGLE-family" in none.describe()
    assert compare_to_default(narrow, [], None, space=None) is None


@pytest.mark.slow
def test_the_search_measures_the_default_first_and_reports_the_gain(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_SIM_STARTUP_S", "0.2")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = io.StringIO()
    outcome = run_search(SearchOptions(space=str(SPACES / "warm-start.yaml"), root=str(tmp_path)), out=out)
    print_summary(outcome, out=out)
    text = out.getvalue()
    assert "Warm start: SGLang's default EAGLE3 3/1/4 (auto-picked for an unknown architecture), measured first" in text

    tracker = Tracker("test-warm-start", root=str(tmp_path)).connect(create=False)
    parent = tracker.parent_runs()[0]
    trials = sorted((r for r in tracker.trial_runs(parent.info.run_id) if r.kind == "trial"),
                    key=lambda r: r.start_time or 0)
    assert trials[0].params.get("speculative_num_steps") == "3"  # the first trial is the default

    s = outcome.summary()
    default = s["sglang_default"]
    assert default["triple"] == [3, 1, 4] and default["status"] == "infeasible"
    assert default["speedup"] is not None and default["speedup"] < 1.0
    assert outcome.baseline_wins is True  # the default lost to plain decoding, and so did the rest
    # Both speedups known: the gain is their ratio, each against the baseline measured beside it.
    assert s["gain_over_sglang_default"] == pytest.approx(s["speedup"] / default["speedup"])
    assert s["gain_over_sglang_default"] > 1.0
    assert "vs SGLang's default EAGLE3 3/1/4: it measured" in text and "(slower than plain decoding)" in text

    tags, metrics = parent.data.tags, tracker.client.get_run(parent.info.run_id).data.metrics
    assert json.loads(tags["autotune.sglang_default"])["triple"] == [3, 1, 4]
    assert metrics["gain_over_sglang_default"] == pytest.approx(shown(s["gain_over_sglang_default"]))
    assert metrics["sglang_default_output_tok_s"] == pytest.approx(shown(default["output_tok_s"]))

    export = subprocess.run([sys.executable, "-m", "autotune.export", "--name", "test-warm-start",
                             "--root", str(tmp_path), "--format", "sh"],
                            capture_output=True, text=True, timeout=300)
    assert export.returncode == 0, export.stderr
    line = next(x for x in export.stdout.splitlines() if "SGLang's default" in x)
    assert line.startswith("# vs SGLang's default EAGLE3 3/1/4: it measured") and "slower than plain" in line
    assert f"this is {s['gain_over_sglang_default']:.3f}x that (by speedup: each against its own baseline)" in line


def test_the_benchmark_runs_the_default_first_for_every_strategy() -> None:
    from benchmarks.search.strategies import benchmark

    # On this landscape SGLang's default 3/1/4 is the optimum: with the warm start every strategy
    # reaches the target at its second trial (the group's baseline is the first), without it not.
    landscape = str(Path(__file__).resolve().parents[2] / "benchmarks/landscapes/step-verify-moe.json")
    warm = benchmark(landscape=landscape, seeds=3, budget=4, strategies=["random", "grid"])
    assert {warm[s]["median"] for s in ("random", "grid")} == {2.0}
    info = warm["random"]["warm_start"]
    assert info["reaches_target"] is True and info["of_optimum"] == pytest.approx(1.0)
    cold = benchmark(landscape=landscape, seeds=3, budget=4, strategies=["random", "grid"], warm_start=False)
    assert cold["random"]["warm_start"] is None
    assert any(cold[s]["median"] != 2.0 for s in ("random", "grid"))
