"""scripts/gpu/rebind_probe.py's verdict on the committed local run of SGLang 0.5.17's modules, as
recorded and changed the ways a failed rebind would show."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "gpu"))

from rebind_probe import verdict  # noqa: E402

from autotune.sglang.speculative import SIMULATE_ACC_LEN_UNSET  # noqa: E402

ROWS = json.loads((REPO / "docs/measurements/raw/cpu-2026-12-06-rebind/rebind-probe.json").read_text())
NAME = "SGLANG_SIMULATE_ACC_LEN"


def _row(value: str | None) -> dict[str, Any]:
    return copy.deepcopy(next(r for r in ROWS if r["value"] == value))


def test_the_recorded_run_holds() -> None:
    assert [r["value"] for r in ROWS] == ["2.756", None]
    for row in ROWS:
        assert verdict(row, name=NAME, unset=SIMULATE_ACC_LEN_UNSET) == []


def test_a_child_that_kept_the_probes_binding_fails() -> None:
    row = _row("2.756")
    row["child"]["vars"][NAME]["defaults"]["generate_simulated_accept_index"] = 1.0009765625
    assert verdict(row, name=NAME, unset=SIMULATE_ACC_LEN_UNSET) == [
        "default generate_simulated_accept_index is 1.0009765625, not 2.756"]


def test_a_spawned_child_fails_even_with_the_right_values() -> None:
    row = _row(None)
    row["children"] = {"forked": 0, "spawned": 1, "why_spawned": ["SGLANG_SIMULATE_ACC_LEN differ(s)"],
                       "rebound": []}
    [why] = verdict(row, name=NAME, unset=SIMULATE_ACC_LEN_UNSET)
    assert why.startswith("the child was not forked: ['SGLANG_SIMULATE_ACC_LEN differ(s)']")


def test_too_few_bindings_reported_fails() -> None:
    row = _row("2.756")
    row["child"]["vars"][NAME]["defaults"] = {}
    assert verdict(row, name=NAME, unset=SIMULATE_ACC_LEN_UNSET) == [
        "only 2 binding(s) reported: ['global sglang.srt.speculative.spec_utils', 'reader']"]
