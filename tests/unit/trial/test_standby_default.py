"""``measure.standby`` unset is the backend's default: on for SGLang (measured on GPU hosts), off for
the emulator; a space that sets it wins either way."""

from __future__ import annotations

from pathlib import Path

import yaml

from autotune.backend import BACKENDS
from autotune.space.search_space import load_space
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


def test_prefork_follows_the_backend_and_never_goes_without_a_standby(space_factory: SpaceFactory) -> None:
    assert settings_for(load_space(GPU_SPACE)).prefork is BACKENDS["sglang"].prefork_by_default
    assert settings_for(space_factory(measure={"standby": True, "prefork": True})).prefork is True
    # Standby off (the emulator's default): no fork server either, whatever the backend's default.
    assert settings_for(space_factory(measure={"prefork": None})).prefork is False
    assert settings_for(space_factory(measure={"standby": True, "prefork": False})).prefork is False
