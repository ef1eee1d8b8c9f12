"""``measure.flush_cache``: SGLang's prefix cache flushed before every measured repeat, or kept, on an
emulator server (its log says "Cache flushed successfully!" for every flush it takes, as SGLang's)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotune.space.search_space import SearchSpace
from autotune.space.workload import Workload
from autotune.trial.measure import measure
from autotune.trial.measure_settings import settings_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

FLUSHED = "Cache flushed successfully!"


def flushes(tmp_path: Path, measure_section: dict) -> int:
    space = SearchSpace.from_dict({
        "name": "flush", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
        "model_path": "sim/Llama-3.1-8B-Instruct", "draft_model_path": "sim/EAGLE3-LLaMA3.1-Instruct-8B",
        "fixed_args": {"tp_size": 1},
        "parameters": {"speculative_algorithm": {"type": "categorical", "choices": [None, "EAGLE3"]}},
        "workload": {"source": "builtin", "num_prompts": 2, "warmup_prompts": 1, "output_len": 8,
                     "concurrency": 1, "seed": 0},
        "measure": {"repeats": 3, "startup_timeout_s": 60, **measure_section}})
    settings = settings_for(space, workdir=str(tmp_path / "work"), python=sys.executable, validate=False,
                            sim_seed=1)
    result = measure(space.trial_config({"speculative_algorithm": None}), Workload.from_spec(space.workload), settings)
    assert result.ok, result.reason
    return Path(result.log_path).read_text().count(FLUSHED)


def test_flush_cache_true_flushes_before_each_repeat_and_false_never(sim_env: Path, tmp_path: Path) -> None:
    assert flushes(tmp_path / "on", {"flush_cache": True}) == 3
    assert flushes(tmp_path / "off", {"flush_cache": False}) == 0
    # Unset, as before: no stabilising warm-up, no flush.
    assert flushes(tmp_path / "default", {}) == 0
