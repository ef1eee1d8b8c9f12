"""``measure.standby`` unset is the backend's default: on for SGLang (measured on GPU hosts), off for
the emulator; a space that sets it wins either way."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from autotune.backend import BACKENDS
from autotune.space.search_space import load_space
from autotune.trial import measure_settings
from autotune.trial.measure_settings import settings_for
from tests.conftest import SpaceFactory

GPU_SPACE = Path(__file__).resolve().parents[3] / "scripts" / "gpu" / "h200-llama-8b.yaml"


def test_unset_follows_the_backend(space_factory: SpaceFactory) -> None:
    assert BACKENDS["sglang"].standby_by_default and not BACKENDS["sim"].standby_by_default
    sim = space_factory()
    assert sim.backend == "sim" and sim.measure.standby is None
    assert settings_for(sim).standby is False
    gpu = load_space(GPU_SPACE)
    assert gpu.backend == "sglang" and gpu.measure.standby is None
    assert settings_for(gpu).standby is True


def test_a_space_that_sets_it_wins(space_factory: SpaceFactory, tmp_path: Path) -> None:
    assert settings_for(space_factory(measure={"standby": True})).standby is True
    data = yaml.safe_load(GPU_SPACE.read_text())
    data["measure"]["standby"] = False
    data["model_path"] = str(GPU_SPACE.parent / data["model_path"])  # the copy lives elsewhere
    data["draft_model_path"] = str(GPU_SPACE.parent / data["draft_model_path"])
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump(data, sort_keys=False))
    assert settings_for(load_space(off)).standby is False
    # An explicit null is the default, as if unset (a non-boolean is refused: tests/unit/space/test_space.py).
    assert settings_for(space_factory(measure={"standby": None})).standby is False


def _gpu_copy(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load(GPU_SPACE.read_text())
    data["model_path"] = str(GPU_SPACE.parent / data["model_path"])  # the copy lives elsewhere
    data["draft_model_path"] = str(GPU_SPACE.parent / data["draft_model_path"])
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / "copy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_prefork_follows_the_backend_and_never_goes_without_a_standby(space_factory: SpaceFactory,
                                                                      tmp_path: Path) -> None:
    assert BACKENDS["sglang"].prefork_by_default
    real = load_space(_gpu_copy(tmp_path, synthetic_acceptance=None))  # a draft of its own: nothing forced
    assert real.varying_env() == frozenset() and settings_for(real).prefork is True
    assert settings_for(space_factory(measure={"standby": True, "prefork": True})).prefork is True
    # Standby off (the emulator's default): no fork server either, whatever the backend's default.
    assert settings_for(space_factory(measure={"prefork": None})).prefork is False
    assert settings_for(space_factory(measure={"standby": True, "prefork": False})).prefork is False


def test_prefork_is_on_by_default_where_what_its_imports_read_is_rebound(tmp_path: Path) -> None:
    # Synthetic acceptance sets SGLANG_SIMULATE_ACC_LEN per config, which SGLang's spec_utils binds at
    # import: each forked child binds its own value again (autotune_prefork_rebind).
    forced = load_space(GPU_SPACE)
    assert "SGLANG_SIMULATE_ACC_LEN" in forced.varying_env()
    assert "SGLANG_SIMULATE_ACC_LEN" in BACKENDS["sglang"].prefork_rebind
    assert settings_for(forced).standby is True and settings_for(forced).prefork is True


def test_prefork_is_off_by_default_where_configs_differ_in_what_its_imports_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A backend whose fork server could not bind the variable again: no child could be forked from a
    # fork server that read another config's value.
    unbound = dataclasses.replace(BACKENDS["sglang"], prefork_import_reads=("SGLANG_SIMULATE_ACC_LEN",),
                                  prefork_rebind={})
    monkeypatch.setattr(measure_settings, "get_backend", lambda name: unbound)
    forced = load_space(GPU_SPACE)
    assert settings_for(forced).standby is True and settings_for(forced).prefork is False
    # A space that asks for it still gets it (its children are spawned, the log says why).
    data = yaml.safe_load(GPU_SPACE.read_text())
    asked = load_space(_gpu_copy(tmp_path, measure={**data["measure"], "prefork": True}))
    assert settings_for(asked).prefork is True