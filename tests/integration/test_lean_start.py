"""``measure.lean_start``: trial servers start and stop lean, measured the same, never exported lean.

Real emulator servers (subprocesses on 127.0.0.1); the emulator honours ``--skip-server-warmup``
and pauses on SIGTERM like SGLang's crash diagnostics (``AUTOTUNE_SIM_STOP_DIAG_S``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.launch.serving import serving_spec
from autotune.space.workload import Workload
from autotune.trial.measure import launch_spec, measure
from autotune.trial.measure_settings import settings_for

PAUSE_S = 4.0


def _measure(space_factory, tmp_path: Path, *, lean: bool, params: dict):
    space = space_factory(measure={"lean_start": lean})
    settings = settings_for(space, workdir=str(tmp_path / ("lean" if lean else "full")))
    # A grace longer than the pause: the pause, not SIGKILL, decides how long the stop takes.
    settings = type(settings)(**{**settings.__dict__, "grace_s": 30.0})
    workload = Workload.from_spec(space.workload, file=space.file)
    return space, measure(space.trial_config(params), workload, settings)


@pytest.mark.parametrize("params", [{"speculative_algorithm": None},
                                    {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}],
                         ids=["baseline", "eagle3"])
def test_lean_trial_skips_sglangs_warmup_and_the_stop_pause_and_caps_decode_graphs(
        sim_env, space_factory, tmp_path, monkeypatch, params):
    monkeypatch.setenv("AUTOTUNE_SIM_STOP_DIAG_S", str(PAUSE_S))
    space, result = _measure(space_factory, tmp_path, lean=True, params=params)
    assert result.ok, result.reason
    assert "--skip-server-warmup" in result.launch_command
    assert "--cuda-graph-max-bs-decode 1" in result.launch_command  # the workload's concurrency is 1
    log = Path(result.log_path).read_text()
    assert "SIGTERM" in log or "Received" in log  # it was stopped ...
    assert "before crash diagnostics" not in log  # ... without the pause
    # The served command is the exported one: none of the trial's shortcuts.
    spec = launch_spec(space.trial_config(params), settings_for(space),
                       workload=Workload.from_spec(space.workload, file=space.file))
    assert spec.trial_only == {"skip_server_warmup", "cuda_graph_max_bs_decode"}
    served = serving_spec(spec).argv()
    assert "--skip-server-warmup" not in served and "--cuda-graph-max-bs-decode" not in served


@pytest.mark.slow
def test_full_start_keeps_sglangs_warmup_and_pays_the_stop_pause(sim_env, space_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_SIM_STOP_DIAG_S", str(PAUSE_S))
    _, result = _measure(space_factory, tmp_path, lean=False, params={"speculative_algorithm": None})
    assert result.ok, result.reason
    assert "--skip-server-warmup" not in result.launch_command
    assert "--cuda-graph-max-bs-decode" not in result.launch_command
    log = Path(result.log_path).read_text()
    assert "Sleeping 4 seconds before crash diagnostics" in log and "skipping py-spy" in log
    assert result.duration_s is not None and result.duration_s >= PAUSE_S  # the stop is inside duration_s


def test_a_space_without_own_warmup_keeps_sglangs(space_factory):
    space = space_factory(workload={"warmup_prompts": 0}, measure={"warmup_until_stable_pct": None})
    spec = launch_spec(space.trial_config({"speculative_algorithm": None}), settings_for(space),
                       workload=Workload.from_spec(space.workload, file=space.file))
    assert "skip_server_warmup" not in spec.server_args  # nothing else would warm the server up
    assert spec.server_args["cuda_graph_max_bs_decode"] == 1


def test_lean_start_false_in_a_space_is_read(space_factory):
    space = space_factory(measure={"lean_start": False})
    assert space.measure.lean_start is False and settings_for(space).lean_start is False
    assert settings_for(space_factory()).lean_start is True
