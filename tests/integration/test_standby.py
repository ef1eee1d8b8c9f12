"""``measure.standby``: the next server launched by a standby launcher whose imports are done.

Real emulator servers and real standby processes (subprocesses on 127.0.0.1). Each test waits
for the standby to say it is ready instead of assuming how long its imports take.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from autotune.server.standby import Standby, env_differences
from autotune.space.workload import Workload
from autotune.trial import standby_slot
from autotune.trial.measure import measure
from autotune.trial.measure_settings import settings_for
from tests.data_venv import data_python

BASELINE = {"speculative_algorithm": None}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of ours is gone for our purpose; it is reaped by its Popen.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def space(space_factory, sim_env):
    return space_factory(measure={"standby": True, "repeats": 1})


def _settings(space, tmp_path: Path):
    return settings_for(space, workdir=str(tmp_path / "logs"))


def test_the_next_server_is_launched_by_the_standby_that_started_beside_this_one(space, tmp_path):
    workload = Workload.from_spec(space.workload, file=space.file)
    settings = _settings(space, tmp_path)
    standby_slot.discard()
    try:
        first = measure(space.trial_config(BASELINE), workload, settings)
        assert first.ok, first.reason
        assert first.standby is not None and "used" not in first.standby  # the process's first server
        held = standby_slot.take()
        assert held is not None, "a standby was started beside the first server"
        assert held.ready(timeout_s=120.0), held.log_path.read_text()[-2000:]
        # Measured while the standby waited: it took no CPU then (blocked in read()).
        assert first.standby["next_cpu_s_measuring"] is not None and first.standby["next_cpu_s_measuring"] <= 0.05
        pid = held.pid
        standby_slot._held = held  # back in its slot for the next measure() to take
        second = measure(space.trial_config(BASELINE), workload, settings)
        assert second.ok, second.reason
        assert second.standby is not None and second.standby["used"] is True, second.standby
        assert second.standby["import_s"] is not None and second.standby["started_s_before"] > 0
        log = Path(second.log_path).read_text()
        assert "launched by a standby" in log and "Uvicorn running" in log  # the server's output, in its log
        assert second.output_tok_s is not None and second.output_tok_s > 0  # it served as a fresh launch
        assert _gone(pid), "the standby became the server, and it was stopped with it"
        assert first.launch_command == second.launch_command
    finally:
        standby_slot.discard()


def test_a_standby_is_refused_where_its_environment_differs_and_ends(space, tmp_path):
    workload = Workload.from_spec(space.workload, file=space.file)
    settings = _settings(space, tmp_path)
    env = {**os.environ, "SGLANG_HEALTH_CHECK_TIMEOUT": "33"}  # read by the emulator at import time
    logs = tmp_path / "logs"
    logs.mkdir()
    held = Standby(python=settings.python, module="autotune.sim.server",
                   preimport=("autotune.sim.app",), env=env, cwd=os.getcwd(),
                   late_env=("AUTOTUNE_SIM_*",), log_path=logs / "standby.log")
    try:
        assert held.ready(timeout_s=120.0), held.log_path.read_text()[-2000:]
        standby_slot.discard()
        standby_slot._held = held
        result = measure(space.trial_config(BASELINE), workload, settings)
        assert result.ok, result.reason
        assert result.standby is not None and result.standby["used"] is False
        assert "SGLANG_HEALTH_CHECK_TIMEOUT" in result.standby["why_not"]
        assert "standby not used" in Path(result.log_path).read_text()
        assert _gone(held.pid), "a refused standby is ended"
    finally:
        held.discard()
        standby_slot.discard()


def test_why_not_names_another_program_or_folder_and_late_variables_pass(tmp_path):
    env = {"PATH": os.environ.get("PATH", ""), "AUTOTUNE_SIM_SEED": "1"}
    held = Standby(python=sys.executable, module="json.tool", preimport=("json",), env=env, cwd=str(tmp_path),
                   late_env=("AUTOTUNE_SIM_*",), log_path=tmp_path / "standby.log")
    try:
        assert held.ready(timeout_s=60.0)
        argv = [sys.executable, "-m", "json.tool"]
        assert held.why_not(argv, env={**env, "AUTOTUNE_SIM_SEED": "2"}, cwd=str(tmp_path)) is None
        assert held.why_not(argv, env={**env, "EXTRA": "1"}, cwd=str(tmp_path)) == (
            "the environment differs in EXTRA, which its imports may have read")
        assert "another program" in held.why_not([sys.executable, "-m", "json"], env=env, cwd=str(tmp_path))
        # A folder that would shadow a module its imports took from elsewhere (`python -m` looks
        # in the working directory first): refused; any other folder is fine (Ray Tune runs each
        # trial in its own).
        shadowing = tmp_path / "work"
        (shadowing / "json").mkdir(parents=True)
        (shadowing / "json" / "__init__.py").write_text("")
        assert "holds json" in held.why_not(argv, env=env, cwd=str(shadowing))
        assert held.why_not(argv, env=env, cwd="/") is None
        # A built-in module cannot be shadowed from a folder, nor can a module by a folder that is
        # only a namespace portion (no __init__.py): neither is refused.
        builtin = tmp_path / "builtin"
        (builtin / "sys").mkdir(parents=True)
        (builtin / "sys" / "__init__.py").write_text("")
        (builtin / "json").mkdir()
        assert held.why_not(argv, env=env, cwd=str(builtin)) is None
        assert env_differences({"A": "1", "B": "2"}, {"A": "1", "C": "3"}) == {"B": None, "C": "3"}
    finally:
        held.discard()
    assert _gone(held.pid)
    assert held.proc.returncode == 0  # end of file on its stdin: it left by itself


def test_the_standby_dies_with_its_owner(tmp_path):
    # A process that holds a standby is SIGKILLed: the reaper sidecar ends the standby.
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""\
        import os, sys, time
        from pathlib import Path
        from autotune.server.standby import Standby
        held = Standby(python=sys.executable, module="json.tool", preimport=("json",), env=dict(os.environ),
                       cwd={str(tmp_path)!r}, late_env=(), log_path=Path({str(tmp_path / "s.log")!r}))
        assert held.ready(timeout_s=60.0)
        print(held.pid, flush=True)
        time.sleep(600)
        """))
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
        assert _alive(pid)
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        assert _gone(pid, timeout_s=60.0), "the standby outlived its owner"
    finally:
        if owner.poll() is None:
            owner.kill()


@pytest.mark.slow  # SGLang's real imports, twice (about 10 s)
def test_a_real_sglang_launcher_runs_from_a_standby_as_from_python_m(tmp_path):
    """SGLang's own ``sglang.launch_server``, in the environment that has what its imports need
    (``.venv-sglang-data``; no GPU here, so a bad flag stops it at argument parsing, after every
    import): run fresh and run by a standby that imported the backend's ``preimport`` first, it
    exits the same way and prints the same error."""
    from autotune.backend import get_backend

    python = str(data_python())
    sglang = get_backend("sglang")
    args = ["--model-path", "x", "--not-a-flag"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    fresh = subprocess.run([python, "-m", sglang.module, *args], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=240)
    held = Standby(python=python, module=sglang.module, preimport=sglang.preimport, env=env,
                   cwd=str(tmp_path), late_env=sglang.late_env, log_path=tmp_path / "standby.log",
                   main_block=sglang.main_block, plugin_groups=sglang.plugin_groups)
    try:
        assert held.ready(timeout_s=240.0), held.log_path.read_text()[-2000:]
        assert held.import_s is not None and held.import_s > 0
        assert held.main_block is not None and held.main_block["why_not"] is None and held.main_block["modules"] > 0, (
            held.main_block)
        argv = [python, "-m", sglang.module, *args]
        assert held.why_not(argv, env=env, cwd=str(tmp_path)) is None
        proc = held.hand_over(argv, env=env, cwd=str(tmp_path), log_path=tmp_path / "server.log")
        assert proc.wait(timeout=240) == fresh.returncode == 2
    finally:
        held.discard()
    last = (tmp_path / "server.log").read_text().strip().splitlines()[-1]
    assert last == fresh.stderr.strip().splitlines()[-1] and "unrecognized arguments: --not-a-flag" in last


def test_a_standby_that_died_is_passed_over_and_the_server_launched_afresh(space, tmp_path):
    workload = Workload.from_spec(space.workload, file=space.file)
    settings = _settings(space, tmp_path)
    standby_slot.discard()
    try:
        measure(space.trial_config(BASELINE), workload, settings)  # leaves a standby for the next server
        held = standby_slot.take()
        assert held is not None and held.ready(timeout_s=120.0)
        os.kill(held.pid, signal.SIGKILL)
        held.proc.wait(timeout=30)
        standby_slot._held = held
        result = measure(space.trial_config(BASELINE), workload, settings)
        assert result.ok, result.reason  # a dead standby never fails a trial
        assert result.standby is not None and result.standby["used"] is False
        assert "exited" in result.standby["why_not"]
    finally:
        standby_slot.discard()


def test_a_standby_given_to_a_server_that_never_starts_is_ended(tmp_path):
    from autotune.server.process import ServerProcess

    held = Standby(python=sys.executable, module="json.tool", preimport=("json",), env=dict(os.environ),
                   cwd=str(tmp_path), late_env=(), log_path=tmp_path / "standby.log")
    assert held.ready(timeout_s=60.0)
    server = ServerProcess([sys.executable, "-m", "json.tool", "{port}"], standby=held, log_path=tmp_path / "s.log")
    server.stop()  # before start(): its standby must not be left waiting
    assert _gone(held.pid) and held.proc.returncode == 0


def test_the_measurement_waits_for_a_standby_that_is_ready_within_its_bound(tmp_path, monkeypatch):
    # The standby's import blocks until a gate file appears; it is opened while check_ready waits,
    # which waits up to as long as the standby has been importing, so the standby is kept.
    from autotune.trial import standby_slot

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "gated.py").write_text(textwrap.dedent("""\
        import os, time
        open(os.environ["GATE"] + ".waiting", "w").close()
        while not os.path.exists(os.environ["GATE"]):
            time.sleep(0.05)
        """))
    gate = tmp_path / "gate"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(pkg), "GATE": str(gate)}
    held = Standby(python=sys.executable, module="json.tool", preimport=("gated",), env=env, cwd=str(tmp_path),
                   late_env=(), log_path=tmp_path / "standby.log")
    monkeypatch.setattr(standby_slot, "_held", held)
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{gate}.waiting").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Path(f"{gate}.waiting").exists(), held.log_path.read_text()[-2000:]
        while time.monotonic() - held.started_at < 4.0:  # the bound check_ready will allow
            time.sleep(0.1)
        assert not held.ready()
        opener = threading.Timer(1.0, gate.touch)
        opener.start()
        ended, waited = standby_slot.check_ready()
        opener.join()
        assert ended is None and standby_slot.take() is held and held.ready()
        assert 0.9 <= waited < time.monotonic() - held.started_at, waited
        # With none held there is nothing to wait for.
        monkeypatch.setattr(standby_slot, "_held", None)
        assert standby_slot.check_ready() == (None, 0.0)
    finally:
        held.discard()
