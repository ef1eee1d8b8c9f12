"""The proof's logic on the emulator (issue 37, deliverable 5): scripts/gpu/repick_proof.py measures
configs at two forced acceptances on real emulator servers, predicts the second from the first's
cost surface and repicks; the GPU plan scripts/gpu/plan_repick.sh runs the same script on an H200."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SPACE = """\
name: proof
backend: sim
profile: llama-3.1-8b-eagle3-h100
model_path: sim/llama
draft_model_path: sim/draft
fixed_args: {tp_size: 1}
parameters:
  speculative_algorithm: {type: categorical, choices: [null, EAGLE3]}
  speculative_num_steps: {type: int, low: 2, high: 4}
  speculative_eagle_topk: {type: categorical, choices: [1, 2]}
  speculative_num_draft_tokens: {type: int, low: 4, high: 8, step: 4, when: "speculative_eagle_topk > 1"}
synthetic_acceptance: {rates: [0.8, 0.7, 0.6, 0.5]}
workload: {source: builtin, num_prompts: 3, warmup_prompts: 1, output_len: 128, concurrency: 1, seed: 0}
measure: {repeats: 2, startup_timeout_s: 60}
"""
CONFIGS = [{"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2, "speculative_eagle_topk": 1},
           {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 4, "speculative_eagle_topk": 2,
            "speculative_num_draft_tokens": 8}]


def _run(tmp_path: Path, *args: str, table: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AUTOTUNE_SIM_STARTUP_S="0.2", AUTOTUNE_SGLANG_FLAG_TABLE=str(table),
               PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "scripts/gpu/repick_proof.py", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=400, check=False)


@pytest.mark.slow  # 4 emulator trials and a baseline (about a minute on a loaded box)
@pytest.mark.timeout(450)
def test_the_second_acceptance_is_predicted_from_the_first_s_cost_surface(
        tmp_path: Path, sim_env: Path, installed_flag_table: Path) -> None:
    space = tmp_path / "proof.yaml"
    space.write_text(SPACE)
    configs = tmp_path / "configs.jsonl"
    configs.write_text("".join(json.dumps(c) + "\n" for c in CONFIGS))
    out = tmp_path / "out"
    proc = _run(tmp_path, "--space", str(space), "--configs", str(configs), "--rates-b",
                "[0.55, 0.45, 0.35, 0.3]", "--out", str(out), table=installed_flag_table)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "proof.json").read_text())
    assert report["compared"] == 2
    a = [json.loads(line) for line in (out / "a.jsonl").read_text().splitlines()]
    b = [json.loads(line) for line in (out / "b.jsonl").read_text().splitlines()]
    assert [r["params"] for r in a] == [r["params"] for r in b]
    # The runs were forced to different acceptances, and B's is the lower.
    for ra, rb in zip(a, b, strict=True):
        assert rb["synthetic_accept_length"] < ra["synthetic_accept_length"]
    surface = json.loads((out / "surface_a.json").read_text())
    assert surface["acceptance"]["rates"] == [0.8, 0.7, 0.6, 0.5]  # A's surface holds nothing of B
    for row in report["rows"]:
        measured_b = next(r["output_tok_s"] for r in b if r["params"] == row["params"])
        measured_a = next(r["output_tok_s"] for r in a if r["params"] == row["params"])
        assert row["measured_tok_s"] == measured_b
        # The prediction moved from A's measurement towards B's: more than half the way.
        assert abs(row["predicted_tok_s"] - measured_b) < 0.5 * abs(measured_a - measured_b), row
        # The cost surface itself, at the acceptance the run drew: within the emulator's noise.
        assert abs(row["error_at_measured_accept_pct"]) < 5.0, row
    assert 0 < report["pick_share"] <= 1.0
    assert "repick:" in proc.stdout and "max |error|" in proc.stdout


def test_a_config_the_space_rejects_exits_2(tmp_path: Path, installed_flag_table: Path) -> None:
    space = tmp_path / "proof.yaml"
    space.write_text(SPACE)
    configs = tmp_path / "configs.jsonl"
    configs.write_text(json.dumps({"speculative_algorithm": "EAGLE3", "speculative_num_steps": 9}) + "\n")
    proc = _run(tmp_path, "--space", str(space), "--configs", str(configs), "--rates-b",
                "[0.5, 0.4, 0.3, 0.2]", "--out", str(tmp_path / "out"), table=installed_flag_table)
    assert proc.returncode == 2 and "--configs" in proc.stderr
    # Rates for fewer positions than the space drafts: the loader's message, exit 2.
    proc = _run(tmp_path, "--space", str(space), "--configs", str(configs), "--rates-b", "[0.5]",
                "--out", str(tmp_path / "out"), table=installed_flag_table)
    assert proc.returncode == 2 and "give one rate per position" in proc.stderr
