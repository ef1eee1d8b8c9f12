"""``measure.standby`` through a real search: Ray runs the trials, and a trial process hands its
next server to the standby it started beside the one before. Real Ray, emulator servers and
standby processes; nothing may outlive the search (the emulator scan counts standbys too: their
command line names the module they will run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.search.options import SearchOptions
from autotune.search.run import run_search
from tests.e2e.test_search import _assert_no_emulator_left

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SPACE = {
    "name": "standby-search", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
    "model_path": "sim/Llama-3.1-8B-Instruct", "draft_model_path": "sim/EAGLE3-LLaMA3.1-Instruct-8B",
    "fixed_args": {"tp_size": 1, "speculative_eagle_topk": 1, "mem_fraction_static": 0.85},
    "parameters": {"speculative_algorithm": {"type": "categorical", "choices": [None, "EAGLE3"]},
                   "speculative_num_steps": {"type": "int", "low": 1, "high": 4}},
    "workload": {"source": "builtin", "num_prompts": 2, "warmup_prompts": 1, "output_len": 16, "concurrency": 1,
                 "seed": 0},
    "measure": {"repeats": 1, "startup_timeout_s": 120, "standby": True},
    "search": {"stop_rule": False, "finalists": 0},
    "budget": {"trials": 3},
    "objective": {"metric": "output_tok_s"},
}


def test_a_search_launches_later_servers_by_standbys_and_leaves_none(tmp_path: Path, sim_env: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Start-ups long enough for a standby's imports to finish beside them even on a loaded box; a
    # standby still importing when its server is ready is ended, and the next launch is a fresh one.
    monkeypatch.setenv("AUTOTUNE_SIM_STARTUP_S", "4")
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    outcome = run_search(SearchOptions(space=str(path), root=str(tmp_path), concurrency=1, tracking=False))
    assert outcome.trials == 3 and outcome.failed == 0, outcome
    logs = sorted(tmp_path.glob("mlruns/ray/standby-search/*/logs/*.log"))
    servers = [p for p in logs if not p.name.startswith("standby-")]
    launched = [p for p in servers if "launched by a standby" in p.read_text()]
    # Baseline and 3 trials in one trial process (concurrency 1): every server but the first can be.
    assert len(servers) >= 4 and launched, [p.name for p in logs]
    for p in launched:
        text = p.read_text()
        assert "Uvicorn running" in text and "The server is fired up" in text, p.name
    _assert_no_emulator_left(sim_env)
