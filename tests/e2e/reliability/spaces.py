"""Small sim search spaces for the reliability tests, written as real YAML files.

Every space uses a near-zero-compute profile and a one-prompt, few-token workload, so a trial
costs what the tuner and process start-up cost. ``fixed_env`` carries the test's token so every
server can be found by pid afterwards (see ``reliability.procs``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.reliability.procs import TOKEN_ENV

PROFILES = Path(__file__).resolve().parent / "profiles"
TINY = str(PROFILES / "tiny.yaml")
BIG_WEIGHTS = str(PROFILES / "big-weights.yaml")

# EAGLE-3 with a fixed chain (steps 2, topk 1, 3 draft tokens): speculation is on in every trial,
# so the searched parameters are the ones under test (tp_size, faults).
EAGLE3_FIXED = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2,
                "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}

TINY_WORKLOAD = {"source": "builtin", "num_prompts": 1, "warmup_prompts": 0, "output_len": 8,
                 "concurrency": 1, "seed": 0}


def base_space(name: str, *, token: str, profile: str = TINY) -> dict[str, Any]:
    """A complete space as plain data; tests add ``parameters`` and override sections."""
    return {
        "name": name,
        "description": "reliability test space",
        "backend": "sim",
        "profile": profile,
        "model_path": "sim/Llama-3.1-8B",
        "draft_model_path": "sim/Llama-3.1-8B-EAGLE3",
        "fixed_args": dict(EAGLE3_FIXED),
        "fixed_env": {TOKEN_ENV: token},
        "parameters": {},
        "workload": dict(TINY_WORKLOAD),
        "measure": {"repeats": 1, "startup_timeout_s": 60},
        "objective": {"metric": "output_tok_s", "direction": "maximize"},
        "constraints": {"min_speedup": 1.0},
        "budget": {"trials": 4},
        "resources": {"cpus_per_trial": 1},
        "search": {"sampler": "tpe", "seed": 0, "finalists": 0, "finalist_repeats": 1},
    }


_REPLACED = ("parameters", "fixed_args")


def merged(space: dict[str, Any], **sections: Any) -> dict[str, Any]:
    """A copy of ``space`` with sections replaced: ``parameters`` and ``fixed_args`` as given,
    other dict sections merged one level deep (``fixed_env`` keeps the token)."""
    out = copy.deepcopy(space)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key not in _REPLACED:
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def write_space(directory: Path, space: dict[str, Any]) -> Path:
    """Write ``space`` to ``<directory>/<name>.yaml`` and return the path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{space['name']}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path
