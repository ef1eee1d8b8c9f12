"""``measure.prefork`` where the children's modules bind a variable at import that each server sets
differently (SGLang's ``SGLANG_SIMULATE_ACC_LEN`` with synthetic acceptance): the forked child binds
its own value again in every place the fork server's import bound it, and is spawned where that
cannot be shown complete.

A small package written here: a reader module parses the variable as SGLang's ``envs`` does, one
module binds it as a global and as two functions' defaults, another imports the name. Real standby,
fork-server and launcher processes; each test waits for the events it checks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.server.standby import Standby, prefork_children
from tests.fakes.fake_launcher import dispose, env_for, write_package

LAUNCH = '''
import json, multiprocessing as mp, os, sys
from fakerb import child


def main():
    mp.set_start_method("spawn", force=True)
    r, w = mp.Pipe(duplex=False)
    p = mp.Process(target=child.run, args=(w,))
    p.start()
    said = r.recv()
    p.join()
    said["launcher_pid"] = os.getpid()
    print("RESULT " + json.dumps(said), flush=True)
    sys.exit(p.exitcode)

if __name__ == "__main__":
    main()
'''
ENVS = '''
import os


class _Float:
    def __init__(self, name, default):
        self.name, self.default = name, default

    def get(self):
        value = os.getenv(self.name)
        return self.default if value is None else float(value)


class envs:
    FAKE_LEN = _Float("FAKE_LEN", -1)
'''
BOUND = '''
import os
from fakerb.envs import envs

PID = os.getpid()
LEN = envs.FAKE_LEN.get()


def draw(n, length=LEN, method="expected"):
    return length


def keyword(*, length=LEN):
    return length
'''
ALIAS = "from fakerb.bound import LEN\n"
LISTED = "from fakerb.bound import LEN\nKEPT = [LEN]\n"
DERIVED = "from fakerb.envs import envs\nON = envs.FAKE_LEN.get() > 0\n"
# As fsspec, tqdm and SGLang's own environ module do at import: a scan that keeps one prefix.
# As fsspec, tqdm and SGLang's own environ module do at import: a scan that keeps one prefix; and as
# the standard library's platform module does: a copy of the environment for a command, let go.
SCANNER = """
import os
KEPT = {k: v for k, v in os.environ.items() if k.startswith('FAKESCAN_')}


def _command_env():
    return len(dict(os.environ, LC_ALL="C"))


_N = _command_env()
"""
# A module that scans the environment and reads the variable itself too.
BOTH = """
import os
KEPT = {k: v for k, v in os.environ.items() if k.startswith('FAKESCAN_')}
ALSO = os.environ["FAKE_LEN"]
"""
CHILD = '''
import os


def run(w):
    from fakerb import alias, bound
    from fakerb.envs import envs
    w.send({"pid": os.getpid(), "imported_in": bound.PID, "global": bound.LEN, "alias": alias.LEN,
            "default": bound.draw(0), "keyword": bound.keyword(), "reader": envs.FAKE_LEN.get()})
'''
PROBE = "1.0009765625"
REBIND = {"FAKE_LEN": {"module": "fakerb.bound", "global": "LEN", "reader": "fakerb.envs:envs.FAKE_LEN.get",
                       "probe": PROBE}}


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    return write_package(tmp_path / "pkg", "fakerb", {
        "__init__": "", "launch": LAUNCH, "envs": ENVS, "bound": BOUND, "alias": ALIAS, "listed": LISTED,
        "derived": DERIVED, "scanner": SCANNER, "both": BOTH, "child": CHILD})


def _env(pkg: Path, **extra: str) -> dict[str, str]:
    return env_for(pkg, drop="FAKE", **extra)


def _run(pkg: Path, tmp_path: Path, *, prefork: list[str], start_env: dict[str, str],
         server_env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any], str]:
    tmp_path.mkdir(exist_ok=True)
    standby = Standby(python=sys.executable, module="fakerb.launch", preimport=["fakerb.child"], env=start_env,
                      cwd=str(tmp_path), late_env=["FAKE*"], log_path=tmp_path / "standby.log", prefork=prefork,
                      prefork_scans={"fakerb.scanner": ["FAKESCAN_"], "fakerb.both": ["FAKESCAN_"]},
                      prefork_rebind=REBIND)
    try:
        assert standby.ready(timeout_s=120.0), (tmp_path / "standby.log").read_text()[-2000:]
        assert standby.prefork is not None and standby.prefork["ok"] is True, standby.prefork
        log = tmp_path / "server.log"
        proc, note = standby.launch([sys.executable, "-m", "fakerb.launch"], env=server_env, cwd=tmp_path,
                                    log_path=log)
        assert proc is not None, note
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
        text = log.read_text()
        said = json.loads(next(ln for ln in text.splitlines() if ln.startswith("RESULT "))[7:])
        return standby.prefork, said, text
    finally:
        dispose(standby)


def _bound(said: dict[str, Any]) -> list[float]:
    return [said[k] for k in ("global", "alias", "default", "keyword", "reader")]


@pytest.mark.parametrize("start, server, want", [
    (None, "2.5", 2.5),     # the standby started beside a baseline, the server a speculative config
    ("3.25", "2.5", 2.5),   # beside another speculative config
    ("2.5", None, -1),      # a baseline after a speculative config: the reader's default
])
def test_a_forked_child_binds_its_own_value_everywhere_the_import_bound_it(pkg, tmp_path, start, server, want):
    # The scanner reads FAKE_LEN too, as a scan of the whole environment does: not a read of it.
    prefork, said, log = _run(pkg, tmp_path, prefork=["fakerb.scanner", "fakerb.bound", "fakerb.alias"],
                              start_env=_env(pkg, **({"FAKE_LEN": start} if start else {})),
                              server_env=_env(pkg, **({"FAKE_LEN": server} if server else {})))
    assert prefork["rebind"]["FAKE_LEN"]["ok"] is True, prefork["rebind"]
    assert sorted(prefork["rebind"]["FAKE_LEN"]["sites"]) == [
        "fakerb.alias.LEN", "fakerb.bound.LEN", "fakerb.bound.draw (default)", "fakerb.bound.keyword (length)"]
    # Forked: imported once, in the fork server (with the probe), yet every binding is the child's own.
    assert said["imported_in"] == prefork["pid"] != said["pid"], log
    children = prefork_children(tmp_path / "server.log")
    assert children is not None and (children["forked"], children["spawned"]) == (1, 0), log
    assert _bound(said) == [want] * 5, log
    [rebound] = children["rebound"]
    assert rebound.startswith(f"FAKE_LEN: {float(PROBE)!r} (the fork server's probe) -> {want!r} in 4 place(s)")
    assert "FAKE_LEN, rebound in the child" in log


def test_the_same_values_as_a_spawned_child(pkg, tmp_path):
    # The oracle: no fork server at all, the child imports the modules itself.
    spawned_env = _env(pkg, FAKE_LEN="2.5")
    standby = Standby(python=sys.executable, module="fakerb.launch", preimport=["fakerb.child"], env=spawned_env,
                      cwd=str(tmp_path), late_env=["FAKE*"], log_path=tmp_path / "standby.log")
    try:
        assert standby.ready(timeout_s=120.0)
        proc, note = standby.launch([sys.executable, "-m", "fakerb.launch"], env=spawned_env, cwd=tmp_path,
                                    log_path=tmp_path / "spawned.log")
        assert proc is not None and proc.wait(timeout=120) == 0
    finally:
        dispose(standby)
    text = (tmp_path / "spawned.log").read_text()
    spawned = json.loads(next(ln for ln in text.splitlines() if ln.startswith("RESULT "))[7:])
    assert spawned["imported_in"] == spawned["pid"]
    _, forked, _ = _run(pkg, tmp_path / "forked", prefork=["fakerb.bound", "fakerb.alias"],
                        start_env=_env(pkg, FAKE_LEN="3.25"), server_env=spawned_env)
    assert forked["imported_in"] != forked["pid"]
    assert _bound(forked) == _bound(spawned) == [2.5] * 5


@pytest.mark.parametrize("module, why", [
    ("fakerb.listed", "a list holds its value"),
    ("fakerb.derived", "fakerb.derived read it while importing too"),
    ("fakerb.both", "fakerb.both read it while importing too"),  # a scanner's own read still counts
])
def test_a_binding_it_cannot_follow_sends_the_child_to_a_spawn(pkg, tmp_path, module, why):
    prefork, said, log = _run(pkg, tmp_path, prefork=["fakerb.bound", "fakerb.alias", module],
                              start_env=_env(pkg, FAKE_LEN="3.25"), server_env=_env(pkg, FAKE_LEN="2.5"))
    assert prefork["rebind"]["FAKE_LEN"] == {"ok": False, "why_not": why, "sites": []}
    # Spawned: its own import read its own value; the fork server read the probe, not the standby's 3.25.
    assert said["imported_in"] == said["pid"], log
    children = prefork_children(tmp_path / "server.log")
    assert children is not None and children["forked"] == 0 and children["spawned"] == 1, log
    assert "FAKE_LEN differ(s) from what the fork server's imports read" in children["why_spawned"][0]
    assert _bound(said) == [2.5] * 5


def test_a_server_with_the_probes_value_is_still_rebound_not_taken_as_read(pkg, tmp_path):
    # Equal to the probe: nothing differs, so the child is forked; its bindings are the probe's, as its
    # own import's would be.
    prefork, said, log = _run(pkg, tmp_path, prefork=["fakerb.bound", "fakerb.alias"], start_env=_env(pkg),
                              server_env=_env(pkg, FAKE_LEN=PROBE))
    assert said["imported_in"] != said["pid"]
    assert _bound(said) == [float(PROBE)] * 5
