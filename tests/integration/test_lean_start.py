"""``measure.lean_start``: trial servers start and stop lean, measured the same, never exported lean.

Real emulator servers (subprocesses on 127.0.0.1); the emulator honours ``--skip-server-warmup``
and pauses on SIGTERM like SGLang's crash diagnostics (``AUTOTUNE_SIM_STOP_DIAG_S``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.launch.serving import serving_spec
from autotune.sglang.graph_sizes import prefill_graph_token_sizes
from autotune.sglang.trial_start import covering_prefill_max_tokens
from autotune.space.workload import Workload
from autotune.trial.measure import launch_spec, measure
from autotune.trial.measure_settings import settings_for
from autotune.trial.prefill_bound import prefill_token_bound, request_token_bound

PAUSE_S = 4.0
#: The graph caps need the KV pool fixed by the launch (autotune.sglang.trial_start's text).
FIXED = {"mem_fraction_static": 0.85}


def _measure(space_factory, tmp_path: Path, *, lean: bool, params: dict):
    space = space_factory(measure={"lean_start": lean}, fixed_args=FIXED)
    settings = settings_for(space, workdir=str(tmp_path / ("lean" if lean else "full")))
    # A grace longer than the pause: the pause, not SIGKILL, decides how long the stop takes.
    settings = type(settings)(**{**settings.__dict__, "grace_s": 30.0})
    workload = Workload.from_spec(space.workload, file=space.file)
    return space, measure(space.trial_config(params), workload, settings)


@pytest.mark.parametrize("params", [{"speculative_algorithm": None},
                                    {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}],
                         ids=["baseline", "eagle3"])
def test_lean_trial_skips_sglangs_warmup_and_the_stop_pause_and_caps_graphs(
        sim_env, space_factory, tmp_path, monkeypatch, params):
    monkeypatch.setenv("AUTOTUNE_SIM_STOP_DIAG_S", str(PAUSE_S))
    space, result = _measure(space_factory, tmp_path, lean=True, params=params)
    assert result.ok, result.reason
    assert "--skip-server-warmup" in result.launch_command
    assert "--cuda-graph-max-bs-decode 1" in result.launch_command  # the workload's concurrency is 1
    workload = Workload.from_spec(space.workload, file=space.file)
    bound = prefill_token_bound(workload)
    assert bound is not None and bound == max(request_token_bound(p) for p in [*workload.warmup(),
                                                                              *workload.measured()])
    cap = covering_prefill_max_tokens(bound)
    assert cap is not None and f"--cuda-graph-max-bs-prefill {cap}" in result.launch_command
    log = Path(result.log_path).read_text()
    # The emulator captured the prefill sizes up to the cap, as SGLang would: a prefix of its 58.
    assert f"num_tokens={prefill_graph_token_sizes(cap)}" in log
    assert "SIGTERM" in log or "Received" in log  # it was stopped ...
    assert "before crash diagnostics" not in log  # ... without the pause
    # The served command is the exported one: none of the trial's shortcuts.
    spec = launch_spec(space.trial_config(params), settings_for(space), workload=workload)
    assert spec.trial_only == {"skip_server_warmup", "cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill"}
    served = serving_spec(spec).argv()
    assert not {"--skip-server-warmup", "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"} & set(served)


def test_no_graph_caps_where_the_kv_pool_follows_the_graphs(space_factory):
    # Without mem_fraction_static SGLang sizes the KV pool from a reserve that counts the graphs.
    space = space_factory()
    spec = launch_spec(space.trial_config({"speculative_algorithm": None}), settings_for(space),
                       workload=Workload.from_spec(space.workload, file=space.file))
    assert spec.trial_only == {"skip_server_warmup"}


def test_no_prefill_cap_for_the_chat_api_or_large_prompts(space_factory):
    for workload in ({"api": "chat"}, {"output_len": 4096, "concurrency": 4}):
        space = space_factory(fixed_args=FIXED, workload=workload)
        spec = launch_spec(space.trial_config({"speculative_algorithm": None}), settings_for(space),
                           workload=Workload.from_spec(space.workload, file=space.file))
        assert "cuda_graph_max_bs_prefill" not in spec.server_args, workload
        assert "cuda_graph_max_bs_decode" in spec.trial_only


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
    space = space_factory(workload={"warmup_prompts": 0}, measure={"warmup_until_stable_pct": None},
                          fixed_args=FIXED)
    spec = launch_spec(space.trial_config({"speculative_algorithm": None}), settings_for(space),
                       workload=Workload.from_spec(space.workload, file=space.file))
    assert "skip_server_warmup" not in spec.server_args  # nothing else would warm the server up
    assert spec.server_args["cuda_graph_max_bs_decode"] == 1


def test_lean_start_false_in_a_space_is_read(space_factory):
    space = space_factory(measure={"lean_start": False})
    assert space.measure.lean_start is False and settings_for(space).lean_start is False
    assert settings_for(space_factory()).lean_start is True
